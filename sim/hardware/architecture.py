"""A model's architecture as the kernel cost model needs it, read from a Hugging Face config.

``ModelArchitecture`` lists the shapes of every GEMM and attention call of a
decoder layer: layers, hidden size, attention and KV heads, head size, MLP
width, vocabulary, tied embeddings, and for mixture-of-experts models the
expert count, experts per token (top-k) and expert / shared-expert widths.
It is separate from ``ModelSpec`` (which stays a dense Llama-style shape used
for memory and roofline sizing); ``to_model_spec`` converts for KV sizing.

``load_architecture`` accepts a preset name (``sim.hardware.model_configs``,
written in the repo, no download) or a path to a ``config.json``. A missing
field raises ``ConfigError`` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from sim.errors import ConfigError
from sim.hardware.model_configs import HF_CONFIGS, MODEL_SPEC_ALIASES
from sim.hardware.model_spec import ModelSpec

_FROZEN = ConfigDict(extra="forbid", frozen=True)
PositiveInt = Annotated[int, Field(gt=0)]


class MoeSpec(BaseModel):
    """Mixture-of-experts MLP: ``top_k`` of ``num_experts`` experts per token."""

    model_config = _FROZEN

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_intermediate_size: PositiveInt
    # Always-on shared expert (Qwen2-MoE style); None when the model has none.
    shared_expert_intermediate_size: PositiveInt | None = None


class ModelArchitecture(BaseModel):
    """Decoder-only transformer shapes (from ``config.json``)."""

    model_config = _FROZEN

    name: str = Field(min_length=1)
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    intermediate_size: PositiveInt  # dense MLP width (unused by MoE layers)
    vocab_size: PositiveInt
    max_position_embeddings: PositiveInt
    tied_embeddings: bool = False
    attention_qkv_bias: bool = False
    moe: MoeSpec | None = None

    @property
    def q_width(self) -> int:
        """Output width of the query projection (heads x head_dim)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Output width of the key (or value) projection."""
        return self.num_kv_heads * self.head_dim

    def to_model_spec(
        self, weight_dtype_bytes: float = 2.0, kv_dtype_bytes: float = 2.0
    ) -> ModelSpec:
        """The dense ``ModelSpec`` with the same KV bytes and weight bytes.

        An MoE model becomes a dense MLP of width ``experts x expert width +
        shared width``, which has the same parameter count (memory sizing is
        right; roofline FLOPs would count every expert, so do not use it there).
        """
        width = self.intermediate_size
        if self.moe is not None:
            width = self.moe.num_experts * self.moe.expert_intermediate_size + (
                self.moe.shared_expert_intermediate_size or 0
            )
        return ModelSpec(
            name=self.name,
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            intermediate_size=width,
            vocab_size=self.vocab_size,
            weight_dtype_bytes=weight_dtype_bytes,
            kv_dtype_bytes=kv_dtype_bytes,
            tied_embeddings=self.tied_embeddings,
            attention_qkv_bias=self.attention_qkv_bias,
        )


def from_model_spec(spec: ModelSpec, max_position_embeddings: int = 131072) -> ModelArchitecture:
    """The dense architecture of a ``ModelSpec`` (which has no MoE or context length)."""
    return ModelArchitecture(
        name=spec.name,
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_attention_heads,
        num_kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size,
        vocab_size=spec.vocab_size,
        max_position_embeddings=max_position_embeddings,
        tied_embeddings=spec.tied_embeddings,
        attention_qkv_bias=spec.attention_qkv_bias,
    )


def _field(config: dict[str, Any], where: str, *names: str) -> int:
    """The first of ``names`` present in ``config`` as a positive int."""
    for name in names:
        value = config.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{where}: field {name!r} must be a positive integer")
            return value
    raise ConfigError(f"{where}: missing field {names[0]!r}")


def from_hf_config(
    config: dict[str, Any], name: str, where: str = "config.json"
) -> ModelArchitecture:
    """Architecture from a Hugging Face ``config.json`` mapping.

    Multimodal configs keep the language model under ``text_config``. Fields
    Hugging Face defaults (``num_key_value_heads`` = heads, ``head_dim`` =
    hidden / heads) default the same way.
    """
    if isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    hidden = _field(config, where, "hidden_size")
    heads = _field(config, where, "num_attention_heads")
    num_experts = config.get("num_local_experts") or config.get("num_experts")
    moe = None
    if num_experts:
        moe = MoeSpec(
            num_experts=_field(config, where, "num_local_experts", "num_experts"),
            top_k=_field(config, where, "num_experts_per_tok"),
            expert_intermediate_size=_field(
                config, where, "moe_intermediate_size", "intermediate_size"
            ),
            shared_expert_intermediate_size=config.get("shared_expert_intermediate_size") or None,
        )
    if "head_dim" not in config and hidden % heads:
        raise ConfigError(f"{where}: missing field 'head_dim' (hidden_size % heads != 0)")
    return ModelArchitecture(
        name=name,
        num_layers=_field(config, where, "num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=_field(config, where, "num_key_value_heads", "num_attention_heads"),
        head_dim=_field(config, where, "head_dim") if "head_dim" in config else hidden // heads,
        intermediate_size=_field(config, where, "intermediate_size"),
        vocab_size=_field(config, where, "vocab_size"),
        max_position_embeddings=_field(config, where, "max_position_embeddings"),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_qkv_bias=bool(config.get("attention_bias", False)),
        moe=moe,
    )


def load_architecture(name_or_path: str | Path) -> ModelArchitecture:
    """A preset (``llama-3.1-8b``) or a ``config.json`` path; ConfigError otherwise."""
    key = MODEL_SPEC_ALIASES.get(str(name_or_path), str(name_or_path))
    if key in HF_CONFIGS:
        return from_hf_config(dict(HF_CONFIGS[key]), key, f"preset {key}")
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        known = ", ".join(sorted(HF_CONFIGS))
        raise ConfigError(f"architecture {key!r}: no such preset or file; presets: {known}")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read config.json: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    stem = path.parent.name if path.name == "config.json" else path.stem
    return from_hf_config(config, stem.lower(), str(path))
