"""Multi-GPU layout of one replica: the ``parallelism:`` scenario section.

    parallelism:
      tensor_parallel_size: 4     # 1, 2, 4 or 8 GPUs splitting every layer
      pipeline_parallel_size: 1   # stages of consecutive layers, one GPU group each
      num_micro_batches: 1        # micro-batches per step through the pipeline (pp > 1)
      link: nvlink4               # preset name, {preset: nvlink4, latency_s: 5e-6}, or inline;
                                  # default: the hardware's own (HardwareSpec.gpu_link)

A replica then occupies ``tensor_parallel_size * pipeline_parallel_size`` GPUs
of the scenario's ``hardware``. This module holds the configuration, the link
presets, and how the model splits over the GPUs::

    weights_per_gpu   = model.weight_bytes / num_gpus                           [B]
    kv_per_token_gpu  = 2 * ceil(layers / pp) * kv_heads_per_gpu * head_dim
                          * kv_dtype_bytes                                       [B]

``kv_heads_per_gpu = max(num_kv_heads / tp, 1)``: past ``tp = num_kv_heads``
the KV heads are replicated (as vLLM does), so capacity stops growing with tp.
Simplified: norms and embeddings are split evenly like everything else, and
the largest pipeline stage (``ceil(layers / pp)`` layers) bounds the cache.
The KV budget per GPU is in ``sim.hardware.kv_capacity``; the step-time model in
``sim.cost.roofline``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from sim.hardware.specs import ModelSpec, lookup_preset, preset_validator

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class LinkSpec(BaseModel):
    """A GPU-to-GPU interconnect as collectives see it (``sim.cost.collectives``).

    ``bandwidth_bytes_per_s`` is the nominal rate per direction per GPU;
    ``efficiency`` the fraction NCCL's Simple protocol reaches (their product is
    NCCL's bus bandwidth); ``latency_s`` one hop of a ring step in the Simple
    protocol (NCCL's other protocols' hops keep NCCL's ratio to it, and each
    collective adds NCCL's base latency); ``fabric`` NCCL's hardware class,
    which sets those ratios and whether the LL128 protocol runs (NVLink only).
    """

    model_config = _FROZEN

    name: str = Field(min_length=1)
    bandwidth_bytes_per_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    latency_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    efficiency: Annotated[float, Field(gt=0, le=1)] = 0.8
    fabric: Literal["nvlink", "pcie"] = "pcie"


# Per-hop latencies (``latency_s``) are NCCL's own: its ``hwLatencies`` for a ring
# step in the Simple protocol, 3.4 us over NVLink and 5.7 us over PCI (NCCL's
# src/graph/tuning.cc, https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc
# at commit 5067397c: NVIDIA's figures for its kernels, the ones its tuner picks
# algorithms by). With NCCL's base latency a small all-reduce on 2 GPUs then takes
# 6.6 + 2 x 0.6 = 7.8 us over NVLink and 6.6 + 2 x 1.0 = 8.6 us over PCIe (LL),
# 15.0 us on 8 H100s over NVLink, where aiconfigurator-core 0.12's NCCL table
# (sim/cost/kernels/artifacts/h100_sxm-vllm-0.24.0-qwen3-32b, all_reduce, 512 B,
# measured under CUDA graphs) has 5 us on 2 and 16 us on 8. Through host memory
# (no peer-to-peer) NCCL is slower than its PCI figures: nccl-tests' alltoall_perf
# of 8 B on two RTX 4090s with P2P disabled took 11.9 us
# (https://github.com/tinygrad/open-gpu-kernel-modules/issues/17), where the model
# gives 6.6 + 1.0 = 7.6 us; pcie5-via-host keeps NCCL's figures all the same (a
# figure from another server and card would be a guess for these).
_LINKS = [
    # Bandwidths: public ballpark figures. NVLink 5 (B200): 18 links x 50 GB/s per
    # direction; NVLink 4 (H100 SXM): 18 links x 25 GB/s per direction;
    # NVLink 3 (A100 SXM): 12 links x 25 GB/s. PCIe x16: ~32 GB/s (Gen4) and ~64 GB/s
    # (Gen5) per direction.
    LinkSpec(name="nvlink5", bandwidth_bytes_per_s=900e9, latency_s=3.4e-6, fabric="nvlink"),
    LinkSpec(name="nvlink4", bandwidth_bytes_per_s=450e9, latency_s=3.4e-6, fabric="nvlink"),
    LinkSpec(name="nvlink3", bandwidth_bytes_per_s=300e9, latency_s=3.4e-6, fabric="nvlink"),
    LinkSpec(name="pcie5", bandwidth_bytes_per_s=64e9, latency_s=5.7e-6, fabric="pcie"),
    LinkSpec(name="pcie4", bandwidth_bytes_per_s=32e9, latency_s=5.7e-6, fabric="pcie"),
    # PCIe Gen5 cards with no peer-to-peer path (the RTX PRO 6000 Server
    # Edition in its servers): NCCL stages each all-reduce through host memory.
    # Its bandwidth is measured, not a datasheet figure: aiconfigurator-core 0.12's
    # all-reduce table (vLLM's, backend vllm_graph) for two such cards gives 19.7 GB/s
    # of algorithm bandwidth at 512 MB (a ring over two GPUs moves each byte once, so
    # this is the link's own rate); efficiency 1: the rate is what was achieved, not
    # a peak to derate. LLMServingSim's configuration of the same servers assumes
    # 16 GB/s. Its hop: NCCL's PCI figure, as the other PCIe links.
    LinkSpec(
        name="pcie5-via-host",
        bandwidth_bytes_per_s=19.7e9,
        latency_s=5.7e-6,
        efficiency=1.0,
        fabric="pcie",
    ),
]

LINK_PRESETS: Mapping[str, LinkSpec] = MappingProxyType({link.name: link for link in _LINKS})


def link_preset(name: str) -> LinkSpec:
    """The link preset called ``name``; ConfigError listing known names if none."""
    return lookup_preset(LINK_PRESETS, "link", name)


LinkRef = Annotated[LinkSpec, BeforeValidator(preset_validator(LINK_PRESETS, "link"))]


class ParallelismConfig(BaseModel):
    """Tensor and pipeline parallel layout of one replica (defaults: one GPU)."""

    model_config = _FROZEN

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
