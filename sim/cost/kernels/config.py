"""The ``cost: {kind: kernels}`` configuration and the factory building a ``KernelCost``.

The fields, and the order in which ``kind: auto`` tries kernel tables:
``docs/kernels.md``. ``kernel_auto_choice`` is ``kind: auto``'s kernel-table step:
the first candidate that builds for the model's shapes (a ``ConfigError`` moves on
to the next), or None (``auto`` goes on to calibrated artifacts and the roofline),
with a line saying which tables it priced from, or why none (the first refusal).
"""

from __future__ import annotations

import sys
import warnings
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

from pydantic import Field, model_validator

from sim.config import Frozen, anchored
from sim.cost.kernels.aiconfigurator import from_aiconfigurator, installed_data_dir
from sim.cost.kernels.artifact import (
    DTYPE_BYTES,
    KernelArtifact,
    load_cached,
    load_provenance_cached,
    resolve_kernel_artifact,
    shipped_kernel_artifacts,
    shipped_name,
)
from sim.errors import ConfigError
from sim.hardware.model_names import same_model
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import (
    AICONFIGURATOR_GPUS,
    GPU_PRESETS,
    HF_CONFIGS,
    MODEL_SPEC_ALIASES,
    SOURCE_GPU_NAMES,
    HardwareSpec,
    ModelSpec,
    load_architecture,
)

if TYPE_CHECKING:
    from sim.cost.kernels.cost import KernelCost

# The fields a scenario's model must share with a preset's config.json to be priced as it.
_SHAPE_FIELDS = {
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "mlp",
}


class KernelsCostConfig(Frozen):
    """Kernel-table cost model (its fields: ``docs/kernels.md``)."""

    kind: Literal["kernels"] = "kernels"
    source: Literal["aiconfigurator", "path"] = "aiconfigurator"
    gpu: str | None = None
    framework: str = "vllm"
    version: str | None = None
    data_dir: str | None = None
    artifact: str | None = None
    architecture: str | None = None
    # Price the scenario's GPU with tables measured on another (a what-if): refused
    # unless asked for, since the answer is then about the other GPU's kernels.
    allow_other_gpu: bool = False
    # Ablations (terms.ABLATIONS; public_runs.py's per-cause columns): off, a mixed
    # step's attention as two kernels, no memory-bound ops, no skew fit.
    mixed_attention: bool = True
    memory_ops: bool = True
    skew: bool = True
    expert_parallel_size: Annotated[int, Field(ge=1)] = 1

    @property
    def disabled_terms(self) -> frozenset[str]:
        """The ablations above that are off, as the kernel cost's term list takes them
        (``sim.cost.kernels.terms.ABLATIONS``)."""
        switches = (
            ("mixed_attention", self.mixed_attention),
            ("memory_ops", self.memory_ops),
            ("skew", self.skew),
        )
        return frozenset(name for name, on in switches if not on)

    @model_validator(mode="after")
    def _artifact_with_path(self) -> KernelsCostConfig:
        if self.source == "path" and self.artifact is None:
            raise ValueError("source 'path' needs artifact (a shipped name or a file)")
        if self.source == "aiconfigurator" and self.artifact is not None:
            raise ValueError("artifact is only read with source 'path'")
        return self


def architecture_for(
    model: ModelSpec, override: str | None = None, base_dir: Path | None = None
) -> ModelSpec:
    """The architecture a scenario's model stands for: ``override`` (a preset, or a
    path anchored at ``base_dir``), else the preset of the model's shapes
    (``llama-3-8b`` is Llama-3.1-8B), else the model itself."""
    if override is not None:
        named = override in HF_CONFIGS or override in MODEL_SPEC_ALIASES
        return load_architecture(override if named else anchored(override, base_dir))
    name = MODEL_SPEC_ALIASES.get(model.name, model.name)
    if name in HF_CONFIGS:
        preset = load_architecture(name)
        if preset.model_dump(include=_SHAPE_FIELDS) == model.model_dump(include=_SHAPE_FIELDS):
            return preset
    return model


def kernel_artifact_for(
    config: KernelsCostConfig, hardware: HardwareSpec, base_dir: Path | None
) -> KernelArtifact:
    """The tables ``config`` names (ConfigError when absent or unknown)."""
    if config.source == "path":
        assert config.artifact is not None  # checked by the validator
        return load_cached(resolve_kernel_artifact(config.artifact, base_dir))
    gpu = config.gpu or AICONFIGURATOR_GPUS.get(hardware.name)
    if gpu is None:
        raise ConfigError(
            f"cost.gpu: hardware {hardware.name!r} has no aiconfigurator GPU name; set cost.gpu"
        )
    data_dir = None if config.data_dir is None else anchored(config.data_dir, base_dir)
    return from_aiconfigurator(gpu, config.framework, config.version, data_dir)


def kernel_cost_class() -> type[KernelCost] | None:
    """``KernelCost`` if its module is loaded, else None. Kernel tables exist only once
    it is (``build_kernels`` loads it where it builds them), so what asks "are these
    kernel tables?" need not load it: a roofline run never does
    (tests/test_cost_imports.py)."""
    module = sys.modules.get("sim.cost.kernels.cost")
    return None if module is None else cast("type[KernelCost]", module.KernelCost)


def build_kernels(
    config: KernelsCostConfig,
    model: ModelSpec,
    hardware: HardwareSpec,
    parallelism: ParallelismConfig | None = None,
    base_dir: Path | None = None,
) -> KernelCost:
    """The ``KernelCost`` a ``kind: kernels`` block describes."""
    artifact = kernel_artifact_for(config, hardware, base_dir)
    dtype, kv_dtype = artifact.provenance.dtype, artifact.provenance.kv_dtype
    wanted = (DTYPE_BYTES.get(dtype), DTYPE_BYTES.get(kv_dtype))
    if (model.weight_dtype_bytes, model.kv_dtype_bytes) != wanted:
        raise ConfigError(
            f"cost.kind kernels: tables are {dtype} weights / {kv_dtype} KV; model "
            f"{model.name} has {model.weight_dtype_bytes:g}-byte weights and "
            f"{model.kv_dtype_bytes:g}-byte KV"
        )
    measured_on = artifact.provenance.gpu
    expected = SOURCE_GPU_NAMES.get(hardware.name)
    if expected is not None and measured_on not in expected:
        if not config.allow_other_gpu:
            raise ConfigError(
                f"cost: kernel tables measured on {measured_on}, the scenario's hardware is "
                f"{hardware.name}: they would price another GPU's kernels (set "
                "cost.allow_other_gpu: true for that what-if)"
            )
        # Asked for (e.g. to compare GPUs): said again, as the answer is the other GPU's.
        warnings.warn(
            f"cost: kernel tables measured on {measured_on}, the scenario's hardware is "
            f"{hardware.name} (cost.allow_other_gpu)",
            UserWarning,
            stacklevel=2,
        )
    arch = architecture_for(model, config.architecture, base_dir)
    p = parallelism or ParallelismConfig()
    # The tables' code loads only where a kernel cost model is built (a scenario's
    # validation reads this module: tests/test_cost_imports.py).
    from sim.cost.kernels.cost import KernelCost

    return KernelCost(
        arch,
        artifact,
        tensor_parallel_size=p.tensor_parallel_size,
        pipeline_parallel_size=p.pipeline_parallel_size,
        link=p.link,
        expert_parallel_size=config.expert_parallel_size,
        hardware=hardware,
        disabled_terms=config.disabled_terms,
    )


def _timed(data_dir: Path, gpu: str) -> bool:
    """Whether the database times ``gpu`` (some of its folders are empty placeholders)."""
    return any((data_dir / gpu).glob("gemm/*/*/*.parquet"))


def auto_candidates(
    model: ModelSpec, hardware: HardwareSpec
) -> tuple[list[KernelsCostConfig], str]:
    """Kernel configurations that might cover ``model`` on ``hardware``, best first,
    and why there are none (one line, or "" when there are)."""
    gpu_names = SOURCE_GPU_NAMES.get(hardware.name)
    if gpu_names is None:
        return [], f"no kernel tables name hardware {hardware.name}"
    preset = GPU_PRESETS.get(hardware.name)
    if preset is not None and preset.no_kernel_tables is not None:  # (gpus.toml)
        return [], f"no kernel tables for {hardware.name}: {preset.no_kernel_tables}"
    if model.weight_dtype_bytes != 2 or model.kv_dtype_bytes != 2:
        return [], (
            f"kernel tables are bf16; model {model.name} has {model.weight_dtype_bytes:g}-byte "
            f"weights and {model.kv_dtype_bytes:g}-byte KV"
        )
    candidates = []
    gpu = AICONFIGURATOR_GPUS.get(hardware.name)
    data_dir = installed_data_dir()
    if gpu is not None and data_dir is not None and _timed(data_dir, gpu):
        candidates.append(KernelsCostConfig(gpu=gpu))
    arch_name = architecture_for(model).name
    other_models = []
    for path in shipped_kernel_artifacts():
        try:
            # Provenance only: the tables are built for the candidate that wins.
            provenance = load_provenance_cached(path)
        except ConfigError:
            continue  # an unreadable shipped file must not break auto
        if provenance.gpu not in gpu_names:
            continue
        if same_model(arch_name, provenance.model):
            candidates.append(KernelsCostConfig(source="path", artifact=str(path)))
        elif provenance.model is not None:
            other_models.append(provenance.model)
    if candidates:
        return candidates, ""
    names = "/".join(sorted(gpu_names))
    shipped = f" (shipped for {names}: {', '.join(sorted(set(other_models)))})"
    return [], (
        f"no kernel tables for {arch_name} on {names}{shipped if other_models else ''}"
        + ("" if data_dir is not None else "; aiconfigurator-core not installed")
    )


def _source(config: KernelsCostConfig, kernels: KernelCost) -> str:
    """Which tables a candidate read, for the one-line choice."""
    p = kernels.artifact.provenance
    fw = f"{p.framework} {p.framework_version}"
    if config.artifact is not None:
        return f"{shipped_name(Path(config.artifact))} ({p.source}, {fw})"
    return f"in the installed {p.source} database ({fw})"


# How ``kernel_auto_choice``'s line begins when this GPU's tables exist but lack a
# row the model needs (a run's caveat: sim.cost.config.cost_caveats).
NOT_COVERED = "kernel tables do not cover it"


@lru_cache(maxsize=32)
def kernel_auto_choice(
    model: ModelSpec, hardware: HardwareSpec, parallelism: ParallelismConfig | None = None
) -> tuple[KernelCost | None, str]:
    """The first candidate that builds, or None, and the choice in one line (the
    module docstring)."""
    candidates, why = auto_candidates(model, hardware)
    problems = []
    for config in candidates:
        try:
            kernels = build_kernels(config, model, hardware, parallelism)
        except ConfigError as error:
            problems.append(str(error))
            continue
        gpu = kernels.artifact.provenance.gpu
        derived = "".join(f"; {phrase}" for phrase in kernels.derived)  # not measured
        return kernels, f"priced from {gpu} kernel tables {_source(config, kernels)}{derived}"
    if problems:  # the first is the best candidate's reason
        return None, f"{NOT_COVERED}: {problems[0]}"
    return None, why
