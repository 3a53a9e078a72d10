"""``kind: auto``'s kernel-table step: a ``KernelCost`` when tables cover the scenario, else None.

Candidates, in order: the installed aiconfigurator-core database for the
hardware's GPU, then each shipped artifact measured on that GPU for this
model. The first that covers the model's shapes (bf16 weights and KV, its
head layout, its tensor-parallel size) wins; any ``ConfigError`` while
building one just moves on. No candidate: None, and ``auto`` goes on to
calibrated artifacts and the roofline exactly as it did before.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from sim.cost.kernels.aiconfigurator import installed_data_dir
from sim.cost.kernels.artifact import model_matches
from sim.cost.kernels.config import KernelsCostConfig, architecture_for, build_kernels
from sim.cost.kernels.shipped import load_provenance_cached, shipped_kernel_artifacts
from sim.errors import ConfigError
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import AICONFIGURATOR_GPUS, SOURCE_GPU_NAMES, HardwareSpec, ModelSpec

if TYPE_CHECKING:
    from sim.cost.kernels.cost import KernelCost


def auto_candidates(model: ModelSpec, hardware: HardwareSpec) -> list[KernelsCostConfig]:
    """Kernel configurations that might cover ``model`` on ``hardware``, best first."""
    gpu_names = SOURCE_GPU_NAMES.get(hardware.name)
    if gpu_names is None or model.weight_dtype_bytes != 2 or model.kv_dtype_bytes != 2:
        return []
    candidates = []
    gpu = AICONFIGURATOR_GPUS.get(hardware.name)
    if gpu is not None and installed_data_dir() is not None:
        candidates.append(KernelsCostConfig(gpu=gpu))
    arch_name = architecture_for(model).name
    for path in shipped_kernel_artifacts():
        try:
            # Provenance only: the tables are built for the candidate that wins.
            provenance = load_provenance_cached(path)
        except ConfigError:
            continue  # an unreadable shipped file must not break auto
        if provenance.gpu in gpu_names and model_matches(provenance.model, arch_name):
            candidates.append(KernelsCostConfig(source="path", artifact=str(path)))
    return candidates


@lru_cache(maxsize=32)
def kernel_auto(
    model: ModelSpec, hardware: HardwareSpec, parallelism: ParallelismConfig | None = None
) -> KernelCost | None:
    """The first candidate that builds (see the module docstring), or None."""
    for config in auto_candidates(model, hardware):
        try:
            return build_kernels(config, model, hardware, parallelism)
        except ConfigError:
            continue
    return None
