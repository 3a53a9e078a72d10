"""``servesim calibrate --from-run``: reading runs, refusing mismatches, the artifact end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from benchmark_module import load_benchmark

from sim import api
from sim.cli import main
from sim.cli.fit import calibrate_from_runs
from sim.cost.config import FittedCostConfig
from sim.cost.fitted import FitParameters, FittedCost, load_fitted_artifact
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import load_scenario
from sim.validation.fit_runs import (
    MEASURE_FORMAT,
    check_run,
    load_measured_run,
    run_digest,
    scenario_for_run,
)
from sim.validation.llmservingsim import read_llmservingsim
from sim.validation.match import hardware_matches
from sim.validation.runs import REQUEST_COLUMNS, ImportedRun

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "validation" / "public" / "llmservingsim" / "bench" / "examples"
RTX4090 = PUBLIC / "RTX4090" / "Llama-3.1-8B"

SCENARIO: dict[str, Any] = {
    "name": "fit-cli",
    "model": "tiny",
    "hardware": "cpu-2core",
    "cost": {"kind": "linear", "step_overhead_s": 0.002, "per_prefill_token_s": 5e-5,
             "per_decode_seq_s": 1e-3},
    "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 256},
    "engine": {"num_kv_blocks": 4096, "async_scheduling": False},
    "workload": {
        "kind": "synthetic",
        "num_requests": 30,
        "arrival": {"kind": "poisson", "rate_per_s": 20},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 32, "max_tokens": 400},
        "output_tokens": {"kind": "uniform", "min_tokens": 4, "max_tokens": 24},
    },
}  # fmt: skip
TRUE = FitParameters(prefill_multiplier=1.3, decode_multiplier=0.8)


def measured_folder(tmp_path: Path, meta: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """A scenario file and an imported run 'measured' on it with TRUE parameters."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    result = api.run(path, wrap_cost=lambda base: FittedCost(base, TRUE))
    run = ImportedRun(
        result.requests[list(REQUEST_COLUMNS)],
        meta if meta is not None else {"format": "test", "model": "tiny"},
    )
    run.write(tmp_path / "run")
    return path, tmp_path / "run"


def calibrate(*extra: str) -> list[str]:
    return ["calibrate", "--model", "tiny", *extra]


def test_fits_writes_an_artifact_a_scenario_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, run = measured_folder(tmp_path)
    out = tmp_path / "out" / "fit.json"
    free = "prefill_multiplier,decode_multiplier"
    argv = calibrate("--from-run", str(run), "--scenario", str(scenario), "--out", str(out),
                     "--free", free, "--max-evals", "20")  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "first half -> second half" in printed and "In sample" in printed
    artifact = load_fitted_artifact(out)
    params = artifact.parameters
    assert params.prefill_multiplier == pytest.approx(1.3, rel=0.1)
    assert params.decode_multiplier == pytest.approx(0.8, rel=0.1)
    assert artifact.fit.objective_value < artifact.fit.base_objective_value
    assert artifact.base_cost["kind"] == "linear" and artifact.provenance.model == "tiny"
    (info,) = artifact.provenance.runs
    assert info.num_requests == 30 and info.format == "test"
    assert info.sha256 == run_digest(load_measured_run(run).requests)
    assert [f["fold"] for f in artifact.errors["cross_validation"]] == [
        "run: first half -> second half"
    ]
    # Round trip: the artifact as a scenario's cost predicts as the in-memory model does.
    plain = load_scenario(scenario)
    fitted = plain.model_copy(update={"cost": FittedCostConfig(artifact="out/fit.json")})
    a = api.run(fitted, base_dir=tmp_path)
    b = api.run(plain, wrap_cost=lambda base: FittedCost(base, params))
    np.testing.assert_array_equal(a.requests["finish_s"], b.requests["finish_s"])


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_a_run_of_another_model_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, run = measured_folder(tmp_path, {"format": "test", "model": "Qwen/Qwen3-8B"})
    err = one_line_error(calibrate("--from-run", str(run), "--scenario", str(scenario)), capsys)
    assert "served Qwen/Qwen3-8B, not --model tiny" in err and str(run) in err


def test_a_public_run_of_another_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", "--model", "qwen3-32b", "--hardware", "rtx-4090", "--from-run",
            str(RTX4090)]  # fmt: skip
    assert "served meta-llama/Llama-3.1-8B, not --model qwen3-32b" in one_line_error(argv, capsys)


def test_a_run_on_other_hardware_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", "--model", "llama-3-8b", "--hardware", "h100", "--from-run",
            str(RTX4090)]  # fmt: skip
    err = one_line_error(argv, capsys)
    assert "ran on NVIDIA GeForce RTX 4090, not --hardware h100" in err


def test_a_missing_run_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(calibrate("--hardware", "cpu-2core", "--from-run", str(tmp_path / "x")),
                         capsys)  # fmt: skip
    assert "no such file or folder" in err


def test_a_run_without_engine_settings_needs_a_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, run = measured_folder(tmp_path)
    err = one_line_error(calibrate("--hardware", "cpu-2core", "--from-run", str(run)), capsys)
    assert "records no engine settings" in err and "--scenario" in err


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--free", "per_token_s"], "--free 'per_token_s' with --fit-kind multipliers: choose"),
        (
            ["--fit-kind", "engine-cpu", "--free", "decode_multiplier"],
            "--free 'decode_multiplier' with --fit-kind engine-cpu: choose from per_step_s",
        ),
        (["--max-evals", "2"], "--max-evals must be at least 4"),
        (["--kernels"], "pick one"),
    ],
)
def test_bad_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    scenario, run = measured_folder(tmp_path)
    argv = calibrate("--from-run", str(run), "--scenario", str(scenario), *extra)
    assert expected in one_line_error(argv, capsys)


def test_no_hardware_and_no_scenario_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, run = measured_folder(tmp_path)
    assert "needs --hardware" in one_line_error(calibrate("--from-run", str(run)), capsys)


def test_a_scenario_of_another_model_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, run = measured_folder(tmp_path, {"format": "test"})
    argv = ["calibrate", "--model", "smollm2-135m", "--from-run", str(run), "--scenario",
            str(scenario)]  # fmt: skip
    assert "model tiny on cpu-2core, not --model smollm2-135m" in one_line_error(argv, capsys)


def test_no_runs_is_refused() -> None:
    args = argparse.Namespace(from_run=[], model="tiny", hardware="cpu-2core", scenario=None,
                              assume_model=None, fit_kind="multipliers", free="decode_multiplier",
                              max_evals=10, out=None, no_cross_validation=True)  # fmt: skip
    with pytest.raises(ConfigError, match="--from-run: no runs given"):
        calibrate_from_runs(args)


def test_argparse_refuses_an_empty_from_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(calibrate("--hardware", "cpu-2core", "--from-run"))
    assert exit_.value.code == 2


def test_a_measure_folder_reads_as_a_run(tmp_path: Path) -> None:
    _, run = measured_folder(tmp_path)
    folder = tmp_path / "measured"
    folder.mkdir()
    requests = load_measured_run(run).requests
    requests.to_parquet(folder / "requests.parquet")
    summary = {"mode": "measured", "model": "tiny", "device": "cpu", "device_name": "Xeon"}
    (folder / "summary.json").write_text(json.dumps(summary))
    loaded = load_measured_run(folder)
    assert loaded.meta["format"] == MEASURE_FORMAT and len(loaded.requests) == 30
    check_run(loaded, "m", model_preset("tiny"), hardware_preset("cpu-2core"))
    with pytest.raises(ConfigError, match="ran on cpu, not --hardware h100"):
        check_run(loaded, "m", model_preset("tiny"), hardware_preset("h100"))
    (folder / "summary.json").write_text(json.dumps({**summary, "mode": "simulated"}))
    with pytest.raises(ConfigError):  # a simulated run is no measurement
        load_measured_run(folder)


@pytest.mark.parametrize(
    ("device", "preset", "matches"),
    [
        ("NVIDIA GeForce RTX 4090", "rtx-4090", True),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000", True),
        ("NVIDIA H100 80GB HBM3", "h100-sxm", True),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb", True),
        ("NVIDIA H100 80GB HBM3", "h200", False),
        ("cpu", "cpu-2core", True),
        ("cpu", "h100", False),
        ("NVIDIA H100 80GB HBM3", "cpu-2core", False),
    ],
)
def test_recorded_devices_match_presets(device: str, preset: str, matches: bool) -> None:
    assert hardware_matches(device, hardware_preset(preset)) is matches


def test_a_public_runs_recorded_settings_make_its_scenario() -> None:
    run = read_llmservingsim(RTX4090)
    scenario = scenario_for_run(
        run, "r", model_preset("llama-3-8b"), hardware_preset("rtx-4090"), {"kind": "auto"}
    )
    policy = scenario.scheduler
    assert (policy.max_num_seqs, policy.max_num_batched_tokens) == (256, 2048)  # type: ignore[union-attr]
    assert scenario.engine.num_kv_blocks == 2588 and scenario.engine.enable_prefix_caching
    assert scenario.frontend.way_in_s_per_request == 0.0
    assert scenario.frontend.tokenize_s_per_token == 0.0


def test_a_data_parallel_run_is_refused() -> None:
    run = ImportedRun(read_llmservingsim(RTX4090).requests, {"engine": {"data_parallel_size": 2}})
    with pytest.raises(ConfigError, match="data_parallel_size 2"):
        scenario_for_run(run, "r", model_preset("tiny"), hardware_preset("cpu-2core"), {})


def _transfer_script() -> Any:
    return load_benchmark("fitted_transfer")


def test_the_transfer_benchmark_applies_another_runs_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, run = measured_folder(tmp_path)
    out = tmp_path / "fit.json"
    argv = calibrate("--from-run", str(run), "--scenario", str(scenario), "--out", str(out),
                     "--free", "decode_multiplier", "--max-evals", "12",
                     "--no-cross-validation")  # fmt: skip
    assert main(argv) == 0
    assert "Held out" not in capsys.readouterr().out  # no cross-validation asked for
    assert "cross_validation" not in load_fitted_artifact(out).errors
    transfer = _transfer_script()
    args = ["--artifact", str(out), "--scenario", str(scenario), "--run", str(run)]
    assert transfer.main(args) == 0
    printed = capsys.readouterr().out
    assert "with the parameters of fit.json" in printed
    assert printed.count("| run | all |") == 2  # TTFT and TPOT rows


def test_an_out_that_cannot_be_written_is_refused_before_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fit takes minutes (285 s with defaults): --out is checked before it (issue 30)."""
    scenario, run = measured_folder(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")

    def no_fit(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the fit ran before --out was checked")

    monkeypatch.setattr("sim.validation.fit_runs.fit_free", no_fit)
    monkeypatch.setattr("sim.validation.fit_runs.cross_validate", no_fit)
    argv = calibrate("--from-run", str(run), "--scenario", str(scenario),
                     "--out", str(blocker / "fit.json"))  # fmt: skip
    err = one_line_error(argv, capsys)
    assert f"--out {blocker / 'fit.json'}" in err and "is a file, not a folder" in err
