"""Weight and KV-cache quantization: the ``quantization:`` scenario section.

Quantization here changes *bytes*, never FLOP/s: it rewrites the scenario's
model spec (``weight_dtype_bytes``, ``kv_dtype_bytes``), so the roofline reads
fewer weight and KV bytes per step and ``num_kv_blocks`` fits more blocks.

Bytes per element (all weights, embeddings and LM head included) are
``DTYPE_BYTES``; fp8 and int8's per-tensor or per-channel scales are
negligible, int4's one fp16 scale per 128 weights is not (GPTQ/AWQ style).

Simplified: matmuls still run at the hardware's bf16 peak (weight-only
quantization dequantizes into bf16 kernels; fp8 tensor cores would double
the compute roof, which is not modelled), and activations stay >= 2 bytes
(see ``sim.hardware.kv_capacity``), so only memory-bound work gets faster.

    quantization:
      weights: fp8        # bf16 | fp16 | fp8 | int8 | int4; absent: the model's own
      kv_cache: fp8       # bf16 | fp16 | fp8 | int8; absent: the model's own
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from sim.config import Frozen
from sim.hardware.specs import ModelSpec

WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
KvCacheDtype = Literal["bf16", "fp16", "fp8", "int8"]

# int4 groups: one fp16 scale (2 bytes) per this many weights: 0.515625 B a weight.
INT4_GROUP_SIZE = 128
INT4_SCALE_BYTES = 2.0

DTYPE_BYTES: Mapping[str, float] = MappingProxyType(
    {
        "bf16": 2.0,
        "fp16": 2.0,
        "fp8": 1.0,
        "int8": 1.0,
        "int4": 0.5 + INT4_SCALE_BYTES / INT4_GROUP_SIZE,
    }
)

_NATIVE_NAMES: Mapping[float, str] = MappingProxyType({4.0: "fp32", 2.0: "bf16", 1.0: "8-bit"})


class QuantizationConfig(Frozen):
    """Storage dtypes of weights and KV cache; ``None`` keeps the model spec's."""

    weights: WeightDtype | None = None
    kv_cache: KvCacheDtype | None = None

    @property
    def is_identity(self) -> bool:
        """True when the section changes nothing."""
        return self.weights is None and self.kv_cache is None


def quantize(model: ModelSpec, config: QuantizationConfig | None) -> ModelSpec:
    """``model`` with the dtypes ``config`` names (the same object when none)."""
    if config is None or config.is_identity:
        return model
    update: dict[str, float] = {}
    if config.weights is not None:
        update["weight_dtype_bytes"] = DTYPE_BYTES[config.weights]
    if config.kv_cache is not None:
        update["kv_dtype_bytes"] = DTYPE_BYTES[config.kv_cache]
    return model.model_copy(update=update)


def dtype_name(dtype_bytes: float, configured: str | None = None) -> str:
    """A readable dtype for reports: the configured name, else a guess from the size."""
    if configured is not None:
        return configured
    return _NATIVE_NAMES.get(dtype_bytes, f"{dtype_bytes:g} bytes")
