"""Multi-GPU layout of one replica: the ``parallelism:`` scenario section.

    parallelism:
      tensor_parallel_size: 4     # 1, 2, 4 or 8 GPUs splitting every layer
      pipeline_parallel_size: 1   # stages of consecutive layers, one GPU group each
      num_micro_batches: 1        # micro-batches per step through the pipeline (pp > 1)
      link: nvlink4               # preset name, {preset: nvlink4, latency_s: 5e-6}, or inline;
                                  # default: the hardware's own (HardwareSpec.gpu_link)

A replica then occupies ``tensor_parallel_size * pipeline_parallel_size`` GPUs
of the scenario's ``hardware``. This module holds the configuration, the link
presets (data, ``links.toml``), and how the model splits over the GPUs: weights
evenly (norms and embeddings too), KV heads split until ``tp = num_kv_heads``
and replicated past it (as vLLM does, so capacity stops growing with tp), and
the largest pipeline stage (``ceil(layers / pp)`` layers) bounds the cache
(``sim.hardware.kv_capacity``).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from sim.config import Frozen
from sim.hardware.specs import ModelSpec, lookup_preset, preset_validator


class LinkSpec(Frozen):
    """A GPU-to-GPU interconnect as collectives see it (``sim.cost.collectives``).

    ``bandwidth_bytes_per_s`` is the nominal rate per direction per GPU;
    ``efficiency`` the fraction NCCL's Simple protocol reaches (their product is
    NCCL's bus bandwidth); ``latency_s`` one hop of a ring step in the Simple
    protocol (NCCL's other protocols' hops keep NCCL's ratio to it, and each
    collective adds NCCL's base latency); ``fabric`` NCCL's hardware class,
    which sets those ratios and whether the LL128 protocol runs (NVLink only).
    """

    name: str = Field(min_length=1)
    bandwidth_bytes_per_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    latency_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    efficiency: Annotated[float, Field(gt=0, le=1)] = 0.8
    fabric: Literal["nvlink", "pcie"] = "pcie"


LINKS_FILE = Path(__file__).with_name("links.toml")
with LINKS_FILE.open("rb") as _file:
    # The link presets are data, each figure with its source in the file.
    _LINKS = [LinkSpec(name=name, **fields) for name, fields in tomllib.load(_file).items()]
LINK_PRESETS: Mapping[str, LinkSpec] = MappingProxyType({link.name: link for link in _LINKS})


def link_preset(name: str) -> LinkSpec:
    """The link preset called ``name``; ConfigError listing known names if none."""
    return lookup_preset(LINK_PRESETS, "link", name)


LinkRef = Annotated[LinkSpec, BeforeValidator(preset_validator(LINK_PRESETS, "link"))]


class ParallelismConfig(Frozen):
    """Tensor and pipeline parallel layout of one replica (defaults: one GPU)."""

    tensor_parallel_size: Literal[1, 2, 4, 8] = 1
    pipeline_parallel_size: int = Field(default=1, ge=1, le=64)
    num_micro_batches: int = Field(default=1, ge=1, le=256)
    link: LinkRef = Field(default_factory=lambda: link_preset("nvlink4"))

    @model_validator(mode="after")
    def _micro_batches_need_stages(self) -> ParallelismConfig:
        if self.num_micro_batches > 1 and self.pipeline_parallel_size == 1:
            raise ValueError("num_micro_batches > 1 needs pipeline_parallel_size > 1")
        return self

    @property
    def num_gpus(self) -> int:
        """GPUs one replica occupies."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def is_single_device(self) -> bool:
        return self.num_gpus == 1

    @property
    def layout(self) -> str:
        """Short layout tag for labels, e.g. ``tp4`` or ``tp2,pp2,mb4``."""
        parts = [f"tp{self.tensor_parallel_size}"]
        if self.pipeline_parallel_size > 1:
            parts.append(f"pp{self.pipeline_parallel_size}")
        if self.num_micro_batches > 1:
            parts.append(f"mb{self.num_micro_batches}")
        return ",".join(parts)


def layout_problem(model: ModelSpec, parallelism: ParallelismConfig) -> str | None:
    """Why ``model`` cannot be split this way (a one-line message), or None."""
    tp, pp = parallelism.tensor_parallel_size, parallelism.pipeline_parallel_size
    if model.num_attention_heads % tp:
        return (
            f"parallelism.tensor_parallel_size: {tp} does not divide "
            f"{model.name}'s {model.num_attention_heads} attention heads"
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        return (
            f"parallelism.tensor_parallel_size: {tp} and {model.name}'s "
            f"{model.num_kv_heads} KV heads must divide one another"
        )
    if pp > model.num_layers:
        return (
            f"parallelism.pipeline_parallel_size: {pp} stages for "
            f"{model.name}'s {model.num_layers} layers"
        )
    return None


def kv_heads_per_gpu(model: ModelSpec, tensor_parallel_size: int) -> int:
    """KV heads each GPU stores: split, or replicated once tp exceeds them."""
    return max(model.num_kv_heads // tensor_parallel_size, 1)


def kv_bytes_per_token_per_gpu(model: ModelSpec, parallelism: ParallelismConfig) -> float:
    """KV bytes per token on the GPU holding the largest stage (see module)."""
    layers = math.ceil(model.num_layers / parallelism.pipeline_parallel_size)
    heads = kv_heads_per_gpu(model, parallelism.tensor_parallel_size)
    # Same operation order as ModelSpec.kv_bytes_per_token, so tp = pp = 1 agrees.
    return 2 * layers * heads * model.head_dim * model.kv_dtype_bytes
