"""Model and hardware specs: derived quantities, presets, and the config form."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from sim.errors import ConfigError
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    MODEL_PRESETS,
    TINY_MODEL,
    HardwareRef,
    HardwareSpec,
    ModelRef,
    ModelSpec,
    hardware_preset,
    model_preset,
)


def small_spec(**overrides: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "name": "toy",
        "num_layers": 2,
        "hidden_size": 8,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": 16,
        "vocab_size": 10,
    }
    fields.update(overrides)
    return ModelSpec(**fields)


# Published parameter counts (model cards / config totals).
@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("llama-3-8b", 8.03e9),
        ("llama-3-70b", 70.6e9),
        ("qwen2.5-7b", 7.6e9),
        ("smollm2-135m", 134.5e6),
    ],
)
def test_preset_param_counts_match_published(name: str, published: float) -> None:
    assert model_preset(name).num_params == pytest.approx(published, rel=0.02)


def test_tiny_model_is_a_small_fp32_cpu_model() -> None:
    assert model_preset("tiny") is TINY_MODEL
    assert 10e6 <= TINY_MODEL.num_params <= 20e6
    assert TINY_MODEL.weight_dtype_bytes == 4.0
    assert TINY_MODEL.kv_dtype_bytes == 4.0


def test_llama_3_8b_kv_bytes_per_token() -> None:
    # 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes.
    assert model_preset("llama-3-8b").kv_bytes_per_token == 131072


def test_small_spec_counts_by_hand() -> None:
    spec = small_spec()
    assert spec.head_dim == 2
    # q: 8x8, k and v: 8x4 each, o: 8x8 -> 192; MLP 3x8x16 = 384; 2 norms of 8.
    assert spec.num_params_per_layer == 192 + 384 + 16
    # 2 layers + final norm 8; embedding 10x8 and untied head 10x8.
    assert spec.num_non_embedding_params == 2 * 592 + 8
    assert spec.num_embedding_params == 160
    assert spec.num_params == 1192 + 160
    assert spec.weight_bytes == 1352 * 2.0
    assert spec.kv_bytes_per_token == 2 * 2 * 2 * 2 * 2.0
    assert spec.dense_flops_per_token == 2 * 1192 + 2 * 8 * 10
    # The layers' part and the LM head's (hidden 8 x vocab 10), which the roofline
    # prices at different counts (every token; one position a sequence).
    assert spec.layer_flops_per_token == 2 * 1192
    assert spec.lm_head_flops_per_token == 2 * 8 * 10
    assert spec.attention_flops_per_pair == 4 * 2 * 4 * 2


def test_tied_embeddings_count_the_table_once_but_still_pay_the_head_flops() -> None:
    untied, tied = small_spec(), small_spec(tied_embeddings=True)
    assert untied.num_params - tied.num_params == 10 * 8
    assert tied.dense_flops_per_token == untied.dense_flops_per_token


def test_qkv_bias_adds_one_bias_per_output_of_q_k_v() -> None:
    plain, biased = small_spec(), small_spec(attention_qkv_bias=True)
    assert biased.num_params - plain.num_params == 2 * (4 * 2 + 2 * 2 * 2)


def test_dense_flops_are_about_twice_params_for_large_models() -> None:
    for spec in MODEL_PRESETS.values():
        ratio = spec.dense_flops_per_token / spec.num_params
        assert 1.8 <= ratio <= 2.0


def test_explicit_head_dim_overrides_the_default() -> None:
    spec = small_spec(head_dim=16)
    assert spec.head_dim == 16
    assert spec.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2.0


def test_head_dim_none_means_default() -> None:
    assert small_spec(head_dim=None) == small_spec()


def test_head_dim_default_needs_divisible_hidden_size() -> None:
    with pytest.raises(ValidationError, match="multiple of num_attention_heads"):
        small_spec(hidden_size=9)
    assert small_spec(hidden_size=9, head_dim=2).head_dim == 2


def test_attention_heads_must_be_a_multiple_of_kv_heads() -> None:
    with pytest.raises(ValidationError, match="num_kv_heads"):
        small_spec(num_kv_heads=3)


@pytest.mark.parametrize(
    "bad", [{"num_layers": 0}, {"vocab_size": -1}, {"kv_dtype_bytes": 0}, {"name": ""}]
)
def test_model_spec_rejects_non_positive_fields(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        small_spec(**bad)


def test_specs_are_frozen_and_strict() -> None:
    with pytest.raises(ValidationError):
        TINY_MODEL.num_layers = 3
    with pytest.raises(ValidationError, match="extra"):
        small_spec(rope_theta=1e4)


@given(
    num_layers=st.integers(1, 100),
    num_kv_heads=st.integers(1, 16),
    group=st.integers(1, 8),
    head_dim=st.integers(1, 256),
    hidden_size=st.integers(1, 16384),
)
def test_params_and_kv_grow_linearly_with_layers(
    num_layers: int, num_kv_heads: int, group: int, head_dim: int, hidden_size: int
) -> None:
    one = small_spec(
        num_layers=1,
        num_kv_heads=num_kv_heads,
        num_attention_heads=group * num_kv_heads,
        head_dim=head_dim,
        hidden_size=hidden_size,
    )
    many = one.model_copy(update={"num_layers": num_layers})
    assert many.num_params - one.num_params == (num_layers - 1) * one.num_params_per_layer
    assert many.kv_bytes_per_token == num_layers * one.kv_bytes_per_token


def test_unknown_presets_raise_config_error_listing_known_names() -> None:
    with pytest.raises(ConfigError, match="unknown model preset 'llama-4'") as err:
        model_preset("llama-4")
    for name in MODEL_PRESETS:
        assert name in str(err.value)
    with pytest.raises(ConfigError, match="unknown hardware preset 'b900'") as err:
        hardware_preset("b900")
    for name in HARDWARE_PRESETS:
        assert name in str(err.value)
    assert "\n" not in str(err.value)


def test_required_presets_exist() -> None:
    assert set(MODEL_PRESETS) >= {
        "llama-3-8b",
        "llama-3-70b",
        "qwen2.5-7b",
        "smollm2-135m",
        "tiny",
        # issue 11: from Hugging Face configs written in the repo
        "qwen3-8b",
        "qwen3-32b",
        "qwen3-30b-a3b",
        "mixtral-8x7b",
    }
    assert set(HARDWARE_PRESETS) >= {
        "h100",
        "h200",
        "a100-80gb",
        "l4",
        "cpu-2core",
        # issue 11
        "rtx-4090",
        "rtx-pro-6000",
        "l40s",
        "a10g",
        "a100-40gb",
        "h100-sxm",
        "h100-pcie",
        "b200",
    }
    for name, spec in HARDWARE_PRESETS.items():
        assert spec.name == name
    with pytest.raises(TypeError):
        MODEL_PRESETS["x"] = TINY_MODEL  # type: ignore[index]


def test_hardware_presets_rank_as_datasheets_say() -> None:
    h100, h200, a100, l4 = (hardware_preset(n) for n in ("h100", "h200", "a100-80gb", "l4"))
    assert h200.memory_bandwidth_bytes_per_s > h100.memory_bandwidth_bytes_per_s
    assert h200.memory_bytes > h100.memory_bytes == a100.memory_bytes > l4.memory_bytes
    assert h100.peak_flops_per_s > a100.peak_flops_per_s > l4.peak_flops_per_s
    cpu = hardware_preset("cpu-2core")
    assert cpu.peak_flops_per_s < l4.peak_flops_per_s / 100


@pytest.mark.parametrize(
    "bad",
    [
        {"compute_efficiency": 0.0},
        {"memory_efficiency": 1.5},
        {"step_overhead_s": 2e-3},  # the engine's CPU work: engine.cpu, not the GPU's
        {"memory_bytes": 0},
    ],
)
def test_hardware_spec_rejects_bad_fields(bad: dict[str, Any]) -> None:
    fields: dict[str, Any] = {
        "name": "x",
        "peak_flops_per_s": 1e12,
        "memory_bandwidth_bytes_per_s": 1e11,
        "memory_bytes": 1e10,
    }
    with pytest.raises(ValidationError):
        HardwareSpec(**{**fields, **bad})


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelRef
    hardware: HardwareRef


def test_refs_accept_preset_names() -> None:
    scenario = Scenario.model_validate({"model": "llama-3-8b", "hardware": "h100"})
    assert scenario.model is model_preset("llama-3-8b")
    assert scenario.hardware is hardware_preset("h100")


def test_refs_accept_inline_specs() -> None:
    inline = small_spec().model_dump()
    del inline["head_dim"]
    scenario = Scenario.model_validate(
        {
            "model": inline,
            "hardware": {
                "name": "mine",
                "peak_flops_per_s": 1e12,
                "memory_bandwidth_bytes_per_s": 1e11,
                "memory_bytes": 1e10,
            },
        }
    )
    assert scenario.model == small_spec()
    assert scenario.hardware.memory_efficiency == 0.8


def test_refs_accept_a_preset_with_overrides() -> None:
    scenario = Scenario.model_validate(
        {
            "model": {"preset": "llama-3-8b", "kv_dtype_bytes": 1},
            "hardware": {"preset": "h100", "memory_efficiency": 0.5},
        }
    )
    assert scenario.model.kv_bytes_per_token == 131072 / 2
    assert scenario.model.num_layers == 32
    assert scenario.hardware.memory_efficiency == 0.5
    assert scenario.hardware.peak_flops_per_s == hardware_preset("h100").peak_flops_per_s


def test_refs_reject_unknown_names_with_the_known_ones() -> None:
    with pytest.raises(ValidationError, match=r"known: .*llama-3-8b") as err:
        Scenario.model_validate({"model": "gpt-5", "hardware": "h100"})
    assert "model" in str(err.value)
    with pytest.raises(ValidationError, match=r"known: .*h200"):
        Scenario.model_validate({"model": "tiny", "hardware": {"preset": "tpu"}})


def test_refs_validate_overrides() -> None:
    with pytest.raises(ValidationError):
        Scenario.model_validate({"model": {"preset": "tiny", "num_layers": 0}, "hardware": "l4"})
    with pytest.raises(ValidationError, match="extra"):
        Scenario.model_validate({"model": {"preset": "tiny", "layers": 2}, "hardware": "l4"})
