"""Quantization: dtypes change weight and KV bytes, step times and KV capacity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.cost.base import StepShape
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.kv_capacity import KvSizing, forward_activation_bytes, vllm_num_kv_blocks
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.quantization import (
    DTYPE_BYTES,
    INT4_GROUP_SIZE,
    QuantizationConfig,
    dtype_name,
    quantize,
)
from sim.hardware.specs import MODEL_PRESETS, hardware_preset, model_preset
from sim.scenario import load_scenario, scenario_from_dict

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
LLAMA_8B = model_preset("llama-3-8b")
H100 = hardware_preset("h100")


def kv_blocks(
    model: Any,
    hardware: Any,
    layout: ParallelismConfig | None = None,
    block_size: int = 16,
    util: float = 0.9,
) -> int:
    """vLLM-sized KV blocks at a 2048-token budget and 256 sequences."""
    return vllm_num_kv_blocks(
        model,
        hardware,
        layout or ParallelismConfig(),
        KvSizing(
            block_size_tokens=block_size,
            gpu_memory_utilization=util,
            max_num_batched_tokens=2048,
            max_num_seqs=256,
        ),
        max_model_len_tokens=block_size,
    )


L4 = hardware_preset("l4")
BF16 = QuantizationConfig(weights="bf16", kv_cache="bf16")


def q(weights: Any = None, kv_cache: Any = None) -> QuantizationConfig:
    return QuantizationConfig.model_validate({"weights": weights, "kv_cache": kv_cache})


def test_no_quantization_returns_the_model_itself() -> None:
    assert quantize(LLAMA_8B, None) is LLAMA_8B
    assert quantize(LLAMA_8B, QuantizationConfig()) is LLAMA_8B
    assert QuantizationConfig().is_identity and not q("fp8").is_identity


def test_dtype_sizes() -> None:
    assert DTYPE_BYTES["bf16"] == DTYPE_BYTES["fp16"] == 2.0
    assert DTYPE_BYTES["fp8"] == DTYPE_BYTES["int8"] == 1.0
    # Half a byte plus one fp16 scale per group of 128 weights.
    assert DTYPE_BYTES["int4"] == 0.5 + 2.0 / INT4_GROUP_SIZE


def test_int4_weights_are_about_a_quarter_of_bf16() -> None:
    ratio = quantize(LLAMA_8B, q("int4")).weight_bytes / quantize(LLAMA_8B, BF16).weight_bytes
    assert 0.25 < ratio < 0.27


def test_fp8_weights_are_half_of_bf16_and_leave_kv_alone() -> None:
    fp8 = quantize(LLAMA_8B, q("fp8"))
    assert fp8.weight_bytes == LLAMA_8B.weight_bytes / 2
    assert fp8.kv_bytes_per_token == LLAMA_8B.kv_bytes_per_token
    assert fp8.num_params == LLAMA_8B.num_params and fp8.name == LLAMA_8B.name


def test_fp8_kv_halves_kv_bytes_and_leaves_weights_alone() -> None:
    fp8_kv = quantize(LLAMA_8B, q(kv_cache="fp8"))
    assert fp8_kv.kv_bytes_per_token == LLAMA_8B.kv_bytes_per_token / 2
    assert fp8_kv.weight_bytes == LLAMA_8B.weight_bytes


@settings(max_examples=50, deadline=None)
@given(
    model=st.sampled_from(list(MODEL_PRESETS.values())),
    weights=st.sampled_from(sorted(DTYPE_BYTES)),
    kv=st.sampled_from(["bf16", "fp16", "fp8", "int8"]),
)
def test_bytes_scale_with_the_dtype(model: Any, weights: str, kv: str) -> None:
    quantized = quantize(model, q(weights, kv))
    scale_w = DTYPE_BYTES[weights] / model.weight_dtype_bytes
    scale_kv = DTYPE_BYTES[kv] / model.kv_dtype_bytes
    assert quantized.weight_bytes == pytest.approx(model.weight_bytes * scale_w, rel=1e-12)
    assert quantized.kv_bytes_per_token == pytest.approx(
        model.kv_bytes_per_token * scale_kv, rel=1e-12
    )
    # FLOPs do not change: only bytes do.
    assert quantized.dense_flops_per_token == model.dense_flops_per_token


def test_activations_stay_at_least_two_bytes() -> None:
    for weights in ("fp8", "int8", "int4"):
        model = quantize(LLAMA_8B, q(weights))
        assert forward_activation_bytes(model, 2048) == forward_activation_bytes(LLAMA_8B, 2048)


@settings(max_examples=50, deadline=None)
@given(
    model_name=st.sampled_from(["llama-3-8b", "qwen2.5-7b", "smollm2-135m"]),
    hardware_name=st.sampled_from(["h100", "h200", "a100-80gb", "l4"]),
    util=st.floats(min_value=0.8, max_value=0.95),
    block_size=st.sampled_from([8, 16, 32]),
)
def test_fp8_kv_doubles_the_blocks_within_rounding(
    model_name: str, hardware_name: str, util: float, block_size: int
) -> None:
    model, hardware = model_preset(model_name), hardware_preset(hardware_name)
    bf16 = kv_blocks(quantize(model, BF16), hardware, block_size=block_size, util=util)
    fp8 = kv_blocks(quantize(model, q("bf16", "fp8")), hardware, block_size=block_size, util=util)
    assert 2 * bf16 <= fp8 <= 2 * bf16 + 1


@settings(max_examples=30, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    weights=st.sampled_from(["fp8", "int4"]),
)
def test_smaller_weights_leave_more_kv_room_at_any_layout(tp: int, weights: str) -> None:
    layout = ParallelismConfig(tensor_parallel_size=tp)  # type: ignore[arg-type]
    model = model_preset("llama-3-70b")
    if tp >= 2:  # bf16 70B needs at least two H100s
        bf16 = kv_blocks(quantize(model, BF16), H100, layout)
        smaller = kv_blocks(quantize(model, q(weights)), H100, layout)
        assert smaller > bf16
    if weights == "int4" or tp >= 2:  # int4 70B (~36 GB) fits one H100 with room
        assert kv_blocks(quantize(model, q(weights)), H100, layout) > 0


def test_70b_on_one_h100_needs_8_bit_weights_and_int4_leaves_room() -> None:
    model = model_preset("llama-3-70b")

    def blocks(weights: str) -> int:
        return kv_blocks(quantize(model, q(weights)), H100)

    with pytest.raises(ConfigError, match=r"131\.42 GiB per GPU"):
        blocks("bf16")
    # fp8: 65.7 GiB of weights in 71.3 GiB leaves a few GiB of KV cache after
    # activations (0.73), non-torch (0.2) and CUDA graphs (80 x 15 MiB = 1.17).
    fp8_kv_bytes = blocks("fp8") * 16 * quantize(model, q("fp8")).kv_bytes_per_token
    assert 2 * 2**30 < fp8_kv_bytes < 5 * 2**30
    assert blocks("int4") > 8 * blocks("fp8")


def test_quantized_weights_speed_up_memory_bound_decode_only() -> None:
    bf16 = RooflineCost(quantize(LLAMA_8B, BF16), H100)
    fp8 = RooflineCost(quantize(LLAMA_8B, q("fp8", "fp8")), H100)
    int4 = RooflineCost(quantize(LLAMA_8B, q("int4", "fp8")), H100)
    decode = StepShape(num_decode_seqs=8, num_decode_context_tokens=8 * 1000)
    assert int4.step_s(decode) < fp8.step_s(decode) < bf16.step_s(decode)
    # Weight traffic about halves: the (GPU-only) decode time nearly halves.
    assert fp8.step_s(decode) == pytest.approx(bf16.step_s(decode) / 2, rel=0.01)
    prefill = StepShape.build(prefill_chunks=[(8192, 0)])
    assert fp8.compute_s(prefill) == bf16.compute_s(prefill)
    assert fp8.step_s(prefill) == bf16.step_s(prefill)  # compute-bound: no gain


def test_dtype_names_for_reports() -> None:
    assert dtype_name(2.0, "fp16") == "fp16"
    assert dtype_name(2.0) == "bf16" and dtype_name(4.0) == "fp32"
    assert dtype_name(0.75) == "0.75 bytes"


# --- scenario wiring ----------------------------------------------------------------


def doc(**quantization: Any) -> dict[str, Any]:
    return {
        "model": "llama-3-8b",
        "hardware": "l4",
        "cost": {"kind": "roofline"},
        "quantization": quantization,
        "scheduler": {"kind": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 2048},
        "engine": {"max_model_len_tokens": 4096},
        "workload": {
            "kind": "synthetic",
            "num_requests": 300,
            "arrival": {"kind": "poisson", "rate_per_s": 100},  # far past saturation
            "prompt_tokens": {"kind": "fixed", "tokens": 1500},
            "output_tokens": {"kind": "fixed", "tokens": 200},
        },
    }


@pytest.mark.parametrize(
    ("quantization", "field"),
    [
        ({"weights": "fp4"}, "quantization.weights"),
        ({"kv_cache": "int4"}, "quantization.kv_cache"),
        ({"activations": "fp8"}, "quantization.activations"),
    ],
)
def test_bad_dtype_is_a_one_line_config_error(quantization: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(doc(**quantization), "q.yaml")
    message = str(info.value)
    assert message.startswith("q.yaml: ") and field in message and "\n" not in message


def test_fp8_kv_raises_throughput_at_saturation() -> None:
    bf16 = api.run(scenario_from_dict(doc(weights="bf16", kv_cache="bf16"))).summary
    fp8 = api.run(scenario_from_dict(doc(weights="bf16", kv_cache="fp8"))).summary
    assert 2 * bf16["num_kv_blocks"] <= fp8["num_kv_blocks"] <= 2 * bf16["num_kv_blocks"] + 1
    assert fp8["output_throughput"] > bf16["output_throughput"]
    assert (bf16["kv_cache_dtype"], fp8["kv_cache_dtype"]) == ("bf16", "fp8")
    assert fp8["weight_dtype"] == "bf16"


def test_summary_reports_native_dtypes_without_a_section() -> None:
    summary = api.run(scenario_from_dict(doc() | {"quantization": {}})).summary
    assert (summary["weight_dtype"], summary["kv_cache_dtype"]) == ("bf16", "bf16")
    scenario = scenario_from_dict(doc())
    assert api.model_for(scenario) is scenario.model


def test_shipped_quantized_scenario_beats_bf16() -> None:
    fast = ["workload.num_requests=150"]
    fp8 = load_scenario(SCENARIOS / "quantized.yaml", fast)
    assert (fp8.quantization.weights, fp8.quantization.kv_cache) == ("fp8", "fp8")
    bf16 = load_scenario(
        SCENARIOS / "quantized.yaml",
        [*fast, "quantization.weights=bf16", "quantization.kv_cache=bf16"],
    )
    fp8_summary, bf16_summary = api.run(fp8).summary, api.run(bf16).summary
    assert fp8_summary["num_kv_blocks"] > 2 * bf16_summary["num_kv_blocks"]
    assert fp8_summary["mean_tpot_ms"] < bf16_summary["mean_tpot_ms"]
    assert fp8_summary["output_throughput"] > bf16_summary["output_throughput"]
