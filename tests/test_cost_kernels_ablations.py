"""Ablations of issue 29's fixes (``cost.mixed_attention``, ``cost.memory_ops``).

``benchmarks/public_runs.py`` undoes each fix to put its contribution on
record; undone, the tables price a step as they did before it, and the cost
model's label says so wherever the ablation changes a price.
"""

from __future__ import annotations

import pytest

from sim.cost.base import StepShape
from sim.cost.config import build_cost_model
from sim.cost.kernels.config import KernelsCostConfig
from sim.cost.kernels.cost import KernelCost
from sim.hardware.specs import HARDWARE_PRESETS, model_preset

LLAMA = model_preset("llama-3-8b")
MIXED = StepShape.build([(512, 256)], [1024] * 32)


def kernels(
    artifact: str, gpu: str, mixed_attention: bool = True, memory_ops: bool = True
) -> KernelCost:
    config = KernelsCostConfig(
        source="path", artifact=artifact, mixed_attention=mixed_attention, memory_ops=memory_ops
    )
    cost = build_cost_model(config, LLAMA, HARDWARE_PRESETS[gpu])
    assert isinstance(cost, KernelCost)
    return cost


def test_mixed_attention_off_prices_the_pure_planes_summed() -> None:
    profile = "rtx4090-vllm-0.19.0-llama-3.1-8b-tp1"
    one, two = kernels(profile, "rtx-4090"), kernels(profile, "rtx-4090", mixed_attention=False)
    pure = two.prefill_attention_s(MIXED) + two.decode_attention_s(
        MIXED.num_decode_seqs, MIXED.num_decode_context_tokens
    )
    assert two.attention_s(MIXED) == pure
    assert one.attention_s(MIXED) == one.mixed_attention_s(MIXED) != pure
    # A step without both parts is priced alike either way.
    decode = StepShape.build(None, [1024] * 32)
    assert one.step_s(decode) == two.step_s(decode)
    assert "[attention as two kernels]" in two.label and "[" not in one.label.split(")")[-1]


def test_memory_ops_off_leaves_the_bandwidth_priced_ops_out() -> None:
    slice_ = "rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b"
    with_ops = kernels(slice_, "rtx-pro-6000")
    without = kernels(slice_, "rtx-pro-6000", memory_ops=False)
    memory = with_ops._memory
    assert memory is not None and without._memory is None
    assert with_ops.dense_layer_s(512) == pytest.approx(
        without.dense_layer_s(512) + memory.layer_s(512.0), rel=1e-12
    )
    names = {name for name, _ in without.breakdown_s(MIXED).items()}
    assert not names & {"embedding", "final_norm", "sampler"}
    assert "[no memory-bound ops]" in without.label


def test_ablations_that_change_nothing_are_not_named() -> None:
    # A per-layer profile times the memory-bound ops itself; FA3 tables have no mixed
    # rows and no factor carried to them (mixed_factor: FA2 only). Neither ablation
    # changes their prices, so neither label names one.
    profile = kernels("rtx4090-vllm-0.19.0-llama-3.1-8b-tp1", "rtx-4090", memory_ops=False)
    slice_ = kernels("h100_sxm-vllm-0.24.0-llama-3.1-8b", "h100", mixed_attention=False)
    assert profile.ablations == () and slice_.ablations == ()
    assert profile.step_s(MIXED) == kernels(
        "rtx4090-vllm-0.19.0-llama-3.1-8b-tp1", "rtx-4090"
    ).step_s(MIXED)


def test_mixed_attention_off_on_fa2_tables_drops_the_carried_factor() -> None:
    slice_ = "rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b"  # FA2: the factor applies
    one, two = kernels(slice_, "rtx-pro-6000"), kernels(slice_, "rtx-pro-6000", False)
    pure = two.prefill_attention_s(MIXED) + two.decode_attention_s(
        MIXED.num_decode_seqs, MIXED.num_decode_context_tokens
    )
    assert two.attention_s(MIXED) == pure < one.attention_s(MIXED)
    assert "[attention as two kernels]" in two.label
    assert "transferred estimate" in one.label and "transferred" not in two.label


def test_skew_off_prices_an_uneven_decode_batch_at_its_mean() -> None:
    profile = "rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1"  # its meta enables the skew fit
    config = KernelsCostConfig(source="path", artifact=profile, skew=False)
    on, off = (
        kernels(profile, "rtx-pro-6000"),
        build_cost_model(config, LLAMA, HARDWARE_PRESETS["rtx-pro-6000"]),
    )
    assert isinstance(off, KernelCost)
    uneven = StepShape.build(None, [3200] + [96] * 31)  # mean context 193
    even = StepShape.build(None, [uneven.num_decode_context_tokens // 32] * 32)
    assert on.step_s(uneven) > off.step_s(uneven) == off.step_s(even) == on.step_s(even)
    assert "[no skew fit]" in off.label and "[" not in on.label.split(")")[-1]
    # The RTX 4090 profile has no fit (its meta disables it): nothing to switch off.
    rtx4090 = "rtx4090-vllm-0.19.0-llama-3.1-8b-tp1"
    no_fit = build_cost_model(
        KernelsCostConfig(source="path", artifact=rtx4090, skew=False),
        LLAMA,
        HARDWARE_PRESETS["rtx-4090"],
    )
    assert "skew" not in no_fit.label
