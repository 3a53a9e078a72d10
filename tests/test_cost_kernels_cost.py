"""KernelCost: a step is the hand sum of the table rows of the operators vLLM runs for it."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from decode_runs import by_loop, run_prices
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.base import CostModel, StepShape
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.ops import layer_shapes
from sim.cost.kernels.price import prefill_chunk
from sim.cost.kernels.slice import slice_artifact
from sim.errors import ConfigError
from sim.hardware.parallel import link_preset
from sim.hardware.specs import ModelSpec, MoeSpec, load_architecture

DATA = Path(__file__).parent / "data" / "kernels"
AIC = from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data")
PROFILE = profile_artifact(DATA / "profile" / "bf16" / "tp1")

# Every GEMM of this model lies on the committed table's grid: QKV 4096 -> 6144,
# O 4096 -> 4096, gate+up 4096 -> 12288, down 6144 -> 4096, LM head 4096 -> 65536.
ON_GRID = ModelSpec(
    name="on-grid",
    num_layers=3,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=6144,
    vocab_size=65536,
    max_context_tokens=8192,
)
LLAMA = load_architecture("llama-3.1-8b")


def row(table: pd.DataFrame, **match: float | str) -> float:
    """The single latency of ``table`` at ``match`` (the test's own table lookup)."""
    selected = table
    for column, value in match.items():
        selected = selected[selected[column] == value]
    assert len(selected) == 1, match
    return float(selected["latency_s"].iloc[0])


def gemm_row(m: int, n: int, k: int) -> float:
    return row(AIC.tables["gemm"], m=m, n=n, k=k)


def on_grid_gemms_s(m: int) -> float:
    return (
        gemm_row(m, 6144, 4096)
        + gemm_row(m, 4096, 4096)
        + gemm_row(m, 12288, 4096)
        + gemm_row(m, 4096, 6144)
    )


def heads(table: str) -> pd.DataFrame:
    t = AIC.tables[table]
    return t[(t["num_heads"] == 32) & (t["num_kv_heads"] == 8) & (t["head_dim"] == 128)]


# The memory-bound ops by hand (docs/kernels.md): bytes / (RTX PRO 6000's 1.792 TB/s
# x 0.8) + 3 µs per kernel, bf16 activations and KV cache.
BYTES_PER_S = 1.792e12 * 0.8


def mem_op(num_bytes: float) -> float:
    return num_bytes / BYTES_PER_S + 3e-6


def memory_layer_s(arch: ModelSpec, tokens: int, tp: int = 1, gated: bool = True) -> float:
    """Two add + RMSNorm, SiLU·mul (dense MLP only), rotary on q and k, KV write."""
    h, hd = arch.hidden_size, arch.head_dim
    heads, kv = arch.num_attention_heads // tp, max(arch.num_kv_heads // tp, 1)
    total = 2 * mem_op(tokens * 4 * h * 2)
    if arch.moe is None and gated:
        total += mem_op(tokens * 3 * (arch.intermediate_size // tp) * 2)
    total += mem_op(tokens * 2 * (heads + kv) * hd * 2) + mem_op(tokens * 2 * kv * hd * 4)
    return total


def memory_step_s(arch: ModelSpec, tokens: int, seqs: int) -> float:
    """Embedding (read + write a row), final add + RMSNorm, sampler (10 B per logit + 25 µs)."""
    h = arch.hidden_size
    sampler = 25e-6 + seqs * arch.vocab_size * 10 / BYTES_PER_S
    return mem_op(tokens * 2 * h * 2) + mem_op(tokens * 4 * h * 2) + sampler


def aic_cost(arch: ModelSpec = ON_GRID, **kwargs: object) -> KernelCost:
    return KernelCost(arch, AIC, **kwargs)  # type: ignore[arg-type]


def test_kernel_cost_is_a_cost_model_with_a_descriptive_label() -> None:
    cost = aic_cost()
    assert isinstance(cost, CostModel)
    assert cost.label.startswith("kernels:on-grid@rtx_pro_6000_server (aiconfigurator")
    assert "vllm 0.24.0" in cost.label and "vllm_flash_attn_fa2, window 0, bf16 KV" in cost.label
    assert "tp2" in aic_cost(tensor_parallel_size=2).label
    assert "on-grid" in repr(cost)


def test_prefill_step_is_the_hand_sum_of_its_table_rows() -> None:
    cost = aic_cost()
    shape = StepShape.build(prefill_chunks=[(128, 0)])
    attention = row(heads("context_attention"), batch_size=1, isl_tokens=128)
    layer = on_grid_gemms_s(128) + memory_layer_s(ON_GRID, 128) + attention
    per_step = gemm_row(1, 65536, 4096) + memory_step_s(ON_GRID, 128, 1)
    expected = 3 * layer + per_step
    assert cost.step_s(shape) == pytest.approx(expected, rel=1e-12)


def test_decode_step_is_the_hand_sum_of_its_table_rows() -> None:
    cost = aic_cost()
    shape = StepShape.build(decode_context_tokens=[1023] * 8)
    attention = row(heads("generation_attention"), batch_size=8, kv_tokens=1023)
    layer = on_grid_gemms_s(8) + memory_layer_s(ON_GRID, 8) + attention
    per_step = gemm_row(8, 65536, 4096) + memory_step_s(ON_GRID, 8, 8)
    expected = 3 * layer + per_step
    assert cost.step_s(shape) == pytest.approx(expected, rel=1e-12)


def test_mixed_step_adds_prefill_and_decode_attention_to_the_dense_part() -> None:
    # FA2 tables: the decodes beside a chunk slowed by the carried factor
    # (tests/test_cost_kernels_mixed_factor.py prices the factor itself).
    cost = aic_cost()
    shape = StepShape.build(prefill_chunks=[(120, 0)], decode_context_tokens=[1023] * 8)
    prefill_only = StepShape.build(prefill_chunks=[(120, 0)])
    factor = cost.mixed_decode_factor(shape)
    assert factor > 1.0
    expected = (
        3 * (cost.dense_layer_s(128) + cost.prefill_attention_s(prefill_only))
        + 3 * row(heads("generation_attention"), batch_size=8, kv_tokens=1023) * factor
        # LM head at m = 9 sequences: linear between the grid's m = 8 and m = 16.
        + gemm_row(8, 65536, 4096)
        + (gemm_row(16, 65536, 4096) - gemm_row(8, 65536, 4096)) / 8
        + memory_step_s(ON_GRID, 128, 9)
    )
    assert cost.step_s(shape) == pytest.approx(expected, rel=1e-12)


def test_cached_prefill_scales_a_full_prefill_by_its_query_key_pairs() -> None:
    cost = aic_cost()
    # One chunk of 512 new tokens after 512 cached: a full prefill of 1024 has
    # 1024 * 1025 / 2 pairs, the chunk 512 * 512 + 512 * 513 / 2.
    shape = StepShape.build(prefill_chunks=[(512, 512)])
    full = row(heads("context_attention"), batch_size=1, isl_tokens=1024)
    pairs = 512 * 512 + 512 * 513 / 2
    expected = full * pairs / (1024 * 1025 / 2)
    assert cost.prefill_attention_s(shape) == pytest.approx(expected, rel=1e-12)
    # A short chunk after a long cache is never cheaper than the chunk alone.
    tiny = StepShape.build(prefill_chunks=[(16, 16368)])
    assert cost.prefill_attention_s(tiny) >= row(
        heads("context_attention"), batch_size=1, isl_tokens=16
    )


def test_prefill_chunks_are_priced_as_equal_chunks() -> None:
    assert prefill_chunk(2, 1000, 3000) == (500.0, 1000.0)
    assert prefill_chunk(1, 10, 5) == (10.0, 0.0)  # never a negative cache
    cost = aic_cost()
    two = StepShape.build(prefill_chunks=[(128, 0), (128, 0)])
    ctx = row(heads("context_attention"), batch_size=2, isl_tokens=128)
    assert cost.prefill_attention_s(two) == pytest.approx(ctx, rel=1e-12)


def test_profile_step_is_the_hand_sum_of_its_profiled_ops() -> None:
    cost = KernelCost(LLAMA, PROFILE)
    ops, per_seq = PROFILE.tables["layer_ops"], PROFILE.tables["per_sequence"]
    mixed = PROFILE.tables["mixed_attention"]
    # Every op the profile lists runs once a layer, the RMSNorm twice; per step: the rest.
    per_layer = {"layernorm": 2, "qkv_proj": 1, "rotary_emb": 1, "o_proj": 1,
                 "gate_up_proj": 1, "act_fn": 1, "down_proj": 1}  # fmt: skip
    assert set(ops["op"]) == {*per_layer, "embedding", "final_layernorm"}
    layer = sum(n * row(ops, op=op, num_tokens=128) for op, n in per_layer.items())
    layer += row(
        mixed, prefill_chunk_tokens=128, kv_prefill_tokens=16, num_decode_seqs=0, kv_decode_tokens=0
    )
    per_step = sum(row(ops, op=op, num_tokens=128) for op in ("embedding", "final_layernorm"))
    per_step += row(per_seq, op="lm_head", num_seqs=1) + row(per_seq, op="sampler", num_seqs=1)
    shape = StepShape.build(prefill_chunks=[(128, 16)])
    expected = 32 * layer + per_step
    assert cost.step_s(shape) == pytest.approx(expected, rel=1e-12)


def test_profile_decode_uses_the_pure_decode_rows() -> None:
    cost = KernelCost(LLAMA, PROFILE)
    mixed = PROFILE.tables["mixed_attention"]
    expected = row(
        mixed, prefill_chunk_tokens=0, kv_prefill_tokens=0, num_decode_seqs=8, kv_decode_tokens=1024
    )
    # The profile's kv_decode counts the cached tokens; a context also counts the new one.
    assert cost.decode_attention_s(8, 8 * 1025) == pytest.approx(expected, rel=1e-12)


def test_empty_step_costs_nothing() -> None:
    assert aic_cost().step_s(StepShape()) == 0.0
    assert KernelCost(LLAMA, PROFILE).step_s(StepShape()) == 0.0


COSTS = {
    "aic": lambda: aic_cost(LLAMA),
    "aic-tp2": lambda: aic_cost(LLAMA, tensor_parallel_size=2),
    "profile": lambda: KernelCost(LLAMA, PROFILE),
}


@pytest.mark.parametrize("name", sorted(COSTS))
@settings(max_examples=40, deadline=None)
@given(
    num_seqs=st.integers(0, 300),
    context=st.integers(0, 200_000),
    num_steps=st.integers(0, 60),
)
def test_decode_steps_equal_step_by_step(
    name: str, num_seqs: int, context: int, num_steps: int
) -> None:
    cost = COSTS[name]()
    context = max(context, num_seqs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # extrapolation past the tables is warned about elsewhere
        fast = run_prices(cost, num_seqs, context, num_steps)
        slow = by_loop(cost, num_seqs, context, num_steps)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=0)


def largest_dip_s(table: pd.DataFrame, along: str, by: str | list[str]) -> float:
    """The table's largest drop in latency as ``along`` grows (measurement noise)."""
    dips = [0.0]
    for _, group in table.groupby(by):
        values = group.sort_values(along)["latency_s"].to_numpy()
        dips.append(float(np.max(values[:-1] - values[1:], initial=0.0)))
    return max(dips)


GEN_DIP_S = largest_dip_s(heads("generation_attention"), "kv_tokens", "batch_size")
CTX_DIP_S = largest_dip_s(heads("context_attention"), "isl_tokens", "batch_size")
# Over the GEMM cells Llama-3.1-8B's shapes use (its slice of the table).
GEMM_DIP_S = largest_dip_s(slice_artifact(AIC, LLAMA).tables["gemm"], "m", ["n", "k"])


def test_the_measured_tables_are_monotone_up_to_microsecond_noise() -> None:
    assert GEN_DIP_S < 2e-6 and CTX_DIP_S < 5e-6 and GEMM_DIP_S < 2e-5


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 256), c1=st.integers(1, 16000), c2=st.integers(1, 16000))
def test_decode_step_is_monotone_in_context(batch: int, c1: int, c2: int) -> None:
    # Monotone up to the table's own noise: interpolation adds no dips of its own.
    cost = aic_cost(LLAMA)
    low, high = sorted((c1, c2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = cost.step_s(StepShape(num_decode_seqs=batch, num_decode_context_tokens=batch * low))
        b = cost.step_s(StepShape(num_decode_seqs=batch, num_decode_context_tokens=batch * high))
    assert a <= b + LLAMA.num_layers * GEN_DIP_S + 1e-15


@settings(max_examples=60, deadline=None)
@given(t1=st.integers(1, 8192), t2=st.integers(1, 8192))
def test_prefill_step_is_monotone_in_tokens(t1: int, t2: int) -> None:
    # Up to the tables' own noise: 4 GEMMs and an attention call a layer, the LM head.
    cost = aic_cost(LLAMA)
    low, high = sorted((t1, t2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = cost.step_s(StepShape.build(prefill_chunks=[(low, 0)]))
        b = cost.step_s(StepShape.build(prefill_chunks=[(high, 0)]))
    noise_s = LLAMA.num_layers * (4 * GEMM_DIP_S + CTX_DIP_S) + 2 * GEMM_DIP_S
    assert a <= b + noise_s


def test_gemm_wider_than_the_grid_is_priced_as_column_blocks_inside_it() -> None:
    cost = aic_cost(LLAMA)  # vocab 128256 > the grid's largest n, 65536: two blocks of 64128
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no extrapolation, so no warning
        per_step = cost.per_step_s(1, 1)
    low, high = gemm_row(1, 51200, 4096), gemm_row(1, 65536, 4096)
    block = low + (64128 - 51200) / (65536 - 51200) * (high - low)
    assert per_step == pytest.approx(2 * block + memory_step_s(LLAMA, 1, 1), rel=1e-12)
    assert cost.gemm_s(1.0, 65536, 4096) == pytest.approx(high, rel=1e-12)


# -- tensor and pipeline parallelism ---------------------------------------------


def test_layer_shapes_follow_vllm_sharding() -> None:
    one, two = layer_shapes(LLAMA, 1), layer_shapes(LLAMA, 2)
    assert one.gemms == {
        "qkv_proj": (6144, 4096),
        "o_proj": (4096, 4096),
        "gate_up_proj": (28672, 4096),
        "down_proj": (4096, 14336),
    }
    assert two.gemms["qkv_proj"] == (3072, 4096)  # column-parallel: output / tp
    assert two.gemms["o_proj"] == (4096, 2048)  # row-parallel: input / tp
    assert two.gemms["gate_up_proj"] == (14336, 4096)
    assert two.gemms["down_proj"] == (4096, 7168)
    assert (two.num_heads, two.num_kv_heads, two.lm_head) == (16, 4, (64128, 4096))
    # KV heads are replicated past tp = num_kv_heads.
    assert layer_shapes(LLAMA, 16).num_kv_heads == 1
    with pytest.raises(ValueError, match="not divisible"):
        layer_shapes(LLAMA, 3)


def test_tensor_parallel_adds_two_allreduces_per_layer_from_the_table() -> None:
    cost = aic_cost(tensor_parallel_size=2)
    ar = AIC.tables["allreduce"]
    ar = ar[ar["num_gpus"] == 2]
    message = 128 * 4096 * 2  # tokens x hidden x bf16 bytes = 1 MiB, a grid point
    shapes = layer_shapes(ON_GRID, 2)
    gemms = sum(cost.gemm_s(128.0, n, k) for n, k in shapes.gemms.values())
    expected = gemms + memory_layer_s(ON_GRID, 128, tp=2) + 2 * row(ar, message_bytes=message)
    assert cost.dense_layer_s(128) == pytest.approx(expected, rel=1e-12)


def test_without_an_allreduce_table_nccls_model_over_the_link_is_used() -> None:
    tables = {k: v for k, v in AIC.tables.items() if k != "allreduce"}
    bare = KernelArtifact(AIC.provenance, tables)
    link = link_preset("pcie4")
    cost = KernelCost(ON_GRID, bare, tensor_parallel_size=2, link=link)
    bytes_ = 1000.0
    # 1 kB on 2 GPUs over PCIe: NCCL's ring with its LL protocol, base 6.6 us plus
    # 2 (tp - 1) hops of 1.0 us, at half the bus bandwidth (LL's flags), each byte
    # moved 2 (tp - 1) / tp = 1 time (Simple: 8.4 + 2 x 5.7 us; a tree: 6.8 + 2 x
    # 1.0 us at a quarter of LL's rate: both slower).
    bus = link.bandwidth_bytes_per_s * link.efficiency
    expected = (6.6 + 2 * 1.0) * 1e-6 + bytes_ / (0.5 * bus)
    assert cost.allreduce_s(1000) == pytest.approx(expected, rel=1e-12)
    assert aic_cost().allreduce_s(1000) == 0.0


def test_pipeline_stages_add_one_transfer_per_boundary() -> None:
    link = link_preset("nvlink4")
    one = aic_cost(link=link)
    three = aic_cost(pipeline_parallel_size=3, link=link)
    shape = StepShape.build(prefill_chunks=[(128, 0)])
    # One send/recv of 128 tokens x 4096 x 2 B = 1 MiB per boundary over NVLink 4:
    # NCCL's LL, base 6.6 us + one 0.6 us hop, at its 141 GB/s ceiling (half the
    # 360 GB/s bus is more), 14.6 us, against Simple's 8.4 + 3.4 us + 1 MiB at 360
    # GB/s, 14.7 us, and LL128's 14 + 1.9 us + 1 MiB at 0.92 x 360 GB/s.
    hop = (6.6 + 0.6) * 1e-6 + 128 * 4096 * 2 / 141e9
    assert three.step_s(shape) - one.step_s(shape) == pytest.approx(2 * hop, rel=1e-9)
    with pytest.raises(ConfigError, match="pipeline_parallel_size 4 > 3 layers"):
        aic_cost(pipeline_parallel_size=4)


# -- MoE --------------------------------------------------------------------------


def test_moe_layer_uses_the_fused_moe_row_plus_router_and_attention_gemms() -> None:
    arch = ModelSpec(
        **{**ON_GRID.model_dump(), "hidden_size": 2048, "num_attention_heads": 32,
           "head_dim": 128, "num_kv_heads": 8, "name": "moe-test",
           "moe": MoeSpec(num_experts=128, top_k=8, expert_intermediate_size=768)}
    )  # fmt: skip
    cost = aic_cost(arch)
    moe = AIC.tables["moe"]
    moe_s = row(
        moe, hidden_size=2048, inter_size=768, topk=8, num_experts=128, tp_size=1, ep_size=1,
        num_tokens=64,
    )  # fmt: skip
    gemms = sum(cost.gemm_s(64.0, n, k) for n, k in layer_shapes(arch).gemms.values())
    assert "router" in layer_shapes(arch).gemms and "gate_up_proj" not in layer_shapes(arch).gemms
    # No activation outside the fused MoE kernel (its table times the experts' own).
    memory = memory_layer_s(arch, 64)
    assert cost.dense_layer_s(64) == pytest.approx(gemms + moe_s + memory, rel=1e-12)


def test_shared_expert_adds_its_gemms() -> None:
    arch = LLAMA.model_copy(
        update={"moe": MoeSpec(num_experts=8, top_k=2, expert_intermediate_size=1024,
                               shared_expert_intermediate_size=2048)}
    )  # fmt: skip
    gemms = layer_shapes(arch, 2).gemms
    assert gemms["shared_gate_up_proj"] == (2048, 4096) and gemms["shared_down_proj"] == (
        4096,
        1024,
    )


# -- errors ----------------------------------------------------------------------


def test_missing_head_layout_names_the_table_and_lists_what_was_measured() -> None:
    arch = ON_GRID.model_copy(update={"num_attention_heads": 40, "num_kv_heads": 8})
    with pytest.raises(ConfigError, match=r"context_attention has no rows for num_heads=40") as err:
        aic_cost(arch)
    assert "32/8/128" in str(err.value) and "\n" not in str(err.value)


def test_profile_of_another_model_or_layout_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"profiled on meta-llama/Llama-3\.1-8B, not on-grid"):
        KernelCost(ON_GRID, PROFILE)
    with pytest.raises(ConfigError, match="profiled at tensor parallel 1"):
        KernelCost(LLAMA, PROFILE, tensor_parallel_size=2)
    moe = LLAMA.model_copy(
        update={"moe": MoeSpec(num_experts=8, top_k=2, expert_intermediate_size=64)}
    )
    with pytest.raises(ConfigError, match="no moe_layer table, needed for the MoE layers"):
        KernelCost(moe, PROFILE)


def test_missing_tables_are_named() -> None:
    only_gemm = KernelArtifact(AIC.provenance, {"gemm": AIC.tables["gemm"]})
    with pytest.raises(ConfigError, match="no context_attention table"):
        KernelCost(ON_GRID, only_gemm)
    no_gemm = KernelArtifact(AIC.provenance, {k: v for k, v in AIC.tables.items() if k != "gemm"})
    with pytest.raises(ConfigError, match="no gemm table"):
        KernelCost(ON_GRID, no_gemm)
    ops = PROFILE.tables["layer_ops"]
    broken = KernelArtifact(
        PROFILE.provenance, {**PROFILE.tables, "layer_ops": ops[ops["op"] != "gate_up_proj"]}
    )
    with pytest.raises(ConfigError, match="layer_ops has no op 'gate_up_proj'"):
        KernelCost(LLAMA, broken)
    uneven = ON_GRID.model_copy(update={"intermediate_size": 6145})
    with pytest.raises(ConfigError, match="model on-grid: intermediate_size 6145"):
        aic_cost(uneven, tensor_parallel_size=2)
