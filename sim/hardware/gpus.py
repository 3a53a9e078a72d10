"""Accelerators as cost models see them, and their datasheet presets.

A ``HardwareSpec`` is one accelerator: datasheet peak dense FLOP/s and memory
bandwidth, memory size, the fractions of peak a real engine reaches, and a
fixed per-step overhead (scheduling, kernel launches, sampling). Presets give
dense (non-sparse) bf16 tensor-core FLOP/s, memory bandwidth and memory in
decimal GB from each vendor's datasheet, cited per entry; their efficiencies
and overheads are the roofline's guesses (kernel tables do not use them).

Kernel-table sources name the GPUs their own way: aiconfigurator-core's
folders ``h100_sxm``, ``rtx_pro_6000_server``...; LLMServingSim's profiles
``RTX4090``, ``RTXPRO6000``. ``AICONFIGURATOR_GPUS`` and ``SOURCE_GPU_NAMES``
let a scenario say ``hardware: rtx-pro-6000`` and find tables measured on
that card.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(extra="forbid", frozen=True)

PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]


# vLLM V1's CPU work per step (scheduler, input prep, launches / graph replay,
# sampler bookkeeping): a few ms on a busy server CPU. A guess until calibrated;
# also the kernel-table cost model's default (sim.cost.kernels).
DEFAULT_STEP_OVERHEAD_S = 2e-3


class HardwareSpec(BaseModel):
    """One accelerator as a cost model sees it.

    ``peak_flops_per_s`` is the datasheet dense (non-sparse) rate at the
    weight dtype; efficiencies are the fractions of peak FLOP/s and bandwidth
    a real engine reaches; ``step_overhead_s`` is paid once per engine step.
    """

    model_config = _FROZEN

    name: str = Field(min_length=1)
    peak_flops_per_s: PositiveFloat
    memory_bandwidth_bytes_per_s: PositiveFloat
    memory_bytes: PositiveFloat
    # Total memory as CUDA reports it (torch.cuda.mem_get_info()[1]), what vLLM
    # multiplies by gpu_memory_utilization; a little below the datasheet figure
    # (the driver keeps some). None: use memory_bytes (sim.hardware.memory).
    cuda_memory_bytes: PositiveFloat | None = None
    compute_efficiency: Fraction = 0.6
    memory_efficiency: Fraction = 0.8
    step_overhead_s: Annotated[float, Field(ge=0)] = DEFAULT_STEP_OVERHEAD_S


_GB = 1e9
_T = 1e12
_GIB = 2**30
_MIB = 2**20
# CUDA's total is nvidia-smi's minus what the driver keeps: on an H100 80GB,
# 81559 MiB (nvidia-smi) against 79.22 GiB (CUDA), 0.43 GiB; on an RTX 4090,
# 24564 MiB against 23.52 GiB, 0.47 GiB. Where only nvidia-smi's figure is
# known, CUDA's is taken as that minus 0.43 GiB (an estimate).
_DRIVER_RESERVED_BYTES = 0.43 * _GIB

_HARDWARE = [
    # Datasheet numbers: dense bf16 tensor-core FLOP/s (without sparsity), HBM/GDDR
    # bandwidth, and memory in decimal GB as marketed. Overheads are guesses of a
    # vLLM-like engine's per-step CPU work, to be replaced by calibration.
    # CUDA total 79.22 GiB: vLLM's "total_gpu_memory 79.22GiB" on an H100
    # (vllm-project/vllm PR #10511).
    HardwareSpec(
        name="h100",
        peak_flops_per_s=989e12,
        memory_bandwidth_bytes_per_s=3.35e12,
        memory_bytes=80 * _GB,
        cuda_memory_bytes=79.22 * _GIB,
    ),
    # nvidia-smi: 143771 MiB.
    HardwareSpec(
        name="h200",
        peak_flops_per_s=989e12,
        memory_bandwidth_bytes_per_s=4.8e12,
        memory_bytes=141 * _GB,
        cuda_memory_bytes=143771 * _MIB - _DRIVER_RESERVED_BYTES,
    ),
    # nvidia-smi (A100-SXM4-80GB): 81920 MiB.
    HardwareSpec(
        name="a100-80gb",
        peak_flops_per_s=312e12,
        memory_bandwidth_bytes_per_s=2.039e12,
        memory_bytes=80 * _GB,
        cuda_memory_bytes=81920 * _MIB - _DRIVER_RESERVED_BYTES,
    ),
    HardwareSpec(
        name="l4",
        peak_flops_per_s=121e12,
        memory_bandwidth_bytes_per_s=300e9,
        memory_bytes=24 * _GB,
    ),
    # The 2-core dev machine: peak and bandwidth are measured (fp32 matmul, large
    # copies), so bandwidth needs no further discount; small eager-mode matmuls
    # reach well under the big-matmul rate, hence the compute discount.
    HardwareSpec(
        name="cpu-2core",
        peak_flops_per_s=88e9,
        memory_bandwidth_bytes_per_s=8e9,
        memory_bytes=24 * _GB,
        compute_efficiency=0.6,
        memory_efficiency=1.0,
        step_overhead_s=1e-3,
    ),
]


_MORE_GPUS = [
    # NVIDIA Ada whitepaper: 165.2 TFLOPS bf16 (fp32 accumulate), 1008 GB/s GDDR6X, 24 GB.
    # CUDA total 25250627584 B: LLMServingSim's vLLM 0.19 run (shared/data/llmservingsim,
    # bench/examples/RTX4090/Llama-3.1-8B/vllm/meta.json, device_total_memory_bytes).
    HardwareSpec(
        name="rtx-4090",
        peak_flops_per_s=165.2 * _T,
        memory_bandwidth_bytes_per_s=1008e9,
        memory_bytes=24 * _GB,
        cuda_memory_bytes=25250627584,
    ),
    # RTX PRO 6000 Blackwell Server Edition datasheet: 4 PFLOPS fp4 with sparsity,
    # i.e. ~500 TFLOPS dense bf16 (fp4 / 8); 1.79 TB/s GDDR7; 96 GB. nvidia-smi: 97887 MiB.
    HardwareSpec(
        name="rtx-pro-6000",
        peak_flops_per_s=500 * _T,
        memory_bandwidth_bytes_per_s=1792e9,
        memory_bytes=96 * _GB,
        cuda_memory_bytes=97887 * _MIB - _DRIVER_RESERVED_BYTES,
    ),
    # L40S datasheet: 362 TFLOPS bf16 dense (733 sparse), 864 GB/s, 48 GB.
    HardwareSpec(
        name="l40s",
        peak_flops_per_s=362 * _T,
        memory_bandwidth_bytes_per_s=864e9,
        memory_bytes=48 * _GB,
    ),
    # AWS G5 (A10G): ~70 TFLOPS bf16 dense, 600 GB/s, 24 GB (AWS figures; NVIDIA
    # publishes none for this cloud-only part).
    HardwareSpec(
        name="a10g",
        peak_flops_per_s=70 * _T,
        memory_bandwidth_bytes_per_s=600e9,
        memory_bytes=24 * _GB,
    ),
    # A100 datasheet: 312 TFLOPS bf16 dense; 40 GB HBM2 at 1555 GB/s.
    HardwareSpec(
        name="a100-40gb",
        peak_flops_per_s=312 * _T,
        memory_bandwidth_bytes_per_s=1555e9,
        memory_bytes=40 * _GB,
    ),
    # H100 datasheet, SXM: 989 TFLOPS bf16 dense, 3.35 TB/s, 80 GB (same as "h100").
    HardwareSpec(
        name="h100-sxm",
        peak_flops_per_s=989 * _T,
        memory_bandwidth_bytes_per_s=3.35e12,
        memory_bytes=80 * _GB,
        cuda_memory_bytes=79.22 * _GIB,
    ),
    # H100 datasheet, PCIe: 756 TFLOPS bf16 dense, 2.0 TB/s, 80 GB.
    HardwareSpec(
        name="h100-pcie",
        peak_flops_per_s=756 * _T,
        memory_bandwidth_bytes_per_s=2.0e12,
        memory_bytes=80 * _GB,
    ),
    # HGX B200 datasheet, per GPU: 2.25 PFLOPS bf16 dense (4.5 sparse), 8 TB/s, 180 GB.
    # nvidia-smi: 183359 MiB.
    HardwareSpec(
        name="b200",
        peak_flops_per_s=2250 * _T,
        memory_bandwidth_bytes_per_s=8e12,
        memory_bytes=180 * _GB,
        cuda_memory_bytes=183359 * _MIB - _DRIVER_RESERVED_BYTES,
    ),
]

HARDWARE_SPECS: tuple[HardwareSpec, ...] = (*_HARDWARE, *_MORE_GPUS)


# servesim hardware preset -> the GPU's name in aiconfigurator-core's database.
AICONFIGURATOR_GPUS: Mapping[str, str] = MappingProxyType(
    {
        "rtx-pro-6000": "rtx_pro_6000_server",
        "l40s": "l40s",
        "l4": "l4",
        "a100-80gb": "a100_sxm",
        "a100-40gb": "a100_sxm",
        "h100": "h100_sxm",
        "h100-sxm": "h100_sxm",
        "h100-pcie": "h100_pcie",
        "h200": "h200_sxm",
        "b200": "b200_sxm",
    }
)

# servesim hardware preset -> names a kernel artifact's provenance.gpu may use.
SOURCE_GPU_NAMES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        **{hw: frozenset({gpu}) for hw, gpu in AICONFIGURATOR_GPUS.items()},
        "rtx-4090": frozenset({"RTX4090"}),
        "rtx-pro-6000": frozenset({"rtx_pro_6000_server", "RTXPRO6000"}),
    }
)
