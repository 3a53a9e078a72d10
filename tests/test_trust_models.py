"""A ``config.json`` is read only for the architectures servesim models, each by its
``model_type``; any other (DeepSeek-V3's latent attention, a BERT encoder, a config
naming none) is refused in one line naming its ``model_type`` and the supported list,
never priced as a dense Llama."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.errors import ConfigError
from sim.hardware.specs import (
    HF_CONFIGS,
    SUPPORTED_MODEL_TYPES,
    from_hf_config,
    load_architecture,
    resolve_model,
)
from tests.cli_errors import run_error

MISTRAL = Path(__file__).resolve().parent / "data" / "hf_configs" / "mistral-7b-v0.1.json"

# deepseek-ai/DeepSeek-V3 config.json (the fields that shape it): multi-head latent
# attention (KV is a 512-wide latent plus a 64-wide rotary key per token, not K and V
# per head) and 1 shared + 256 routed experts after 3 dense layers.
DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
}

# google-bert/bert-base-uncased config.json: an encoder, no generation at all.
BERT: dict[str, Any] = {
    "architectures": ["BertForMaskedLM"],
    "model_type": "bert",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "vocab_size": 30522,
    "max_position_embeddings": 512,
}


def scenario_with_model(tmp_path: Path, config: dict[str, Any]) -> Path:
    """A small scenario whose ``model:`` is ``config`` written as a config.json."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    doc = {
        "model": "model/config.json",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "engine": {"max_model_len_tokens": 512},
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 10},
            "prompt_tokens": {"kind": "fixed", "tokens": 32},
            "output_tokens": {"kind": "fixed", "tokens": 8},
        },
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_deepseek_v3_is_refused_naming_mla_and_the_supported_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = run_error(capsys, tmp_path, str(scenario_with_model(tmp_path, DEEPSEEK_V3)))
    assert "model_type 'deepseek_v3'" in message and "kv_lora_rank" in message
    assert "not modelled" in message and "config.json" in message
    supported = message.split("supported: ")[1]
    assert set(supported.split(", ")) == SUPPORTED_MODEL_TYPES


def test_a_bert_encoder_is_refused_not_run_as_a_generator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = run_error(capsys, tmp_path, str(scenario_with_model(tmp_path, BERT)))
    assert "model_type 'bert' is not modelled; supported: " in message
    assert "llama" in message and "kv_lora_rank" not in message


def test_a_config_without_model_type_is_refused(tmp_path: Path) -> None:
    config = {k: v for k, v in json.loads(MISTRAL.read_text()).items() if k != "model_type"}
    with pytest.raises(ConfigError, match=r"cfg\.json: missing field 'model_type'; supported: "):
        from_hf_config(config, "x", "cfg.json")


def test_the_refusal_reaches_resolve_model_with_the_files_path(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BERT))
    with pytest.raises(ConfigError, match=rf"^{path}: model_type 'bert' is not modelled") as err:
        resolve_model(str(path))
    assert "\n" not in str(err.value)


def test_a_moe_config_with_dense_layers_among_its_experts_is_refused() -> None:
    # Qwen2/3-MoE's mlp_only_layers keep those layers dense: pricing them as MoE
    # would be wrong, so the config is refused rather than read.
    config = {**HF_CONFIGS["qwen3-30b-a3b"], "mlp_only_layers": [0, 1]}
    with pytest.raises(ConfigError, match=r"mlp_only_layers"):
        from_hf_config(config, "q", "cfg.json")
    sparse = {**HF_CONFIGS["qwen3-30b-a3b"], "decoder_sparse_step": 2}
    with pytest.raises(ConfigError, match=r"decoder_sparse_step"):
        from_hf_config(sparse, "q", "cfg.json")
    # The published configs say every layer is MoE (1 and []), and read.
    every = {**HF_CONFIGS["qwen3-30b-a3b"], "decoder_sparse_step": 1, "mlp_only_layers": []}
    assert from_hf_config(every, "q").moe == load_architecture("qwen3-30b-a3b").moe


# --- what is modelled still reads --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_every_preset_names_a_supported_model_type(name: str) -> None:
    assert HF_CONFIGS[name]["model_type"] in SUPPORTED_MODEL_TYPES
    assert load_architecture(name).name == name


@pytest.mark.parametrize("model_type", sorted(SUPPORTED_MODEL_TYPES - {"gpt2", "opt"}))
def test_llama_style_types_read_mistrals_shapes(model_type: str) -> None:
    # Mistral-7B's fields under another Llama-style name are the same decoder
    # (the Gemma types differ in their windows and tied head: test_hf_models).
    mistral = json.loads(MISTRAL.read_text())
    as_other = from_hf_config({**mistral, "model_type": model_type}, "m")
    reference = from_hf_config(mistral, "m")
    shapes = ("num_layers", "hidden_size", "num_kv_heads", "head_dim", "intermediate_size")
    for field in shapes:
        assert getattr(as_other, field) == getattr(reference, field)
    # 32 layers x 8 KV heads x 128 x K and V x 2 bytes = 128 KiB per token.
    assert as_other.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
