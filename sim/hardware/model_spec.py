"""The shape of a Llama-style decoder, and the presets written in the repo.

A ``ModelSpec`` is what memory sizing and the roofline need: layers, widths,
heads, vocabulary and dtypes; parameter count, weight bytes, KV bytes per
token and FLOPs per token are derived from it. Mixture-of-experts models and
Hugging Face configs are described by ``sim.hardware.architecture`` and become a
``ModelSpec`` (same weight and KV bytes) for sizing.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

_FROZEN = ConfigDict(extra="forbid", frozen=True)

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class ModelSpec(BaseModel):
    """Shape of a Llama-style decoder-only transformer.

    ``head_dim`` defaults to ``hidden_size // num_attention_heads``. Dtype
    sizes are floats so that 4-bit weights (0.5 bytes) can be described.
    """

    model_config = _FROZEN

    name: str = Field(min_length=1)
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    # Filled in by _default_head_dim when absent; validate_default rejects a
    # None that survives (only possible when hidden_size is itself invalid).
    head_dim: PositiveInt = Field(default=None, validate_default=True)
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    weight_dtype_bytes: PositiveFloat = 2.0
    kv_dtype_bytes: PositiveFloat = 2.0
    tied_embeddings: bool = False
    # Qwen2 has biases on the q, k and v projections; Llama has none.
    attention_qkv_bias: bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_head_dim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("head_dim") is None:
            hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
            if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
                if hidden % heads:
                    raise ValueError(
                        f"head_dim not given and hidden_size {hidden} is not a "
                        f"multiple of num_attention_heads {heads}"
                    )
                data = {**data, "head_dim": hidden // heads}
        return data

    @model_validator(mode="after")
    def _check_gqa(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple "
                f"of num_kv_heads {self.num_kv_heads}"
            )
        return self

    @property
    def num_params_per_layer(self) -> int:
        """Attention (q, k, v, o and optional qkv bias) + gated MLP + 2 RMSNorms."""
        q_width = self.num_attention_heads * self.head_dim
        kv_width = self.num_kv_heads * self.head_dim
        attention = 2 * self.hidden_size * q_width + 2 * self.hidden_size * kv_width
        if self.attention_qkv_bias:
            attention += q_width + 2 * kv_width
        mlp = 3 * self.hidden_size * self.intermediate_size  # gate, up, down
        return attention + mlp + 2 * self.hidden_size

    @property
    def num_embedding_params(self) -> int:
        """Input embedding table plus, unless tied, the LM head."""
        table = self.vocab_size * self.hidden_size
        return table if self.tied_embeddings else 2 * table

    @property
    def num_non_embedding_params(self) -> int:
        """Transformer layers plus the final norm."""
        return self.num_layers * self.num_params_per_layer + self.hidden_size

    @property
    def num_params(self) -> int:
        """Total parameters, counting a tied embedding once."""
        return self.num_non_embedding_params + self.num_embedding_params

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights, all read once per forward pass."""
        return self.num_params * self.weight_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache bytes per token: K and V, every layer, every KV head."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def dense_flops_per_token(self) -> float:
        """Matmul FLOPs per token outside attention scores (2 per multiply-add).

        Layers contribute 2 x non-embedding params; the embedding lookup is
        free; the LM head is a hidden x vocab matmul whether tied or not.
        """
        return 2.0 * self.num_non_embedding_params + 2.0 * self.hidden_size * self.vocab_size

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per query-key pair: QK^T and PV, 2 FLOPs each per head dim, per layer."""
        return 4.0 * self.num_layers * self.num_attention_heads * self.head_dim


# Shape of the CPU calibration model (~12.9M params, fp32). calibration/ builds
# the real PyTorch model from exactly this spec, so change it only here.
TINY_MODEL = ModelSpec(
    name="tiny",
    num_layers=6,
    hidden_size=256,
    num_attention_heads=8,
    num_kv_heads=4,
    intermediate_size=768,
    vocab_size=32000,
    weight_dtype_bytes=4.0,
    kv_dtype_bytes=4.0,
    tied_embeddings=True,
)

_MODELS = [
    # Shapes from each model's published config.json.
    ModelSpec(
        name="llama-3-8b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
        vocab_size=128256,
    ),
    ModelSpec(
        name="llama-3-70b",
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
        vocab_size=128256,
    ),
    ModelSpec(
        name="qwen2.5-7b",
        num_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_kv_heads=4,
        intermediate_size=18944,
        vocab_size=152064,
        attention_qkv_bias=True,
    ),
    ModelSpec(
        name="smollm2-135m",
        num_layers=30,
        hidden_size=576,
        num_attention_heads=9,
        num_kv_heads=3,
        intermediate_size=1536,
        vocab_size=49152,
        tied_embeddings=True,
    ),
    TINY_MODEL,
]
