"""The names kernel-table sources give each GPU of ``sim.hardware.gpus``'s presets.

aiconfigurator-core names its folders ``h100_sxm``, ``rtx_pro_6000_server``...;
LLMServingSim's profiles ``RTX4090``, ``RTXPRO6000``. These maps let a scenario
say ``hardware: rtx-pro-6000`` and find tables measured on that card.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

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
