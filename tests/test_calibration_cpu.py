"""Calibration on this CPU: the profiler, the CLI and a real small-grid fit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibration import cli  # noqa: E402
from calibration import profile as profile_module  # noqa: E402
from calibration.fit import fit_samples, split_held_out  # noqa: E402
from calibration.model import LlamaModel  # noqa: E402
from calibration.profile import Grid, GridPoint, build_grid, profile_grid  # noqa: E402
from sim.cost.calibrated import CalibratedCost, load_artifact  # noqa: E402
from sim.engine.scheduler import ContinuousSettings  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from sim.hardware.specs import ModelSpec, model_preset  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

MICRO = ModelSpec(
    name="micro",
    num_layers=1,
    hidden_size=32,
    num_attention_heads=4,
    num_kv_heads=2,
    intermediate_size=48,
    vocab_size=100,
    weight_dtype_bytes=4.0,
    kv_dtype_bytes=4.0,
)


def _micro_grid() -> Grid:
    points = [GridPoint("prefill", ((n, 0),)) for n in (4, 8, 16, 32, 64)]
    points += [GridPoint("prefill", ((8, 16),)), GridPoint("prefill", ((4, 0), (4, 0)))]
    points += [GridPoint("decode", decode_contexts=(c,) * b) for b in (1, 2, 4) for c in (8, 32)]
    points += [GridPoint("mixed", ((8, 0),), (16,) * b) for b in (1, 2, 3, 4)]
    return Grid("micro", tuple(points), num_warmup=1, num_repeats=2)


@pytest.mark.parametrize("name", ["small", "default", "compact", "ci", "gpu"])
def test_grids_cover_all_sections_with_valid_points(name: str) -> None:
    grid = build_grid(name)
    assert {p.section for p in grid.points} == {"prefill", "decode", "mixed"}
    assert grid.num_repeats >= 3
    for point in grid.points:
        shape = point.shape
        assert not shape.is_empty
        assert (shape.num_prefill_seqs > 0) == (point.section != "decode")
        assert (shape.num_decode_seqs > 0) == (point.section != "prefill")
    assert len(set(grid.points)) == len(grid.points)


def test_the_compact_grid_spans_the_smollm2_validation_scenario() -> None:
    # The fit interpolates well and extrapolates badly: the grid must reach the
    # largest batch, chunk, prompt and context the scenario can produce.
    scenario = load_scenario(ROOT / "scenarios" / "validate_smollm2_cpu.yaml")
    grid = build_grid("compact")
    scheduler, engine = scenario.scheduler, scenario.engine
    assert isinstance(scheduler, ContinuousSettings)  # limits filled in by the scenario
    assert scheduler.max_num_seqs is not None and scheduler.max_num_batched_tokens is not None
    decode = [p for p in grid.points if p.section == "decode"]
    assert max(len(p.decode_contexts) for p in decode) >= scheduler.max_num_seqs
    max_len = engine.max_model_len_tokens
    assert max_len is not None and max(max(p.decode_contexts) for p in decode) >= max_len
    prefill = [p for p in grid.points if p.section == "prefill"]
    longest_prompt = scenario.workload.prompt_tokens.max_tokens  # type: ignore[union-attr]
    assert longest_prompt is not None
    assert max(p.shape.num_prefill_tokens for p in prefill) >= longest_prompt
    mixed = [p for p in grid.points if p.section == "mixed"]
    assert max(p.shape.num_prefill_tokens for p in mixed) >= scheduler.max_num_batched_tokens
    assert max(len(p.decode_contexts) for p in mixed) >= scheduler.max_num_seqs - 2


def test_profile_records_shapes_and_repeats() -> None:
    torch.set_num_threads(1)
    model = LlamaModel(MICRO, seed=0)
    grid = _micro_grid()
    samples = profile_grid(model, grid, np.random.default_rng(0), progress=False)
    assert len(samples) == len(grid.points)
    for sample, point in zip(samples, grid.points, strict=True):
        assert sample.shape == point.shape
        assert sample.section == point.section
        assert len(sample.times_s) == grid.num_repeats
        assert min(sample.times_s) <= sample.median_s <= max(sample.times_s)
        assert sample.iqr_s >= 0


def test_profile_skips_points_beyond_the_kv_budget() -> None:
    model = LlamaModel(MICRO, seed=0)
    grid = _micro_grid()
    with pytest.warns(UserWarning, match="skipped"):
        samples = profile_grid(
            model, grid, np.random.default_rng(0), max_kv_tokens=40, progress=False
        )
    assert 0 < len(samples) < len(grid.points)
    assert all(s.num_prefill_tokens + s.num_decode_context_tokens <= 64 for s in samples)


def test_cli_writes_a_complete_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_module, "build_grid", lambda name: _micro_grid())
    monkeypatch.setattr(cli, "model_preset", lambda name: MICRO)
    out = tmp_path / "a.json"
    status = cli.main(["--model", "micro", "--grid", "small", "--out", str(out), "--no-progress"])
    assert status == 0
    artifact = load_artifact(out)
    assert artifact.command.startswith("servesim calibrate --model micro")
    assert artifact.hardware.device == "cpu" and artifact.hardware.num_threads == 1
    assert artifact.model.spec == MICRO and artifact.model.dtype == "fp32"
    assert artifact.software.torch == torch.__version__
    assert len(artifact.samples) == len(_micro_grid().points)
    assert artifact.fit_error.num_held_out > 0
    assert json.loads(out.read_text())["schema_version"] == 1


def test_cli_unknown_preset_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--model", "no-such-model", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_cuda_unavailable_is_a_config_error() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli.add_parsers(sub)
    args = parser.parse_args(["calibrate", "--model", "tiny", "--device", "cuda"])
    assert args.func is cli.run
    with pytest.raises(ConfigError, match="CUDA"):
        args.func(args)


@pytest.mark.slow
def test_small_cpu_calibration_predicts_held_out_points() -> None:
    """The ``small`` grid on the tiny model, fitted, predicts its held-out points.

    Tolerance, from measurements on this 2-core machine with one thread (see
    /work/shared/notes/cpu-and-models.md, and eight runs of this very grid,
    four of them with three copies sharing the two cores): repeated timings of
    one point spread by a median relative IQR of 4-9 %, medians of separate
    runs differ by ~5 %, and the held-out mean APE came out at 4-7 % with a
    worst point of 8-22 % (the worst is interpolation between batch sizes or
    contexts where the CPU cost is not smooth). A bound on a mean below ~20 %
    fails at random on a shared CI machine, so: mean under 20 % (about 3x the
    worst measured), worst point under 60 % (about 3x). A badly contended
    machine (relative IQRs of 40-100 % were seen once) widens both bounds with
    the spread measured in this run: at least 2.5x (mean) and 5x (max) its
    median relative IQR. Whatever the noise, the fit must beat a constant guess
    by a wide margin.
    """
    torch.set_num_threads(1)
    model = LlamaModel(model_preset("tiny"), seed=0)
    samples = profile_grid(model, build_grid("small"), np.random.default_rng(0), progress=False)
    samples = split_held_out(samples)
    fit, error = fit_samples(samples, "piecewise")
    spread = float(np.median([s.iqr_s / s.median_s for s in samples]))
    assert error.held_out_mean_ape is not None and error.held_out_max_ape is not None
    assert error.num_held_out >= 8
    assert error.held_out_mean_ape <= max(0.20, 2.5 * spread), (error, spread)
    assert error.held_out_max_ape <= max(0.60, 5.0 * spread), (error, spread)

    held = [s for s in samples if s.held_out]
    constant = float(np.median([s.median_s for s in samples if not s.held_out]))
    constant_ape = float(np.mean([abs(constant - s.median_s) / s.median_s for s in held]))
    assert error.held_out_mean_ape < 0.5 * constant_ape
    cost = CalibratedCost(fit)
    assert all(cost.step_s(s.shape) > 0 for s in samples)
