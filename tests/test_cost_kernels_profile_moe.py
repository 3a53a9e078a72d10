"""Per-layer profiles of other architectures: Qwen3's extra ops and MoE layers (moe.csv)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim.cost.base import StepShape
from sim.cost.kernels.artifact import load_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import import_profile, profile_artifact
from sim.cost.kernels.ops import ProfileDense, expected_active_experts
from sim.errors import ConfigError
from sim.hardware.model_names import same_model
from sim.hardware.specs import load_architecture

QWEN_MOE = load_architecture("qwen3-30b-a3b")
TOKENS = (1, 64, 2048)
LAYER_OPS = ("layernorm", "qkv_proj", "qk_norm", "rotary_emb", "o_proj")
STEP_OPS = ("embedding", "final_layernorm")
META = """\
profiler_version: 1.0.0
vllm_version: 0.19.0
gpu: NVIDIA RTX PRO 6000 Blackwell Server Edition
hardware: RTXPRO6000
profiled_at: '2026-04-24T12:44:06+00:00'
model: Qwen/Qwen3-30B-A3B-Instruct-2507
variant: bf16
"""


def op_time_us(op: str, tokens: int) -> float:
    # Distinct, increasing in tokens, so that a wrong op or count shows.
    return 10.0 + len(op) + tokens * (1 + len(op) / 10)


def moe_time_us(tokens: int, experts: int) -> float:
    return 50.0 + 2.0 * experts + 0.5 * tokens


@pytest.fixture
def moe_profile(tmp_path: Path) -> Path:
    tp1 = tmp_path / "bf16" / "tp1"
    tp1.mkdir(parents=True)
    (tmp_path / "bf16" / "meta.yaml").write_text(META)
    pd.DataFrame(
        [(op, t, op_time_us(op, t)) for op in LAYER_OPS + STEP_OPS for t in TOKENS],
        columns=["layer", "tokens", "time_us"],
    ).to_csv(tp1 / "dense.csv", index=False)
    pd.DataFrame(
        [(t, e, moe_time_us(t, e)) for t in TOKENS for e in (8, 16, 64, 128)],
        columns=["tokens", "activated_experts", "time_us"],
    ).to_csv(tp1 / "moe.csv", index=False)
    attention = [(c, p, 0, 0, 5.0 + c / 100 + p / 1000) for c in (16, 2048) for p in (0, 16384)]
    attention += [(0, 0, n, kv, 5.0 + n * kv / 1e4) for n in (1, 256) for kv in (16, 16384)]
    pd.DataFrame(
        attention, columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]
    ).to_csv(tp1 / "attention.csv", index=False)
    pd.DataFrame(
        [(op, n, 100.0 + n) for op in ("lm_head", "sampler") for n in (1, 256)],
        columns=["layer", "sequences", "time_us"],
    ).to_csv(tp1 / "per_sequence.csv", index=False)
    return tp1


def test_moe_csv_is_imported_as_the_moe_layer_table(moe_profile: Path, tmp_path: Path) -> None:
    artifact = load_kernel_artifact(import_profile(moe_profile, tmp_path / "moe.json.gz"))
    moe = artifact.tables["moe_layer"]
    assert len(moe) == len(TOKENS) * 4
    got = moe[(moe["num_tokens"] == 64) & (moe["num_active_experts"] == 16)]["latency_s"]
    assert got.tolist() == [pytest.approx(moe_time_us(64, 16) * 1e-6, rel=1e-12)]


def test_expected_active_experts_follows_uniform_routing() -> None:
    assert expected_active_experts(1, 128, 8) == pytest.approx(8.0)
    assert expected_active_experts(0, 128, 8) == 0.0
    assert expected_active_experts(10_000, 128, 8) == pytest.approx(128.0)
    two = expected_active_experts(2, 128, 8)
    assert 8 < two < 16 and two == pytest.approx(128 * (1 - (120 / 128) ** 2))


def test_moe_profile_layer_is_every_listed_op_plus_the_moe_layer(moe_profile: Path) -> None:
    cost = KernelCost(QWEN_MOE, profile_artifact(moe_profile))
    dense = ProfileDense(cost.artifact, QWEN_MOE)
    assert set(dense.op_names) == set(LAYER_OPS)
    # At one token, 8 experts are active: a grid point of the MoE table. A row
    # is one call: a layer runs two layer norms and two head norms (q and k).
    expected_us = sum(
        (2 if op in ("layernorm", "qk_norm") else 1) * op_time_us(op, 1) for op in LAYER_OPS
    ) + moe_time_us(1, 8)
    assert cost.dense_layer_s(1) == pytest.approx(expected_us * 1e-6, rel=1e-12)
    steps_us = sum(op_time_us(op, 64) for op in STEP_OPS) + 2 * 100.0 + 2 * 64
    assert cost.per_step_s(64, 64) == pytest.approx(steps_us * 1e-6, rel=1e-9)


def test_moe_profile_step_prices_and_grows_with_tokens(moe_profile: Path) -> None:
    cost = KernelCost(QWEN_MOE, profile_artifact(moe_profile))
    small = cost.step_s(StepShape.build(prefill_chunks=[(64, 0)]))
    large = cost.step_s(StepShape.build(prefill_chunks=[(2048, 0)]))
    assert 0 < small < large
    assert cost.label.startswith("kernels:qwen3-30b-a3b@RTXPRO6000 (LLMServingSim")


def test_a_dense_model_needs_its_mlp_ops(moe_profile: Path) -> None:
    dense_qwen = QWEN_MOE.model_copy(update={"moe": None})
    with pytest.raises(ConfigError, match="layer_ops has no op 'gate_up_proj'"):
        KernelCost(dense_qwen, profile_artifact(moe_profile))


def test_model_names_match_their_fine_tuned_variants() -> None:
    assert same_model("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507")
    assert same_model("llama-3.1-8b", "meta-llama/Llama-3.1-8B")
    assert same_model("anything", None)
    assert not same_model("qwen3-30b", "Qwen/Qwen3-30B-A3B")  # not a variant word
    assert not same_model("llama-3.1-70b", "meta-llama/Llama-3.1-8B")
    assert not same_model("qwen3-8b", "Qwen/Qwen3-8Bx")
