"""Kernel-table cost model: a step is the sum of the vLLM operators it runs.

Operator latencies come from measured tables (an artifact, see
``sim.cost.kernels.artifact``) built from aiconfigurator-core's database
(``from_aiconfigurator``, ``export_slice``) or an LLMServingSim profile
(``import_profile``; ``main`` is the ``servesim import-profile`` command,
``export_main`` a ``servesim export-kernels`` command).
``KernelCost`` prices steps; ``KernelsCostConfig`` is the ``cost:`` block.

The names below are loaded on first use (PEP 562): a scenario that only
validates ``KernelsCostConfig`` does not import the table readers (issue 16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.cost.lazy import load_name, names

if TYPE_CHECKING:
    from sim.cost.kernels.aiconfigurator import available_gpus, from_aiconfigurator
    from sim.cost.kernels.artifact import (
        KernelArtifact,
        KernelProvenance,
        load_kernel_artifact,
        save_artifact,
    )
    from sim.cost.kernels.auto import kernel_auto
    from sim.cost.kernels.config import KernelsCostConfig, build_kernels
    from sim.cost.kernels.cost import KernelCost
    from sim.cost.kernels.defaults import DEFAULT_STEP_OVERHEAD_S
    from sim.cost.kernels.llmservingsim import import_profile, main
    from sim.cost.kernels.shipped import shipped_kernel_artifacts
    from sim.cost.kernels.slice import export_main, export_slice

# Each public name and the submodule that defines it.
_SOURCES = {
    "available_gpus": "aiconfigurator",
    "from_aiconfigurator": "aiconfigurator",
    "KernelArtifact": "artifact",
    "KernelProvenance": "artifact",
    "load_kernel_artifact": "artifact",
    "save_artifact": "artifact",
    "kernel_auto": "auto",
    "KernelsCostConfig": "config",
    "build_kernels": "config",
    "DEFAULT_STEP_OVERHEAD_S": "defaults",
    "KernelCost": "cost",
    "import_profile": "llmservingsim",
    "main": "llmservingsim",
    "shipped_kernel_artifacts": "shipped",
    "export_main": "slice",
    "export_slice": "slice",
}

__all__ = [
    "DEFAULT_STEP_OVERHEAD_S",
    "KernelArtifact",
    "KernelCost",
    "KernelProvenance",
    "KernelsCostConfig",
    "available_gpus",
    "build_kernels",
    "export_main",
    "export_slice",
    "from_aiconfigurator",
    "import_profile",
    "kernel_auto",
    "load_kernel_artifact",
    "main",
    "save_artifact",
    "shipped_kernel_artifacts",
]


def __getattr__(name: str) -> Any:
    """Import ``name``'s submodule on first use and return ``name`` from it."""
    return load_name(__name__, _SOURCES, globals(), name)


def __dir__() -> list[str]:
    return names(globals(), _SOURCES)
