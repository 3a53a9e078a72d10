"""``servesim cost-breakdown``: a step spec's shape, and the per-op table of a scenario's step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.api.build import cost_model_for
from sim.cli import main
from sim.cli.cost_breakdown import DEFAULT_DECODE_CONTEXT_TOKENS, parse_step
from sim.cost.base import StepShape
from sim.cost.engine_cpu import EngineCpuCost
from sim.errors import ConfigError
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
# Priced by the shipped aiconfigurator slice (kernel tables, no network).
KERNELS = ROOT / "scenarios" / "public" / "rtxpro6000_llama31_8b.yaml"
# Priced by the roofline (no H100 tables ship).
ROOFLINE = ROOT / "scenarios" / "summarization.yaml"  # pins cost: roofline


# -- the --step grammar ---------------------------------------------------------------


def test_a_mixed_step_is_one_chunk_and_decodes_at_the_default_context() -> None:
    expected = StepShape.build([(512, 0)], [DEFAULT_DECODE_CONTEXT_TOKENS] * 60)
    assert parse_step("512p+60d") == expected


def test_chunks_cached_tokens_and_decode_contexts_are_read() -> None:
    shape = parse_step("2x256p@1024 + 512p + 30d@2000 + 2d@10")
    assert shape == StepShape.build([(256, 1024), (256, 1024), (512, 0)], [2000] * 30 + [10] * 2)
    assert shape.prefill_kv_read_tokens == 2 * (256 + 1024) + 512


@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4096), st.integers(0, 8192)), max_size=3),
    st.lists(st.tuples(st.integers(1, 256), st.integers(1, 8192)), max_size=3),
)
def test_any_written_step_reads_back_as_its_shape(
    prefills: list[tuple[int, int, int]], decodes: list[tuple[int, int]]
) -> None:
    terms = [f"{n}x{t}p@{c}" for n, t, c in prefills] + [f"{n}d@{kv}" for n, kv in decodes]
    if not terms:
        return
    chunks = [(t, c) for n, t, c in prefills for _ in range(n)]
    contexts = [kv for n, kv in decodes for _ in range(n)]
    assert parse_step("+".join(terms)) == StepShape.build(chunks, contexts)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("512q", "bad term '512q'"),
        ("", "bad term ''"),
        ("512p+", "bad term ''"),
        ("p", "bad term 'p'"),
        ("-5p", "bad term '-5p'"),
        ("0p", "no tokens"),
        ("0x512p", "no tokens"),
        ("60d@0", "context of 1+"),
        ("2x30d", "write '2x30d' as 60d"),
    ],
)
def test_a_bad_spec_is_a_config_error_naming_it(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match="--step") as error:
        parse_step(spec)
    assert says in str(error.value) and "\n" not in str(error.value)


# -- the command ----------------------------------------------------------------------


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["cost-breakdown", *args, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_the_ops_and_the_overhead_add_up_to_the_scenario_s_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _json(capsys, str(KERNELS), "--step", "512p+60d@800")
    cost = cost_model_for(load_scenario(KERNELS))
    step_ms = cost.step_s(StepShape.build([(512, 0)], [800] * 60)) * 1e3
    assert result["step_ms"] == pytest.approx(step_ms, rel=1e-12)
    ops = result["ops_ms"]
    assert sum(ops.values()) + result["other_ms"] == pytest.approx(step_ms, rel=1e-12)
    # The rest is the engine's CPU work the step does not hide: overlapped (async
    # scheduling) and shorter than the GPU's step, only its non-overlapped part.
    assert isinstance(cost, EngineCpuCost) and cost.cpu.async_scheduling
    non_overlapped_ms = cost.cpu.config.non_overlapped_s * 1e3
    assert result["other_ms"] == pytest.approx(non_overlapped_ms, rel=1e-6)
    # Every op takes some time.
    for name in ("qkv_proj", "gate_up_proj", "add_norm", "activation", "rotary_emb", "lm_head"):
        assert ops[name] > 0
    assert ops["prefill_attention"] > 0 and ops["decode_attention"] > 0
    assert result["cost_model"] == cost.label
    # FA2 tables: the decodes beside the chunk take the carried factor, said in a note.
    assert result["note"].startswith("decode_attention is ") and "estimate" in result["note"]


def test_the_table_lists_every_op_with_its_share(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost-breakdown", str(KERNELS), "--step", "512p+60d"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("step 512p+60d: 1 prefill chunk(s), 512 new tokens")
    assert lines[2].startswith("cost source: kernel tables (measured")
    for name in (
        "gate_up_proj",
        "add_norm",
        "kv_cache_write",
        "sampler",
        "rest of step (engine CPU)",
    ):
        assert any(line.startswith(name) for line in lines), name
    shares = [float(line.split()[-2]) for line in lines if line.endswith(" %")][:-1]
    step = [line for line in lines if line.startswith("step ") and line.endswith(" %")]
    assert len(step) == 1 and step[0].endswith("100.0 %")
    assert lines[-1].startswith("note: decode_attention is ")  # FA2 tables' factor
    assert sum(shares) == pytest.approx(100.0, abs=0.05 * len(shares))


def test_set_overrides_reach_the_cost_model(capsys: pytest.CaptureFixture[str]) -> None:
    one = _json(capsys, str(KERNELS), "--step", "512p")
    two = _json(
        capsys, str(KERNELS), "--step", "512p", "--set", "parallelism.tensor_parallel_size=2"
    )
    assert one["ops_ms"]["allreduce"] == 0 and two["ops_ms"]["allreduce"] > 0
    assert two["ops_ms"]["gate_up_proj"] < one["ops_ms"]["gate_up_proj"]


def test_the_roofline_prints_its_total_and_says_it_has_no_per_op_split(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _json(capsys, str(ROOFLINE), "--step", "512p+60d")
    assert "ops_ms" not in result and "no per-op breakdown" in result["note"]
    roofline = result["roofline_ms"]
    overhead_ms = result["step_ms"] - max(roofline["compute"], roofline["memory"])
    assert overhead_ms >= 0
    assert main(["cost-breakdown", str(ROOFLINE), "--step", "60d"]) == 0
    out = capsys.readouterr().out
    assert "note: the roofline has no per-op breakdown" in out
    assert "\ncost source: roofline (guess: uncalibrated)\n" in out  # as every face says it


def test_a_bad_step_is_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost-breakdown", str(KERNELS), "--step", "512x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: --step '512x'") and err.count("\n") == 1
