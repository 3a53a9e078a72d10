"""Kernel-table cost model: a step is the sum of the vLLM operators it runs.

Operator latencies come from measured tables (an artifact, see
``sim.cost.kernels.artifact``) built from aiconfigurator-core's database
(``from_aiconfigurator``) or an LLMServingSim profile (``import_profile``).
"""

from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.artifact import (
    KernelArtifact,
    KernelProvenance,
    load_kernel_artifact,
    save_artifact,
)
from sim.cost.kernels.llmservingsim import import_profile, main

__all__ = [
    "KernelArtifact",
    "KernelProvenance",
    "from_aiconfigurator",
    "import_profile",
    "load_kernel_artifact",
    "main",
    "save_artifact",
]
