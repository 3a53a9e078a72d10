"""The longest context each model preset was released with, to check ``max_model_len``.

vLLM refuses a ``max_model_len`` beyond the model's ``max_position_embeddings``
(positions past it were never trained). servesim's presets name layer shapes,
and one shape can have several releases (Llama-3-8B: 8192 tokens;
Llama-3.1-8B, the same shapes: 131072), so the limit is the longest release
with those shapes, from the published ``config.json`` files. An inline
model with another name has no known limit and is not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from sim.hardware.model_configs import HF_CONFIGS, MODEL_SPEC_ALIASES

_LONGER_RELEASES = {
    # Qwen3-30B-A3B-Instruct-2507 has the base model's shapes and 262144 positions.
    "qwen3-30b-a3b": 262144,
    # HuggingFaceTB/SmolLM2-135M config.json.
    "smollm2-135m": 8192,
    # Qwen/Qwen2.5-7B-Instruct config.json (32768 native; 131072 with YaRN scaling).
    "qwen2.5-7b": 131072,
}


def _known() -> dict[str, int]:
    known = {name: int(c["max_position_embeddings"]) for name, c in HF_CONFIGS.items()}
    known |= {alias: known[target] for alias, target in MODEL_SPEC_ALIASES.items()}
    return known | _LONGER_RELEASES


MAX_CONTEXT_TOKENS: Mapping[str, int] = MappingProxyType(_known())


def context_problem(model_name: str, max_model_len_tokens: int) -> str | None:
    """Why ``max_model_len_tokens`` is too long for ``model_name``, or ``None``."""
    limit = MAX_CONTEXT_TOKENS.get(model_name)
    if limit is None or max_model_len_tokens <= limit:
        return None
    return (
        f"engine.max_model_len_tokens {max_model_len_tokens} exceeds {model_name}'s context "
        f"length of {limit} tokens (its longest release); a real engine refuses it"
    )
