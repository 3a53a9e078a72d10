"""The memory-bound ops (norms, activation, rotary, KV write, embedding, sampler) and
``KernelCost.breakdown_s``, the per-op split of a step."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.base import StepShape
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.memory_ops import (
    LAYER_OPS,
    MEMORY_OP_LATENCY_S,
    STEP_OPS,
    MemoryOps,
    activation_bytes_per_token,
    hardware_for_gpu,
    mlp_activation,
)
from sim.cost.kernels.ops import ProfileDense, layer_shapes
from sim.errors import ConfigError
from sim.hardware.parallel import link_preset
from sim.hardware.specs import ModelSpec, MoeSpec, hardware_preset, load_architecture

DATA = Path(__file__).parent / "data" / "kernels"
AIC = from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data")
PROFILE = profile_artifact(DATA / "profile" / "bf16" / "tp1")
LLAMA = load_architecture("llama-3.1-8b")
PRO_6000 = hardware_preset("rtx-pro-6000")


# -- the formulas ---------------------------------------------------------------------


def test_an_op_is_its_bytes_over_the_effective_bandwidth_plus_a_constant() -> None:
    ops = MemoryOps.build(LLAMA, layer_shapes(LLAMA), PRO_6000)
    assert ops.bytes_per_s == 1.792e12 * 0.8
    assert ops.op_s(0.0) == MEMORY_OP_LATENCY_S == 3e-6
    assert ops.op_s(1.4336e9) == pytest.approx(1e-3 + 3e-6, rel=1e-12)


def test_llama_layer_ops_at_512_tokens_by_hand() -> None:
    ops = dict(MemoryOps.build(LLAMA, layer_shapes(LLAMA), PRO_6000).layer_terms(512.0))
    bw = 1.792e12 * 0.8
    # Two add + RMSNorm: read x and the residual, write both (4 x 4096 bf16 values a token).
    assert ops["add_norm"] == pytest.approx(2 * (512 * 4 * 4096 * 2 / bw + 3e-6), rel=1e-12)
    # SiLU·mul: read gate and up (2 x 14336), write 14336.
    assert ops["activation"] == pytest.approx(512 * 3 * 14336 * 2 / bw + 3e-6, rel=1e-12)
    # Rotary on q (32 heads) and k (8 heads) of 128, in place.
    assert ops["rotary_emb"] == pytest.approx(512 * 2 * 40 * 128 * 2 / bw + 3e-6, rel=1e-12)
    # KV write: read k and v (8 heads of 128), write them to the bf16 cache.
    assert ops["kv_cache_write"] == pytest.approx(512 * 2 * 1024 * 4 / bw + 3e-6, rel=1e-12)
    assert tuple(ops) == LAYER_OPS


def test_step_ops_by_hand() -> None:
    ops = MemoryOps.build(LLAMA, layer_shapes(LLAMA), PRO_6000)
    bw = 1.792e12 * 0.8
    terms = dict(ops.step_terms(100.0, 4.0, with_sampler=True))
    assert tuple(terms) == STEP_OPS
    assert terms["embedding"] == pytest.approx(100 * 2 * 4096 * 2 / bw + 3e-6, rel=1e-12)
    assert terms["final_norm"] == pytest.approx(100 * 4 * 4096 * 2 / bw + 3e-6, rel=1e-12)
    assert terms["sampler"] == pytest.approx(25e-6 + 4 * 128256 * 10 / bw, rel=1e-12)
    assert dict(ops.step_terms(100.0, 4.0, with_sampler=False))["sampler"] == 0.0
    assert dict(ops.step_terms(100.0, 0.0, with_sampler=True))["sampler"] == 0.0


def test_the_activation_formula_takes_the_mlp_kind() -> None:
    assert activation_bytes_per_token(1000, gated=True, dtype_bytes=2.0) == 6000.0
    assert activation_bytes_per_token(1000, gated=False, dtype_bytes=2.0) == 4000.0
    dense = layer_shapes(LLAMA, 2)
    assert mlp_activation(dense) == (7168, True)
    # A plain (GPT-2, OPT) MLP as layer_shapes names it: fc1 then fc2.
    plain = layer_shapes(LLAMA.model_copy(update={"mlp": "non_gated", "intermediate_size": 16384}))
    assert tuple(plain.gemms)[-2:] == ("fc1", "fc2")
    assert mlp_activation(plain) == (16384, False)
    bw = 1.792e12 * 0.8
    act = dict(MemoryOps.build(LLAMA, plain, PRO_6000).layer_terms(10.0))["activation"]
    assert act == pytest.approx(10 * 2 * 16384 * 2 / bw + 3e-6, rel=1e-12)


def test_moe_activations_are_inside_the_moe_kernel_but_a_shared_expert_s_is_not() -> None:
    moe = LLAMA.model_copy(
        update={"moe": MoeSpec(num_experts=8, top_k=2, expert_intermediate_size=1024)}
    )
    assert mlp_activation(layer_shapes(moe)) is None
    ops = MemoryOps.build(moe, layer_shapes(moe), PRO_6000)
    assert dict(ops.layer_terms(64.0))["activation"] == 0.0
    shared = moe.model_copy(
        update={"moe": moe.moe.model_copy(update={"shared_expert_intermediate_size": 2048})}  # type: ignore[union-attr]
    )
    assert mlp_activation(layer_shapes(shared, 2)) == (1024, True)


def test_tensor_parallel_shards_heads_and_mlp_but_not_the_norms() -> None:
    one = dict(MemoryOps.build(LLAMA, layer_shapes(LLAMA, 1), PRO_6000).layer_terms(256.0))
    two = dict(MemoryOps.build(LLAMA, layer_shapes(LLAMA, 2), PRO_6000).layer_terms(256.0))
    assert one["add_norm"] == two["add_norm"]
    for name in ("activation", "rotary_emb", "kv_cache_write"):
        # Half the bytes, the same 3 µs constant.
        assert two[name] - 3e-6 == pytest.approx((one[name] - 3e-6) / 2, rel=1e-12)


def test_the_bandwidth_is_the_hardware_s_or_the_measured_gpu_s() -> None:
    assert hardware_for_gpu("rtx_pro_6000_server") == PRO_6000
    assert hardware_for_gpu("RTX4090") == hardware_preset("rtx-4090")
    assert hardware_for_gpu("no-such-gpu") is None
    default = KernelCost(LLAMA, AIC)
    slower = KernelCost(LLAMA, AIC, hardware=hardware_preset("l40s"))
    assert slower.dense_layer_s(512) > default.dense_layer_s(512)
    unknown = AIC.provenance.model_copy(update={"gpu": "mystery"})
    with pytest.raises(ConfigError, match="measured on 'mystery', which no hardware preset"):
        KernelCost(LLAMA, KernelArtifact(unknown, AIC.tables))
    KernelCost(LLAMA, KernelArtifact(unknown, AIC.tables), hardware=PRO_6000)  # given: fine


def test_a_profile_times_the_memory_bound_ops_itself() -> None:
    cost = KernelCost(LLAMA, PROFILE)
    split = cost.breakdown_s(StepShape.build([(256, 0)], [900] * 8))
    for name in ("add_norm", "activation", "kv_cache_write", "final_norm", "embedding_allreduce"):
        assert name not in split
    assert {"layernorm", "act_fn", "rotary_emb", "embedding", "final_layernorm"} <= set(split)
    # Nothing is added to what the profile measured.
    assert cost.dense_layer_s(256) == ProfileDense(PROFILE, LLAMA).layer_s(256.0)


# -- the breakdown --------------------------------------------------------------------

# Qwen3-30B-A3B's experts with attention and router GEMMs on the committed grid.
MOE_ARCH = ModelSpec(
    name="moe-test", num_layers=2, hidden_size=2048, num_attention_heads=32, num_kv_heads=8,
    head_dim=128, intermediate_size=6144, vocab_size=65536, max_context_tokens=8192,
    moe=MoeSpec(num_experts=128, top_k=8, expert_intermediate_size=768),
)  # fmt: skip
COSTS = {
    "aic": lambda: KernelCost(LLAMA, AIC),
    "aic-tp2-pp2": lambda: KernelCost(
        LLAMA, AIC, tensor_parallel_size=2, pipeline_parallel_size=2, link=link_preset("pcie5")
    ),
    "profile": lambda: KernelCost(LLAMA, PROFILE),
}


@pytest.mark.parametrize("name", sorted(COSTS))
@settings(max_examples=30, deadline=None)
@given(
    chunks=st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 8192)), max_size=3),
    contexts=st.lists(st.integers(1, 16384), max_size=80),
)
def test_the_terms_add_up_to_the_step_less_its_overhead(
    name: str, chunks: list[tuple[int, int]], contexts: list[int]
) -> None:
    cost = COSTS[name]()
    shape = StepShape.build(chunks, contexts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # extrapolation past the tables is warned about elsewhere
        split = cost.breakdown_s(shape)
        step = cost.step_s(shape)
    if shape.is_empty:
        assert split == {} and step == 0.0
        return
    assert all(seconds >= 0 for seconds in split.values())
    assert sum(split.values()) == pytest.approx(step, rel=1e-12)


def test_a_tp_pp_step_lists_its_collectives() -> None:
    cost = COSTS["aic-tp2-pp2"]()
    split = cost.breakdown_s(StepShape.build([(512, 0)], [1000] * 16))
    assert split["allreduce"] > 0 and split["embedding_allreduce"] > 0
    assert split["pipeline_transfer"] > 0
    # Per layer, two all-reduces of the same message as the embedding's one.
    assert split["allreduce"] == pytest.approx(2 * 32 * split["embedding_allreduce"], rel=1e-12)


def test_the_terms_name_every_op_vllm_runs() -> None:
    split = COSTS["aic"]().breakdown_s(StepShape.build([(512, 0)], [1024] * 60))
    gemms = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
    attention = ("prefill_attention", "decode_attention")
    for name in (*gemms, *LAYER_OPS, *STEP_OPS, *attention):
        assert split[name] > 0, name
    # The memory-bound ops are a few percent of a mixed step, not nothing and not most.
    memory = sum(split[name] for name in (*LAYER_OPS, *STEP_OPS))
    assert 0.02 < memory / sum(split.values()) < 0.15


def test_an_moe_step_lists_the_moe_and_no_activation() -> None:
    cost = KernelCost(MOE_ARCH, AIC)
    split = cost.breakdown_s(StepShape.build([(64, 0)]))
    assert split["moe"] > 0 and split["router"] > 0 and split["activation"] == 0.0
