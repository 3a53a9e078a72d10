"""Model architecture from Hugging Face config.json: presets, files, MoE fields, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from sim.errors import ConfigError
from sim.hardware.specs import (
    HF_CONFIGS,
    MODEL_PRESETS,
    MODEL_SPEC_ALIASES,
    ModelSpec,
    from_hf_config,
    load_architecture,
)

# Published parameter counts (billions), as each model card states them.
PUBLISHED_PARAMS_B = {
    "llama-3.1-8b": 8.0,
    "llama-3.1-70b": 70.6,
    "qwen3-8b": 8.2,
    "qwen3-32b": 32.8,
    "qwen3-30b-a3b": 30.5,
    "mixtral-8x7b": 46.7,
}


def test_required_presets_exist() -> None:
    assert set(PUBLISHED_PARAMS_B) <= set(HF_CONFIGS)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS_B))
def test_presets_match_published_parameter_counts(name: str) -> None:
    arch = load_architecture(name)
    assert arch.name == name
    params_b = arch.num_params / 1e9
    # Qwen3's per-head q/k norms (a few thousand weights a layer) are not modelled.
    assert params_b == pytest.approx(PUBLISHED_PARAMS_B[name], rel=0.02)


def test_llama_preset_fields() -> None:
    arch = load_architecture("llama-3.1-8b")
    assert (arch.num_layers, arch.hidden_size, arch.num_attention_heads, arch.num_kv_heads) == (
        32,
        4096,
        32,
        8,
    )
    assert (arch.head_dim, arch.intermediate_size, arch.vocab_size) == (128, 14336, 128256)
    assert arch.max_context_tokens == 131072 and not arch.tied_embeddings
    assert arch.moe is None and arch.q_width == 4096 and arch.kv_width == 1024


def test_moe_presets_read_expert_fields() -> None:
    qwen = load_architecture("qwen3-30b-a3b")
    assert qwen.moe is not None
    assert (qwen.moe.num_experts, qwen.moe.top_k, qwen.moe.expert_intermediate_size) == (
        128,
        8,
        768,
    )
    assert qwen.moe.shared_expert_intermediate_size is None
    assert qwen.head_dim == 128 != qwen.hidden_size // qwen.num_attention_heads
    mixtral = load_architecture("mixtral-8x7b")
    assert mixtral.moe is not None
    # Mixtral's experts are intermediate_size wide (no moe_intermediate_size field).
    assert (mixtral.moe.num_experts, mixtral.moe.top_k) == (8, 2)
    assert mixtral.moe.expert_intermediate_size == 14336


def test_moe_config_keeps_weights_and_kv_bytes() -> None:
    # The dense MLP of the experts' parameter count: experts x expert width (+ shared).
    spec = load_architecture("qwen3-30b-a3b")
    assert spec.intermediate_size == 128 * 768
    assert spec.kv_bytes_per_token == 2 * 48 * 4 * 128 * 2
    shared = from_hf_config(
        {**HF_CONFIGS["qwen3-30b-a3b"], "shared_expert_intermediate_size": 512}, "shared"
    )
    assert shared.intermediate_size == 128 * 768 + 512


def test_a_config_preset_is_the_model_its_config_describes() -> None:
    # One class: the kernel cost model and memory sizing read the same ModelSpec; as a
    # preset its context limit is the presets' table's (None here).
    for name in HF_CONFIGS:
        spec = load_architecture(name)
        assert MODEL_PRESETS[name] == spec.model_copy(update={"max_context_tokens": None})


def test_model_spec_aliases_point_at_presets_of_the_same_shape() -> None:
    for spec_name, arch_name in MODEL_SPEC_ALIASES.items():
        spec = MODEL_PRESETS[spec_name]
        dense = load_architecture(arch_name).model_copy(
            update={
                "name": spec.name,
                "weight_dtype_bytes": spec.weight_dtype_bytes,
                "max_context_tokens": None,
            }
        )
        assert dense == spec
        assert load_architecture(spec_name).name == arch_name


def write_config(tmp_path: Path, config: dict, name: str = "config.json") -> Path:
    folder = tmp_path / "My-Model"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def llama_config() -> dict:
    return dict(HF_CONFIGS["llama-3.1-8b"])


def test_load_from_a_config_json_file_or_its_folder(tmp_path: Path) -> None:
    path = write_config(tmp_path, llama_config())
    by_file, by_folder = load_architecture(path), load_architecture(path.parent)
    assert by_file == by_folder
    assert by_file.name == "my-model"
    assert by_file.model_copy(update={"name": "llama-3.1-8b"}) == load_architecture("llama-3.1-8b")
    other = write_config(tmp_path, llama_config(), "Other_config.json")
    assert load_architecture(other).name == "other_config"


@pytest.mark.parametrize(
    "field",
    ["hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size",
     "intermediate_size", "max_position_embeddings"],
)  # fmt: skip
def test_missing_field_names_the_file_and_field(tmp_path: Path, field: str) -> None:
    config = llama_config()
    del config[field]
    path = write_config(tmp_path, config)
    with pytest.raises(ConfigError, match=rf"{path}: missing field '{field}'") as err:
        load_architecture(path)
    assert "\n" not in str(err.value)


def test_hugging_face_defaults_apply() -> None:
    config = llama_config()
    del config["num_key_value_heads"]
    arch = from_hf_config(config, "x")
    assert arch.num_kv_heads == arch.num_attention_heads and arch.head_dim == 128
    config["tie_word_embeddings"] = True
    config["attention_bias"] = True
    arch = from_hf_config(config, "x")
    assert arch.tied_embeddings and arch.attention_qkv_bias


def test_multimodal_configs_use_the_text_config() -> None:
    nested = {"architectures": ["X"], "text_config": llama_config()}
    assert from_hf_config(nested, "vl") == from_hf_config(llama_config(), "vl")


@pytest.mark.parametrize("bad", [0, -3, 1.5, "32", True])
def test_non_positive_integer_fields_are_errors(bad: object) -> None:
    config = {**llama_config(), "num_hidden_layers": bad}
    with pytest.raises(ConfigError, match="'num_hidden_layers' must be a positive integer"):
        from_hf_config(config, "x", "cfg.json")


def test_head_dim_is_needed_when_heads_do_not_divide_hidden() -> None:
    config = {**llama_config(), "num_attention_heads": 30}
    with pytest.raises(ConfigError, match="missing field 'head_dim'"):
        from_hf_config(config, "x")
    assert (
        from_hf_config({**config, "head_dim": 128, "num_key_value_heads": 6}, "x").head_dim == 128
    )


def test_moe_config_needs_top_k(tmp_path: Path) -> None:
    config = {**llama_config(), "num_local_experts": 8}
    with pytest.raises(ConfigError, match="missing field 'num_experts_per_tok'"):
        from_hf_config(config, "x")


def test_unknown_preset_or_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such preset or file; presets: .*llama-3\.1-8b"):
        load_architecture("gpt-9")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"cannot read config\.json"):
        load_architecture(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_architecture(bad)


def test_architecture_is_frozen_and_strict() -> None:
    arch = load_architecture("qwen3-8b")
    with pytest.raises(ValidationError):
        arch.num_layers = 3
    with pytest.raises(ValidationError):
        ModelSpec(**{**arch.model_dump(), "extra": 1})
    with pytest.raises(ValidationError):
        ModelSpec(**{**arch.model_dump(), "num_layers": 0})
