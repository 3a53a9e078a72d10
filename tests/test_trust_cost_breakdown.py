"""``servesim cost-breakdown`` refuses a step the scenario's engine never runs, and shows
the engine's CPU work beside the roofline (issue 39, item 10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.api.build import cost_model_for
from sim.cli import main
from sim.cost.engine_cpu import EngineCpuCost
from sim.cost.roofline import RooflineCost
from sim.scenario import load_scenario
from tests.cli_errors import one_line_error

ROOT = Path(__file__).resolve().parent.parent
# cost: roofline; scheduler: continuous, max_num_seqs 128, max_num_batched_tokens 1024;
# engine: max_model_len_tokens 8192, 16-token blocks.
ROOFLINE = ROOT / "scenarios" / "summarization.yaml"


def _refused(capsys: pytest.CaptureFixture[str], step: str, *sets: str) -> str:
    argv = ["cost-breakdown", str(ROOFLINE), "--step", step]
    for item in sets:
        argv += ["--set", item]
    return one_line_error(capsys, argv)


def _priced(capsys: pytest.CaptureFixture[str], step: str, *sets: str) -> dict[str, Any]:
    argv = ["cost-breakdown", str(ROOFLINE), "--step", step, "--json"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 0, capsys.readouterr().err
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_more_sequences_than_max_num_seqs_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # 128 decodes fill max_num_seqs 128 (1 token each: within the 1024 budget); one more
    # sequence, a prefill chunk beside them, is a step the scheduler never builds.
    assert _priced(capsys, "128d")["step_ms"] > 0
    message = _refused(capsys, "1p+128d")
    assert "129 sequences" in message and "scheduler.max_num_seqs is 128" in message


def test_more_tokens_than_the_budget_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # 964 prefill tokens + 60 decodes = 1024 tokens: the budget exactly; one more is over.
    assert _priced(capsys, "964p+60d")["step_ms"] > 0
    message = _refused(capsys, "965p+60d")
    assert "1025 tokens" in message and "scheduler.max_num_batched_tokens is 1024" in message
    # Two chunks count together.
    assert "1200 tokens" in _refused(capsys, "2x600p")


def test_a_context_past_max_model_len_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # A chunk of 512 after 7680 cached ends at 8192 = max_model_len; after 7681 it is past.
    assert _priced(capsys, "512p@7680")["step_ms"] > 0
    message = _refused(capsys, "512p@7681")
    assert "8193 tokens" in message and "engine.max_model_len_tokens is 8192" in message
    message = _refused(capsys, "4d@9000")
    assert "9000 tokens" in message and "engine.max_model_len_tokens" in message


def test_more_kv_than_the_cache_holds_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # 100 blocks of 16 tokens: two decodes of 800 tokens take 2 * 50 = 100 blocks (fits);
    # 801 tokens take ceil(801 / 16) = 51 blocks each, 102 in all. max_model_len is
    # what the pool holds (100 * 16 = 1600 tokens): vLLM refuses a smaller pool at start.
    blocks = ("engine.num_kv_blocks=100", "engine.max_model_len_tokens=1600")
    assert _priced(capsys, "2d@800", *blocks)["step_ms"] > 0
    message = _refused(capsys, "2d@801", *blocks)
    assert "102 blocks of 16 tokens" in message and "holds 100" in message
    assert "engine.num_kv_blocks" in message


def test_static_batching_names_its_batch_size(capsys: pytest.CaptureFixture[str]) -> None:
    sets = ("scheduler={kind: static, max_batch_size: 4}",)
    assert _priced(capsys, "4d", *sets)["step_ms"] > 0
    message = _refused(capsys, "5d", *sets)
    assert "5 sequences" in message and "scheduler.max_batch_size is 4" in message


def test_the_roofline_shows_the_engine_cpu_work_as_a_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _priced(capsys, "512p+60d")
    cost = cost_model_for(load_scenario(ROOFLINE))
    assert isinstance(cost, EngineCpuCost) and type(cost.gpu) is RooflineCost
    # Overlapped CPU work shorter than the GPU's step: only its non-overlapped part shows.
    assert cost.cpu.async_scheduling
    assert result["other_ms"] == pytest.approx(cost.cpu.config.non_overlapped_s * 1e3, rel=1e-6)
    roofline = result["roofline_ms"]
    gpu_ms = max(roofline["compute"], roofline["memory"])
    assert gpu_ms + result["other_ms"] == pytest.approx(result["step_ms"], rel=1e-12)
    assert main(["cost-breakdown", str(ROOFLINE), "--step", "512p+60d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("rest of step (engine CPU)") for line in lines)
