"""RooflineCost: regimes, monotonicity, decode skipping, hardware ranking, config."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from decode_runs import by_loop, run_prices
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from sim.cost.base import CostModel, StepShape
from sim.cost.config import CostConfig, RooflineCostConfig, build_cost_model
from sim.cost.roofline import RooflineCost
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    MODEL_PRESETS,
    HardwareSpec,
    ModelSpec,
    hardware_preset,
    model_preset,
)

LLAMA_8B = model_preset("llama-3-8b")
H100 = hardware_preset("h100")
COST = RooflineCost(LLAMA_8B, H100)


def effective_bandwidth(hw: HardwareSpec) -> float:
    return hw.memory_bandwidth_bytes_per_s * hw.memory_efficiency


def effective_flops(hw: HardwareSpec) -> float:
    return hw.peak_flops_per_s * hw.compute_efficiency


presets = st.builds(
    RooflineCost,
    st.sampled_from(list(MODEL_PRESETS.values())),
    st.sampled_from(list(HARDWARE_PRESETS.values())),
)
counts = st.integers(min_value=0, max_value=10**8)
shapes = st.builds(
    StepShape,
    num_prefill_seqs=counts,
    num_prefill_tokens=counts,
    prefill_attention_pairs=counts,
    prefill_kv_read_tokens=counts,
    num_decode_seqs=counts,
    num_decode_context_tokens=counts,
)


def test_is_a_cost_model_with_a_readable_label() -> None:
    assert isinstance(COST, CostModel)
    # A guess is labelled one, whether asked for or auto's fallback (issue 30).
    assert COST.label == "roofline:llama-3-8b@h100 (uncalibrated)"
    assert "llama-3-8b" in repr(COST)


def test_compute_and_memory_by_hand() -> None:
    shape = StepShape.build(prefill_chunks=[(100, 50)], decode_context_tokens=[10, 30])
    tokens = 102
    # The layers at every token, the LM head (hidden 4096 x vocab 128256) at one
    # position a sequence (vLLM's logits_indices): the chunk's last token, each decode.
    head = 2.0 * 4096 * 128256
    layers = LLAMA_8B.dense_flops_per_token - head
    flops = layers * tokens + head * 3 + 4 * 32 * 32 * 128 * ((100 * 50 + 100 * 101 // 2) + 40)
    kv_bytes = 131072 * ((150 + 40) + tokens)
    assert COST.compute_s(shape) == pytest.approx(flops / effective_flops(H100), rel=1e-12)
    assert COST.memory_s(shape) == pytest.approx(
        (LLAMA_8B.weight_bytes + kv_bytes) / effective_bandwidth(H100), rel=1e-12
    )
    assert COST.step_s(shape) == pytest.approx(
        max(COST.compute_s(shape), COST.memory_s(shape)),
        rel=1e-12,
    )


def test_decode_at_batch_one_is_memory_bound_by_the_weights() -> None:
    for hw in HARDWARE_PRESETS.values():
        cost = RooflineCost(LLAMA_8B, hw)
        shape = StepShape.build(decode_context_tokens=[100])
        assert cost.memory_s(shape) > 2 * cost.compute_s(shape)
        weights_s = LLAMA_8B.weight_bytes / effective_bandwidth(hw)
        assert cost.step_s(shape) == pytest.approx(weights_s, rel=1e-3)


def test_llama_8b_decode_on_h100_is_a_few_milliseconds() -> None:
    # 16 GB of bf16 weights over ~2.7 TB/s effective: about 6 ms a token.
    step_s = COST.step_s(StepShape.build(decode_context_tokens=[1000]))
    assert 4e-3 < step_s < 12e-3


def test_large_prefill_is_compute_bound() -> None:
    for hw in HARDWARE_PRESETS.values():
        cost = RooflineCost(LLAMA_8B, hw)
        shape = StepShape.build(prefill_chunks=[(8192, 0)])
        assert cost.compute_s(shape) > 2 * cost.memory_s(shape)
        # The layers at 8192 tokens, the LM head at the last one (beside attention).
        dense_flops = 8191 * LLAMA_8B.layer_flops_per_token + LLAMA_8B.dense_flops_per_token
        assert cost.step_s(shape) >= dense_flops / effective_flops(hw)


def test_decode_turns_compute_bound_at_large_batch() -> None:
    small = StepShape.build(decode_context_tokens=[64] * 8)
    large = StepShape.build(decode_context_tokens=[64] * 4096)
    assert COST.memory_s(small) > COST.compute_s(small)
    assert COST.compute_s(large) > COST.memory_s(large)


def test_batching_decode_amortises_the_weights() -> None:
    one = COST.step_s(StepShape.build(decode_context_tokens=[500]))
    many = COST.step_s(StepShape.build(decode_context_tokens=[500] * 64))
    assert many < 2 * one
    assert many / 64 < one / 10


def test_empty_step_is_free() -> None:
    assert COST.step_s(StepShape()) == 0.0


@given(cost=presets, shape=shapes)
def test_non_empty_steps_take_at_least_overhead_plus_weights(
    cost: RooflineCost, shape: StepShape
) -> None:
    if shape.is_empty:
        assert cost.step_s(shape) == 0.0
    else:
        floor_s = cost.model.weight_bytes / effective_bandwidth(cost.hardware)
        assert cost.step_s(shape) >= floor_s * (1 - 1e-12)


@given(
    cost=presets,
    shape=shapes,
    field=st.sampled_from(list(StepShape._fields)),
    extra=st.integers(1, 10**7),
)
def test_monotone_in_every_count(
    cost: RooflineCost, shape: StepShape, field: str, extra: int
) -> None:
    bigger = shape._replace(**{field: getattr(shape, field) + extra})
    assert cost.step_s(bigger) >= cost.step_s(shape)
    assert cost.compute_s(bigger) >= cost.compute_s(shape)
    assert cost.memory_s(bigger) >= cost.memory_s(shape)


@given(
    cost=presets,
    num_seqs=st.integers(0, 2048),
    context=st.integers(0, 10**8),
    num_steps=st.integers(0, 300),
)
def test_decode_steps_equal_a_loop_of_step_s(
    cost: RooflineCost, num_seqs: int, context: int, num_steps: int
) -> None:
    context = max(context, num_seqs)
    fast = run_prices(cost, num_seqs, context, num_steps)
    assert fast.shape == (num_steps,)
    assert fast.dtype == np.float64
    np.testing.assert_allclose(
        fast,
        by_loop(cost, num_seqs, context, num_steps),
        rtol=1e-12,
        atol=0,
    )


def test_decode_steps_cross_from_memory_to_compute_bound_consistently() -> None:
    # 1024 seqs starting short and growing long: whichever bound applies, the
    # vectorised path must agree with the loop step by step.
    steps = run_prices(COST, 1024, 1024 * 16, 2000)
    np.testing.assert_allclose(steps, by_loop(COST, 1024, 1024 * 16, 2000), rtol=1e-12, atol=0)
    assert np.all(np.diff(steps) >= 0)


def test_decode_steps_edge_cases() -> None:
    assert run_prices(COST, 4, 40, 0).shape == (0,)
    assert np.all(run_prices(COST, 0, 0, 5) == 0.0)


@pytest.mark.parametrize("model_name", ["llama-3-8b", "qwen2.5-7b", "smollm2-135m", "tiny"])
def test_h200_decodes_faster_than_h100(model_name: str) -> None:
    model = model_preset(model_name)
    h100, h200 = RooflineCost(model, H100), RooflineCost(model, hardware_preset("h200"))
    for batch in (1, 16, 128):
        shape = StepShape.build(decode_context_tokens=[2048] * batch)
        assert h200.step_s(shape) < h100.step_s(shape)
    # Same peak FLOP/s: a compute-bound prefill is no faster.
    prefill = StepShape.build(prefill_chunks=[(8192, 0)])
    assert h200.step_s(prefill) == pytest.approx(h100.step_s(prefill))


def test_faster_hardware_and_smaller_models_are_faster() -> None:
    shape = StepShape.build(prefill_chunks=[(512, 0)], decode_context_tokens=[1000] * 32)
    by_hw = [
        RooflineCost(LLAMA_8B, hardware_preset(n)).step_s(shape)
        for n in ("h200", "h100", "a100-80gb", "l4", "cpu-2core")
    ]
    assert by_hw == sorted(by_hw)
    by_model = [
        RooflineCost(model_preset(n), H100).step_s(shape)
        for n in ("tiny", "smollm2-135m", "llama-3-8b", "llama-3-70b")
    ]
    assert by_model == sorted(by_model)


def test_kv_dtype_only_changes_kv_traffic() -> None:
    fp8_kv = RooflineCost(LLAMA_8B.model_copy(update={"kv_dtype_bytes": 1.0}), H100)
    shape = StepShape.build(decode_context_tokens=[8000] * 64)
    assert fp8_kv.memory_s(shape) < COST.memory_s(shape)
    assert fp8_kv.compute_s(shape) == COST.compute_s(shape)


adapter: TypeAdapter[Any] = TypeAdapter(CostConfig)


def test_config_defaults_to_the_hardware_preset() -> None:
    config = adapter.validate_python({"kind": "roofline"})
    assert isinstance(config, RooflineCostConfig)
    cost = build_cost_model(config, LLAMA_8B, H100)
    assert isinstance(cost, RooflineCost)
    assert cost.hardware == H100
    shape = StepShape.build(prefill_chunks=[(300, 20)], decode_context_tokens=[99] * 7)
    assert cost.step_s(shape) == COST.step_s(shape)


def test_config_overrides_efficiencies() -> None:
    config = RooflineCostConfig(compute_efficiency=0.3, memory_efficiency=0.4)
    cost = build_cost_model(config, LLAMA_8B, H100)
    assert isinstance(cost, RooflineCost)
    prefill = StepShape.build(prefill_chunks=[(8192, 0)])
    decode = StepShape.build(decode_context_tokens=[100])
    assert cost.compute_s(prefill) == pytest.approx(2 * COST.compute_s(prefill))
    assert cost.memory_s(decode) == pytest.approx(2 * COST.memory_s(decode))
    assert cost.step_s(decode) == pytest.approx(cost.memory_s(decode))
    assert H100.compute_efficiency == 0.6  # the preset itself is untouched


def test_config_overrides_one_field_at_a_time() -> None:
    cost = build_cost_model(RooflineCostConfig(memory_efficiency=0.5), LLAMA_8B, H100)
    assert isinstance(cost, RooflineCost)
    assert cost.hardware.memory_efficiency == 0.5
    assert cost.hardware.compute_efficiency == H100.compute_efficiency


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "roofline", "compute_efficiency": 0.0},
        {"kind": "roofline", "memory_efficiency": 1.2},
        {"kind": "roofline", "step_overhead_s": 0.002},  # the engine's CPU: engine.cpu
        {"kind": "roofline", "peak_flops_per_s": 1e15},
    ],
)
def test_config_rejects_bad_input(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        adapter.validate_python(raw)


def test_keeps_its_specs_for_reports() -> None:
    model = ModelSpec(
        name="m",
        num_layers=1,
        hidden_size=4,
        num_attention_heads=1,
        num_kv_heads=1,
        intermediate_size=4,
        vocab_size=4,
    )
    cost = RooflineCost(model, H100)
    assert cost.model is model
    assert cost.hardware is H100


@pytest.mark.parametrize("hw_name", sorted(HARDWARE_PRESETS))
def test_chunking_a_prefill_never_makes_it_cheaper(hw_name: str) -> None:
    # Two chunks do the same FLOPs but read the weights twice (equal when
    # compute-bound, to float rounding).
    cost = RooflineCost(LLAMA_8B, hardware_preset(hw_name))
    whole = cost.step_s(StepShape.build(prefill_chunks=[(4096, 0)]))
    halves = cost.step_s(StepShape.build(prefill_chunks=[(2048, 0)])) + cost.step_s(
        StepShape.build(prefill_chunks=[(2048, 2048)])
    )
    assert halves >= whole * (1 - 1e-12)


def test_attention_makes_long_prefills_superlinear() -> None:
    cost = RooflineCost(LLAMA_8B, H100)
    short = cost.step_s(StepShape.build(prefill_chunks=[(4096, 0)]))
    long = cost.step_s(StepShape.build(prefill_chunks=[(32768, 0)]))
    assert long > 8 * short


def test_the_lm_head_runs_at_one_position_a_sequence() -> None:
    # vLLM v1 computes logits at logits_indices = query_start_loc[1:] - 1: each
    # scheduled sequence's last position, a chunk that does not finish its prompt
    # too. So a chunk's extra tokens pay the layers only, and a second sequence
    # pays one more LM head (hidden 4096 x vocab 128256). No attention: only dense FLOPs.
    head_s = 2.0 * 4096 * 128256 / effective_flops(H100)
    layers_s = (LLAMA_8B.dense_flops_per_token - 2.0 * 4096 * 128256) / effective_flops(H100)

    def chunks(*sizes: int) -> StepShape:
        return StepShape(num_prefill_seqs=len(sizes), num_prefill_tokens=sum(sizes))

    assert COST.compute_s(chunks(1000)) == pytest.approx(1000 * layers_s + head_s, rel=1e-12)
    assert COST.compute_s(chunks(500, 500)) == pytest.approx(
        1000 * layers_s + 2 * head_s, rel=1e-12
    )
    # A decode's one token is its logits position: every decode pays the LM head.
    decodes = StepShape(num_decode_seqs=64)
    assert COST.compute_s(decodes) == pytest.approx(64 * (layers_s + head_s), rel=1e-12)
    # The weights, the LM head's included, are read once a step either way.
    assert COST.memory_s(chunks(1000)) == pytest.approx(
        (LLAMA_8B.weight_bytes + 1000 * 131072) / effective_bandwidth(H100), rel=1e-12
    )


@given(cost=presets, num_seqs=st.integers(1, 4096), context=st.integers(0, 10**8))
def test_a_decode_only_step_is_priced_as_every_token_with_its_lm_head(
    cost: RooflineCost, num_seqs: int, context: int
) -> None:
    # A decode-only step has as many logits positions as tokens: the whole dense
    # FLOPs of each, the formula before the LM head moved to one a sequence, to the bit.
    shape = StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=context)
    hw, model = cost.hardware, cost.model
    compute = (
        model.dense_flops_per_token / hw.effective_flops_per_s * num_seqs
        + model.attention_flops_per_pair / hw.effective_flops_per_s * context
    )
    memory = model.weight_bytes / hw.effective_bytes_per_s + (
        model.kv_bytes_per_token / hw.effective_bytes_per_s * (context + num_seqs)
    )
    assert cost.step_s(shape) == max(compute, memory)
