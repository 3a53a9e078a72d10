"""Hugging Face ``config.json`` fields of the architecture presets (no download at run time).

Values copied from each model's published ``config.json`` (Hugging Face hub,
as also shipped in aiconfigurator-core 0.12.0 ``model_configs/``); only the
fields ``sim.hardware.architecture`` reads. Keys are preset names; the aliases at
the end map servesim's ``ModelSpec`` preset names with the same shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

_LLAMA_31 = {"rope_theta": 500000.0, "max_position_embeddings": 131072, "vocab_size": 128256}
_QWEN3 = {"max_position_embeddings": 40960, "vocab_size": 151936, "head_dim": 128}

_CONFIGS: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-3.1-8B
    "llama-3.1-8b": {
        **_LLAMA_31,
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "tie_word_embeddings": False,
    },
    # meta-llama/Llama-3.1-70B
    "llama-3.1-70b": {
        **_LLAMA_31,
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "tie_word_embeddings": False,
    },
    # Qwen/Qwen3-8B
    "qwen3-8b": {
        **_QWEN3,
        "num_hidden_layers": 36,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 12288,
        "tie_word_embeddings": False,
    },
    # Qwen/Qwen3-32B
    "qwen3-32b": {
        **_QWEN3,
        "num_hidden_layers": 64,
        "hidden_size": 5120,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 25600,
        "tie_word_embeddings": False,
    },
    # Qwen/Qwen3-30B-A3B: every layer is MoE (decoder_sparse_step 1, no mlp_only_layers).
    "qwen3-30b-a3b": {
        **_QWEN3,
        "num_hidden_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "tie_word_embeddings": False,
    },
    # mistralai/Mixtral-8x7B-v0.1: experts are intermediate_size wide.
    "mixtral-8x7b": {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    },
}

# servesim ModelSpec presets with the same layer shapes as an architecture preset.
MODEL_SPEC_ALIASES: Mapping[str, str] = MappingProxyType(
    {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b"}
)

HF_CONFIGS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(config) for name, config in _CONFIGS.items()}
)
