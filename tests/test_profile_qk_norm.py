"""Qwen3's per-head q/k norms on the per-layer profile route (issue 41, item 1).

vLLM 0.19's Qwen3 attention runs two RMSNorms a layer, ``q_norm`` and ``k_norm``
(``model_executor/models/qwen3.py``), both ``RMSNorm(head_dim)``. The profiler
reads vLLM's layerwise profile, whose summary sums modules of one repr into one
entry (``profiler/layerwise_profile.py``, ``_build_stats_trees``), and divides by
the calls (LLMServingSim ``profiler/core/hooks/timings.py``): its ``qk_norm`` row is
one call, as its ``layernorm`` row is one of the layer's two norms. And it times
the norms once, at tp 1, copying the rows into its tp-2 folder
(``tp_stable: true``); a tp-2 shard norms half the heads.

Expected figures from the profiles' own rows (RTX PRO 6000, µs):
Qwen3-30B-A3B tp1 ``qk_norm`` at 64 tokens 2.61333, at 128 tokens 3.232;
Qwen3-32B tp1 (copied to tp2) at 64 tokens 3.26933.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main

PUBLIC = Path(__file__).parents[1] / "scenarios" / "public"


def _ops_ms(capsys: pytest.CaptureFixture[str], scenario: str, step: str) -> dict[str, float]:
    assert main(["cost-breakdown", str(PUBLIC / scenario), "--step", step, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    ops: dict[str, float] = result["ops_ms"]
    return ops


def test_a_qwen3_layer_pays_both_of_its_head_norms(capsys: pytest.CaptureFixture[str]) -> None:
    ops = _ops_ms(capsys, "rtxpro6000_qwen3_30b_a3b_dp2_ep2_profile.yaml", "64d")
    # 48 layers x 2 norms x 2.61333 us (one call, the profile's row at 64 tokens).
    assert ops["qk_norm"] == pytest.approx(48 * 2 * 2.61333e-3, rel=1e-6)


def test_a_tp2_shard_norms_half_the_heads(capsys: pytest.CaptureFixture[str]) -> None:
    ops = _ops_ms(capsys, "rtxpro6000_qwen3_32b_tp2_profile.yaml", "128d")
    # Qwen3-32B at tp 2 norms 32 + 4 heads a GPU, the work of 64 tokens at tp 1:
    # 64 layers x 2 norms x 3.26933 us (the tp-1 row at 64 tokens).
    assert ops["qk_norm"] == pytest.approx(64 * 2 * 3.26933e-3, rel=1e-6)
    # Independent check: Qwen3-30B-A3B has the 32B's tp-2 shard's heads (32 + 4 of
    # dim 128) and was timed with them (its tp-1 row at 128 tokens: 3.232 us).
    same_heads = _ops_ms(capsys, "rtxpro6000_qwen3_30b_a3b_dp2_ep2_profile.yaml", "128d")
    assert ops["qk_norm"] / (64 * 2) == pytest.approx(same_heads["qk_norm"] / (48 * 2), rel=0.02)
