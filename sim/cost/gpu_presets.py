"""Datasheet presets of more GPUs, and the name each kernel-table source gives them.

Kept apart from ``sim.cost.specs.HARDWARE_PRESETS`` for now: the existing
tests pin that mapping's exact key set (``tests/test_specs.py``), so joining
them is a one-line change in ``specs.py`` plus that test. Values: dense
(non-sparse) bf16 tensor-core FLOP/s, memory bandwidth, memory in decimal GB,
from each vendor datasheet (cited per entry); efficiencies and step overhead
keep ``HardwareSpec``'s defaults (the kernel cost model does not use them).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from sim.cost.specs import HARDWARE_PRESETS, HardwareSpec, lookup_preset

_GB = 1e9
_T = 1e12

_GPUS = [
    # NVIDIA Ada whitepaper: 165.2 TFLOPS bf16 (fp32 accumulate), 1008 GB/s GDDR6X, 24 GB.
    HardwareSpec(
        name="rtx-4090",
        peak_flops_per_s=165.2 * _T,
        memory_bandwidth_bytes_per_s=1008e9,
        memory_bytes=24 * _GB,
    ),
    # RTX PRO 6000 Blackwell Server Edition datasheet: 4 PFLOPS fp4 with sparsity,
    # i.e. ~500 TFLOPS dense bf16 (fp4 / 8); 1.79 TB/s GDDR7; 96 GB.
    HardwareSpec(
        name="rtx-pro-6000",
        peak_flops_per_s=500 * _T,
        memory_bandwidth_bytes_per_s=1792e9,
        memory_bytes=96 * _GB,
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
    ),
    # H100 datasheet, PCIe: 756 TFLOPS bf16 dense, 2.0 TB/s, 80 GB.
    HardwareSpec(
        name="h100-pcie",
        peak_flops_per_s=756 * _T,
        memory_bandwidth_bytes_per_s=2.0e12,
        memory_bytes=80 * _GB,
    ),
    # HGX B200 datasheet, per GPU: 2.25 PFLOPS bf16 dense (4.5 sparse), 8 TB/s, 180 GB.
    HardwareSpec(
        name="b200",
        peak_flops_per_s=2250 * _T,
        memory_bandwidth_bytes_per_s=8e12,
        memory_bytes=180 * _GB,
    ),
]

GPU_PRESETS: Mapping[str, HardwareSpec] = MappingProxyType({g.name: g for g in _GPUS})

# Every hardware preset name, old and new (for lookups that accept either).
ALL_HARDWARE_PRESETS: Mapping[str, HardwareSpec] = MappingProxyType(
    {**HARDWARE_PRESETS, **GPU_PRESETS}
)

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


def any_hardware_preset(name: str) -> HardwareSpec:
    """A preset from either mapping; ConfigError listing all names if none."""
    return lookup_preset(ALL_HARDWARE_PRESETS, "hardware", name)
