"""KV cache sizing: block counts, the activation reserve, and errors that say why."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.cost.memory import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    default_activation_reserve_bytes,
    num_kv_blocks,
)
from sim.cost.specs import HardwareSpec, ModelSpec, hardware_preset, model_preset
from sim.errors import ConfigError

GB = 1e9

# 1 layer, 1 KV head of dim 4, 1-byte KV: 2 * 1 * 1 * 4 * 1 = 8 bytes per token.
TOY = ModelSpec(
    name="toy",
    num_layers=1,
    hidden_size=4,
    num_attention_heads=1,
    num_kv_heads=1,
    intermediate_size=4,
    vocab_size=4,
    weight_dtype_bytes=1.0,
    kv_dtype_bytes=1.0,
)
TOY_HW = HardwareSpec(
    name="box",
    peak_flops_per_s=1e12,
    memory_bandwidth_bytes_per_s=1e11,
    memory_bytes=10_000.0,
)


def test_block_count_by_hand() -> None:
    assert TOY.kv_bytes_per_token == 8
    # 10000 * 0.5 = 5000 usable - weights - 1000 reserve, in 16-token blocks of 128 B.
    free = 5000 - TOY.weight_bytes - 1000
    blocks = num_kv_blocks(TOY, TOY_HW, 16, 0.5, activation_reserve_bytes=1000)
    assert blocks == int(free // 128)
    assert blocks * 128 <= free < (blocks + 1) * 128


def test_llama_3_8b_on_h100_fits_a_vllm_like_cache() -> None:
    blocks = num_kv_blocks(model_preset("llama-3-8b"), hardware_preset("h100"), 16, 0.9)
    tokens = blocks * 16
    # About 72 GB usable - 16 GB weights - ~1 GB activations, at 128 KiB a token.
    assert 350_000 < tokens < 450_000


def test_70b_on_l4_says_what_does_not_fit() -> None:
    with pytest.raises(ConfigError) as err:
        num_kv_blocks(model_preset("llama-3-70b"), hardware_preset("l4"), 16, 0.9)
    assert (
        str(err.value) == "llama-3-70b needs 141.1 GB of weights but l4 has 24.0 GB × 0.90 usable"
    )


def test_reserve_that_tips_it_over_is_named() -> None:
    llama = model_preset("llama-3-8b")
    l4 = hardware_preset("l4")
    # 16.06 GB of weights fit in 24 GB x 0.7 = 16.8 GB, but not with 2 GB more.
    with pytest.raises(ConfigError, match=r"16\.1 GB of weights \+ 2\.0 GB activation reserve"):
        num_kv_blocks(llama, l4, 16, 0.7, activation_reserve_bytes=2 * GB)
    assert num_kv_blocks(llama, l4, 16, 0.7, activation_reserve_bytes=0.1 * GB) > 0


def test_no_room_for_one_block_is_an_error() -> None:
    usable = 10_000 * 0.5 - TOY.weight_bytes
    with pytest.raises(ConfigError, match="less than one 16-token block"):
        num_kv_blocks(TOY, TOY_HW, 16, 0.5, activation_reserve_bytes=usable - 100)
    assert num_kv_blocks(TOY, TOY_HW, 16, 0.5, activation_reserve_bytes=usable - 128) == 1


@pytest.mark.parametrize(
    ("block_size", "utilization", "reserve", "field"),
    [
        (0, 0.9, None, "block_size_tokens"),
        (16, 0.0, None, "gpu_memory_utilization"),
        (16, 1.01, None, "gpu_memory_utilization"),
        (16, 0.9, -1.0, "activation_reserve_bytes"),
        (16, 0.9, float("nan"), "activation_reserve_bytes"),
    ],
)
def test_bad_arguments_raise_config_error(
    block_size: int, utilization: float, reserve: float | None, field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        num_kv_blocks(TOY, TOY_HW, block_size, utilization, reserve)


def test_default_reserve_is_used_when_none_given() -> None:
    llama, h100 = model_preset("llama-3-8b"), hardware_preset("h100")
    explicit = default_activation_reserve_bytes(llama, 2048)
    assert num_kv_blocks(llama, h100, 16, 0.9, None, max_num_batched_tokens=2048) == (
        num_kv_blocks(llama, h100, 16, 0.9, explicit)
    )
    assert num_kv_blocks(llama, h100, 16, 0.9) == num_kv_blocks(
        llama, h100, 16, 0.9, default_activation_reserve_bytes(llama)
    )


def test_default_reserve_is_about_a_gigabyte_for_llama_8b() -> None:
    reserve = default_activation_reserve_bytes(model_preset("llama-3-8b"))
    assert DEFAULT_MAX_NUM_BATCHED_TOKENS == 8192
    assert 0.5 * GB < reserve < 3 * GB


def test_default_reserve_scales_with_tokens_and_width() -> None:
    llama = model_preset("llama-3-8b")
    assert default_activation_reserve_bytes(llama, 4096) * 2 == default_activation_reserve_bytes(
        llama, 8192
    )
    assert default_activation_reserve_bytes(model_preset("llama-3-70b")) > (
        default_activation_reserve_bytes(llama)
    )
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        default_activation_reserve_bytes(llama, 0)


def test_quantised_weights_keep_16_bit_activations() -> None:
    llama = model_preset("llama-3-8b")
    fp8 = llama.model_copy(update={"weight_dtype_bytes": 1.0})
    assert default_activation_reserve_bytes(fp8) == default_activation_reserve_bytes(llama)
    tiny = model_preset("tiny")  # fp32 activations are twice as big
    assert default_activation_reserve_bytes(tiny) == 2 * default_activation_reserve_bytes(
        tiny.model_copy(update={"weight_dtype_bytes": 2.0})
    )


def test_more_memory_means_more_blocks() -> None:
    llama = model_preset("llama-3-8b")
    h100, h200 = hardware_preset("h100"), hardware_preset("h200")
    assert num_kv_blocks(llama, h200, 16, 0.9) > num_kv_blocks(llama, h100, 16, 0.9)
    fp8_kv = llama.model_copy(update={"kv_dtype_bytes": 1.0})
    assert num_kv_blocks(fp8_kv, h100, 16, 0.9) >= 2 * num_kv_blocks(llama, h100, 16, 0.9)


@given(
    low=st.floats(0.3, 1.0),
    high=st.floats(0.3, 1.0),
    block_size=st.sampled_from([1, 8, 16, 32, 128]),
)
def test_monotone_in_utilization_and_token_capacity_independent_of_block_size(
    low: float, high: float, block_size: int
) -> None:
    low, high = min(low, high), max(low, high)
    llama, h100 = model_preset("llama-3-8b"), hardware_preset("h100")
    assert num_kv_blocks(llama, h100, block_size, low) <= num_kv_blocks(
        llama, h100, block_size, high
    )
    # Flooring loses less than one block of tokens.
    per_token = num_kv_blocks(llama, h100, 1, high)
    assert per_token - block_size < num_kv_blocks(llama, h100, block_size, high) * block_size
    assert num_kv_blocks(llama, h100, block_size, high) * block_size <= per_token
