"""Kernel-table cost model: a step is the sum of the vLLM operators it runs.

Operator latencies come from measured tables (an artifact, see
``sim.cost.kernels.artifact``) built from aiconfigurator-core's database
(``from_aiconfigurator``, ``export_slice``) or an LLMServingSim profile
(``import_profile``; ``main`` is the ``servesim import-profile`` command,
``export_main`` a ``servesim export-kernels`` command).
``KernelCost`` prices steps; ``KernelsCostConfig`` is the ``cost:`` block.
"""

from sim.cost.kernels.aiconfigurator import available_gpus, from_aiconfigurator
from sim.cost.kernels.artifact import (
    KernelArtifact,
    KernelProvenance,
    load_kernel_artifact,
    save_artifact,
)
from sim.cost.kernels.auto import kernel_auto
from sim.cost.kernels.config import KernelsCostConfig, build_kernels
from sim.cost.kernels.cost import DEFAULT_STEP_OVERHEAD_S, KernelCost
from sim.cost.kernels.llmservingsim import import_profile, main
from sim.cost.kernels.shipped import shipped_kernel_artifacts
from sim.cost.kernels.slice import export_main, export_slice

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
