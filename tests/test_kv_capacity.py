"""KV capacity as vLLM computes it (sim.hardware.kv_capacity): hand-computed budgets,
block counts vLLM logged, vLLM's start-up errors, and where the count came from."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.errors import ConfigError
from sim.hardware.kv_capacity import (
    GIB,
    MIB,
    SOURCE_ESTIMATE,
    SOURCE_SCENARIO,
    KvCacheBudget,
    KvSizing,
    kv_cache_budget,
    vllm_num_kv_blocks,
)
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import HardwareSpec, ModelSpec, hardware_preset, model_preset
from sim.scenario import scenario_from_dict

LLAMA_8B = model_preset("llama-3.1-8b")
LLAMA_70B = model_preset("llama-3-70b")
H100 = hardware_preset("h100")
ONE_GPU = ParallelismConfig()


def layout(tp: int = 1, pp: int = 1) -> ParallelismConfig:
    return ParallelismConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp)  # type: ignore[arg-type]


def sizing(**kwargs: Any) -> KvSizing:
    """vLLM's profile settings for an 8B model on one H100, with ``kwargs`` replaced."""
    defaults: dict[str, Any] = {
        "block_size_tokens": 16,
        "gpu_memory_utilization": 0.9,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 256,
    }
    return KvSizing(**{**defaults, **kwargs})


def budget(
    model: ModelSpec = LLAMA_8B,
    hardware: HardwareSpec = H100,
    parallelism: ParallelismConfig = ONE_GPU,
    **kwargs: Any,
) -> KvCacheBudget:
    return kv_cache_budget(model, hardware, parallelism, sizing(**kwargs))


def blocks(
    model: ModelSpec = LLAMA_8B,
    hardware: HardwareSpec = H100,
    parallelism: ParallelismConfig = ONE_GPU,
    **kwargs: Any,
) -> int:
    max_model_len_tokens = kwargs.pop("max_model_len_tokens", 8192)
    return vllm_num_kv_blocks(
        model, hardware, parallelism, sizing(**kwargs), max_model_len_tokens=max_model_len_tokens
    )


# --- a hand-computed budget -----------------------------------------------------------


def test_llama_8b_on_h100_term_by_term() -> None:
    got = budget()
    requested = math.ceil(79.22 * GIB * 0.9)  # CUDA's total x utilization, rounded up
    weights = 8_030_261_248 * 2  # Llama-3.1-8B's parameters, bf16
    activations = 256 * 128_256 * 24  # sampler rows x vocab x 24 B > 4 x 2048 x 18432 x 2
    non_torch = 0.2 * GIB
    graphs = 32 * 15 * MIB  # 32 layers
    block = 16 * 2 * 32 * 8 * 128 * 2  # 16 tokens of K and V, 32 layers, 8 heads of 128, bf16
    assert (got.requested_bytes, got.weights_bytes) == (requested, weights)
    assert (got.activation_bytes, got.non_torch_bytes) == (activations, non_torch)
    assert (got.cudagraph_bytes, got.block_bytes) == (graphs, block)
    available = requested - weights - activations - non_torch - graphs
    assert got.available_bytes == available
    assert got.num_blocks == available // block == 28_128


def test_no_cudagraph_term_when_vllm_does_not_subtract_it() -> None:
    with_graphs, without = budget(), budget(estimate_cudagraph_memory=False)
    assert without.cudagraph_bytes == 0
    assert without.available_bytes - with_graphs.available_bytes == 32 * 15 * MIB
    assert without.num_blocks - with_graphs.num_blocks == 240  # 480 MiB of 2 MiB blocks


# --- against block counts vLLM logged ------------------------------------------------------


def test_llama_3_8b_on_h100_matches_vllms_logged_kv_memory_within_5_percent() -> None:
    """vllm-project/vllm PR #10511 (youkaichao, 2024-12-14), `vllm serve
    meta-llama/Meta-Llama-3-8B` on one H100: total_gpu_memory 79.22GiB,
    gpu_memory_utilization 0.90, available_kv_cache_memory 53.29GiB, i.e.
    floor(53.29 GiB / 2 MiB) = 27284 blocks of 16 tokens. vLLM V0 then: no
    CUDA-graph term, no chunked prefill (budget = max_model_len 8192), 256 seqs."""
    logged = math.floor(53.29 * GIB / (16 * LLAMA_8B.kv_bytes_per_token))
    assert logged == 27_284
    predicted = blocks(
        model_preset("llama-3-8b"),
        max_num_batched_tokens=8192,
        estimate_cudagraph_memory=False,
    )
    assert predicted == pytest.approx(logged, rel=0.05)


def test_llama_3_1_8b_on_rtx_4090_matches_vllm_0_19s_block_count_within_5_percent() -> None:
    """LLMServingSim's vLLM 0.19.0 run (shared/data/llmservingsim, bench/examples/
    RTX4090/Llama-3.1-8B/vllm/meta.json): num_gpu_blocks 2588 with
    gpu_memory_utilization 0.9, max_num_batched_tokens 2048, max_num_seqs 256,
    max_model_len 32768; 0.19 does not subtract CUDA graphs (the default turned on in 0.21)."""
    predicted = blocks(
        hardware=hardware_preset("rtx-4090"),
        max_model_len_tokens=32768,
        estimate_cudagraph_memory=False,
    )
    assert predicted == pytest.approx(2588, rel=0.05)


# --- vLLM's start-up errors --------------------------------------------------------------


def test_weights_bigger_than_the_share_say_which_fields() -> None:
    with pytest.raises(ConfigError) as info:
        blocks(LLAMA_70B)
    message = str(info.value)
    assert message == (
        "the weights of model llama-3-70b (131.42 GiB per GPU) exceed hardware h100's"
        " 79.22 GiB x engine.gpu_memory_utilization = 71.30 GiB; use more GPUs (parallelism)"
        " or smaller weights (quantization)"
    )


def test_no_room_for_one_block_is_vllms_no_available_memory_error() -> None:
    l4 = hardware_preset("l4")  # 24 GB: 15.65 GiB at 0.7, weights 14.96 GiB, then activations
    expected = r"no memory for the KV cache: hardware l4's 22\.35 GiB"
    with pytest.raises(ConfigError, match=expected) as info:
        blocks(hardware=l4, gpu_memory_utilization=0.7)
    assert "\n" not in str(info.value) and "less than one block (2.00 MiB)" in str(info.value)


def test_max_model_len_that_does_not_fit_is_refused_as_vllm_does() -> None:
    l4 = hardware_preset("l4")
    fitted = blocks(hardware=l4, max_model_len_tokens=16)
    assert 1000 < fitted < 8192  # a few GiB of KV: 128k tokens need 8192 blocks
    with pytest.raises(
        ConfigError, match=r"engine.max_model_len_tokens 131072 needs 8192 KV blocks"
    ):
        blocks(hardware=l4, max_model_len_tokens=131072)
    assert blocks(hardware=l4, max_model_len_tokens=fitted * 16) == fitted


def test_bad_block_size_and_layout_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"engine\.block_size_tokens"):
        blocks(block_size_tokens=0)
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        blocks(model_preset("qwen2.5-7b"), parallelism=layout(8))


def test_scenario_error_is_one_line_naming_the_fields() -> None:
    doc = {
        "hardware": "l4",
        "engine": {"max_model_len_tokens": 131072},
        "workload": {
            "kind": "synthetic",
            "arrival": {"kind": "poisson", "rate_per_s": 1},
            "prompt_tokens": {"kind": "fixed", "tokens": 8},
            "output_tokens": {"kind": "fixed", "tokens": 8},
            "num_requests": 2,
        },
    }
    with pytest.raises(ConfigError) as info:
        api.kv_blocks_for(scenario_from_dict(doc))
    message = str(info.value)
    assert message.startswith("model, hardware: engine.max_model_len_tokens 131072")
    assert "\n" not in message


# --- parallel layouts -------------------------------------------------------------------


def test_70b_on_four_h100s_by_hand() -> None:
    got = blocks(LLAMA_70B, parallelism=layout(4))
    requested = math.ceil(79.22 * GIB * 0.9)
    weights = LLAMA_70B.weight_bytes / 4
    forward = 4 * 2048 * (8192 + 28672 / 4) * 2  # 0.47 GiB < sampler 0.73 GiB
    activations = max(forward, 256 * 128_256 * 24)
    graphs = 80 * 15 * MIB  # every GPU holds all 80 layers with tp
    block = 16 * 2 * 80 * (8 // 4) * 128 * 2
    assert got == math.floor((requested - weights - activations - 0.2 * GIB - graphs) / block)
    assert got * 16 > 400_000  # ~ half a million tokens of KV cache per GPU group


@settings(max_examples=40, deadline=None)
@given(
    block_size=st.sampled_from([8, 16, 32]),
    util=st.floats(min_value=0.85, max_value=0.95),
    batched_tokens=st.integers(min_value=256, max_value=8192),
    pp=st.integers(min_value=1, max_value=4),
)
def test_kv_blocks_grow_with_tp_and_pp(
    block_size: int, util: float, batched_tokens: int, pp: int
) -> None:
    def count(tp: int, stages: int) -> int:
        return blocks(
            LLAMA_70B,
            parallelism=layout(tp, stages),
            block_size_tokens=block_size,
            gpu_memory_utilization=util,
            max_num_batched_tokens=batched_tokens,
            max_model_len_tokens=16,
        )

    assert count(4, pp) < count(8, pp)
    assert count(4, pp) < count(4, pp + 1)
    if pp >= 2:
        assert count(2, pp) < count(4, pp)


# --- properties -------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    low=st.floats(0.3, 1.0),
    high=st.floats(0.3, 1.0),
    block_size=st.sampled_from([1, 8, 16, 32, 128]),
)
def test_monotone_in_utilization_and_token_capacity_independent_of_block_size(
    low: float, high: float, block_size: int
) -> None:
    low, high = min(low, high), max(low, high)
    h200 = hardware_preset("h200")

    def count(util: float, size: int) -> int:
        return budget(hardware=h200, gpu_memory_utilization=util, block_size_tokens=size).num_blocks

    assert count(low, block_size) <= count(high, block_size)
    per_token = count(high, 1)  # blocks of one token: the token capacity
    assert per_token - block_size < count(high, block_size) * block_size <= per_token


def test_more_memory_and_smaller_kv_mean_more_blocks() -> None:
    # H200: 125.97 GiB requested against 71.30 GiB, the same 16.4 GiB taken off both.
    assert blocks(hardware=hardware_preset("h200")) > 1.9 * blocks()
    fp8_kv = LLAMA_8B.model_copy(update={"kv_dtype_bytes": 1.0})
    assert 2 * blocks() <= blocks(fp8_kv) <= 2 * blocks() + 1


def test_more_sequences_or_tokens_leave_less_room() -> None:
    assert blocks(max_num_seqs=1024) < blocks(max_num_seqs=256)
    assert blocks(max_num_batched_tokens=16384, max_num_seqs=1) < blocks(max_num_seqs=1)


# --- where the count came from -----------------------------------------------------------


def run_doc(**engine: Any) -> dict[str, Any]:
    return {
        "cost": {"kind": "roofline"},
        "engine": {"max_model_len_tokens": 2048, **engine},
        "workload": {
            "kind": "synthetic",
            "arrival": {"kind": "poisson", "rate_per_s": 5},
            "prompt_tokens": {"kind": "fixed", "tokens": 32},
            "output_tokens": {"kind": "fixed", "tokens": 4},
            "num_requests": 5,
        },
    }


def test_summary_records_a_given_count_and_its_source() -> None:
    summary = api.run(scenario_from_dict(run_doc(num_kv_blocks=2588))).summary
    settings_ = summary["engine_settings"]
    assert (settings_["num_kv_blocks"], settings_["num_kv_blocks_source"]) == (
        2588,
        SOURCE_SCENARIO,
    )
    assert SOURCE_SCENARIO == "engine.num_kv_blocks"


def test_summary_records_an_estimate_and_its_source() -> None:
    scenario = scenario_from_dict(run_doc())
    summary = api.run(scenario).summary
    settings_ = summary["engine_settings"]
    assert settings_["num_kv_blocks_source"] == SOURCE_ESTIMATE == "memory_profile_estimate"
    policy = scenario.scheduler
    assert settings_["num_kv_blocks"] == blocks(
        max_num_batched_tokens=policy.max_num_batched_tokens,  # type: ignore[union-attr]
        max_num_seqs=policy.max_num_seqs,  # type: ignore[union-attr]
        max_model_len_tokens=2048,
        model=model_preset("llama-3-8b"),
    )
    older = api.run(scenario_from_dict(run_doc(estimate_cudagraph_memory=False))).summary
    assert older["engine_settings"]["num_kv_blocks"] == settings_["num_kv_blocks"] + 240


# --- the budget's arithmetic and the hardware field ---------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    model_name=st.sampled_from(["llama-3-8b", "qwen2.5-7b", "smollm2-135m", "llama-3-70b"]),
    hardware_name=st.sampled_from(["h100", "h200", "b200", "rtx-pro-6000", "l40s"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    tokens=st.integers(1, 1 << 15),
    seqs=st.integers(1, 2048),
    graphs=st.booleans(),
)
def test_available_is_requested_minus_every_term_and_blocks_floor_it(
    model_name: str, hardware_name: str, tp: int, tokens: int, seqs: int, graphs: bool
) -> None:
    model, hardware = model_preset(model_name), hardware_preset(hardware_name)
    if model.num_attention_heads % tp or (model.num_kv_heads % tp and tp % model.num_kv_heads):
        return  # layouts vLLM refuses (tested above)
    got = budget(
        model,
        hardware,
        layout(tp),
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        estimate_cudagraph_memory=graphs,
    )
    terms = got.weights_bytes + got.activation_bytes + got.non_torch_bytes + got.cudagraph_bytes
    assert got.available_bytes == pytest.approx(got.requested_bytes - terms, abs=1.0)
    assert got.weights_bytes == pytest.approx(model.weight_bytes / tp)
    assert (got.cudagraph_bytes > 0) == graphs
    if got.num_blocks > 0:
        assert got.num_blocks * got.block_bytes <= got.available_bytes
        assert got.available_bytes < (got.num_blocks + 1) * got.block_bytes
    else:
        assert got.available_bytes < got.block_bytes


def test_cuda_memory_can_be_set_inline_and_must_be_positive() -> None:
    doc = run_doc()
    doc["hardware"] = {"preset": "h100", "cuda_memory_bytes": 80 * GIB}
    more = api.kv_blocks_for(scenario_from_dict(doc))
    # 0.78 GiB more x 0.9 = 0.70 GiB more, in 2 MiB blocks: 359 more (ceil rounding aside).
    base = api.kv_blocks_for(scenario_from_dict(run_doc()))
    assert more - base == pytest.approx((80 - 79.22) * 0.9 * 512, abs=1)
    doc["hardware"] = {"preset": "h100", "cuda_memory_bytes": 0}
    with pytest.raises(ConfigError, match="cuda_memory_bytes"):
        scenario_from_dict(doc, "x.yaml")


def test_the_cudagraph_switch_is_a_scenario_key() -> None:
    doc = run_doc(estimate_cudagraph_memory=False)
    assert scenario_from_dict(doc).engine.estimate_cudagraph_memory is False
    assert scenario_from_dict(run_doc()).engine.estimate_cudagraph_memory is True
    with pytest.raises(ConfigError, match="estimate_cudagraph_memory"):
        scenario_from_dict(run_doc(estimate_cudagraph_memory="sometimes"), "x.yaml")


def test_the_checked_count_is_the_budgets_and_the_sizing_is_frozen() -> None:
    frozen = sizing()
    counted = vllm_num_kv_blocks(LLAMA_8B, H100, ONE_GPU, frozen, max_model_len_tokens=8192)
    assert counted == kv_cache_budget(LLAMA_8B, H100, ONE_GPU, frozen).num_blocks == blocks()
    with pytest.raises(AttributeError):
        frozen.max_num_seqs = 1  # type: ignore[misc]
