"""The ``cost:`` block of a scenario, the choice ``kind: auto`` makes, and the factory.

``cost:`` is a tagged union on ``kind``: ``linear``, ``roofline``,
``calibrated`` (a measured curve: ``artifact:`` a shipped name or a path),
``kernels`` (measured kernel tables, ``sim.cost.kernels``), ``fitted`` (a base
model fitted to measured runs) and ``auto`` (the default): kernel tables
covering this model and GPU, else a shipped artifact measured for this model on
this hardware, else the roofline (labelled uncalibrated, as always).

``build_cost_model`` is the one place that adds the engine's CPU work
(``sim.cost.engine_cpu``) to a model that prices GPU work only: the roofline and
kernel tables. Calibrated artifacts, fitted models and linear coefficients time
whole steps, CPU work included, and are not wrapped.
"""

from __future__ import annotations

import importlib.util
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from sim.config import Frozen, anchored
from sim.cost.base import CostModel
from sim.cost.calibrated import (
    CalibratedCost,
    CalibrationArtifact,
    load_artifact,
    scale_to_hardware,
)
from sim.cost.engine_cpu import EngineCpu, EngineCpuCost, Seconds
from sim.cost.fitted import FittedCost, load_fitted_artifact
from sim.cost.kernels.config import (
    NOT_COVERED,
    KernelsCostConfig,
    build_kernels,
    kernel_auto_choice,
)
from sim.cost.linear import LinearCost
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError, format_error
from sim.hardware.device_names import hardware_matches
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import GPU_PRESETS, HardwareSpec, ModelSpec, hardware_preset


class CalibratedCostConfig(Frozen):
    """Measured step costs from a calibration artifact."""

    kind: Literal["calibrated"] = "calibrated"
    artifact: str
    # Extrapolate to the scenario's hardware by roofline ratios (a rough
    # estimate, warned about) instead of refusing a hardware mismatch.
    scale_to_scenario_hardware: bool = False


class AutoCostConfig(Frozen):
    """A shipped artifact for this model and hardware if any, else the roofline."""

    kind: Literal["auto"] = "auto"


def artifacts_dir() -> Path | None:
    """Where the shipped artifacts live (inside the ``calibration`` package)."""
    spec = importlib.util.find_spec("calibration")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "artifacts"


def shipped_artifacts() -> list[Path]:
    folder = artifacts_dir()
    return sorted(folder.glob("*.json")) if folder is not None and folder.is_dir() else []


def resolve_artifact(name: str, base_dir: Path | None) -> Path:
    """The file an ``artifact:`` value names (ConfigError listing shipped names)."""
    if "/" in name or name.endswith(".json"):
        return anchored(name, base_dir)
    folder = artifacts_dir()
    path = folder / f"{name}.json" if folder is not None else Path(f"{name}.json")
    if not path.exists():
        known = ", ".join(p.stem for p in shipped_artifacts()) or "none"
        raise ConfigError(f"cost.artifact: no shipped artifact {name!r}; shipped: {known}")
    return path


def artifact_hardware(artifact: CalibrationArtifact) -> str | None:
    """The hardware preset an artifact was measured on: the first, in gpus.toml's order,
    its device is (``hardware_matches``; an ``NVIDIA H100 80GB HBM3`` is ``h100``)."""
    # torch's device name of a GPU; a CPU's is its model, which names no preset.
    device = "cpu" if artifact.hardware.device == "cpu" else artifact.hardware.device_name
    return next((n for n, gpu in GPU_PRESETS.items() if hardware_matches(device, gpu.spec)), None)


def build_calibrated(
    config: CalibratedCostConfig, model: ModelSpec, hardware: HardwareSpec, base_dir: Path | None
) -> CalibratedCost:
    path = resolve_artifact(config.artifact, base_dir)
    artifact = load_artifact(path)
    measured_on = artifact_hardware(artifact)
    if artifact.model.spec.name != model.name:
        warnings.warn(
            f"{path.name}: measured on model {artifact.model.spec.name!r}, "
            f"the scenario runs {model.name!r}",
            UserWarning,
            stacklevel=2,
        )
    if measured_on != hardware.name:
        if config.scale_to_scenario_hardware and measured_on is not None:
            artifact = scale_to_hardware(artifact, hardware_preset(measured_on), hardware)
        else:
            warnings.warn(
                f"{path.name}: measured on {artifact.hardware.device_name} "
                f"({measured_on or 'no preset'}), the scenario's hardware is {hardware.name}"
                + ("" if measured_on is None else "; set cost.scale_to_scenario_hardware"),
                UserWarning,
                stacklevel=2,
            )
    return CalibratedCost.from_artifact(artifact, path.name)


@lru_cache(maxsize=32)
def _load_shipped(path: Path, mtime_ns: int) -> CalibrationArtifact | None:
    """A shipped artifact, parsed once per file version (sweeps and capacity
    searches build a cost model for every simulation); None if unreadable."""
    try:
        return load_artifact(path)
    except ConfigError:
        return None


def _auto(
    model: ModelSpec, hardware: HardwareSpec, parallelism: ParallelismConfig | None
) -> tuple[CostModel, str]:
    """``kind: auto``'s cost model and its choice in one line (what, or why not tables)."""
    # Kernel tables first; None unless some cover this model and GPU, so that
    # without them auto is unchanged.
    kernels, why = kernel_auto_choice(model, hardware, parallelism)
    if kernels is not None:
        return kernels, why
    if parallelism is not None:
        return RooflineCost(model, hardware, parallelism), f"{why}; the roofline"
    for path in shipped_artifacts():
        artifact = _load_shipped(path, path.stat().st_mtime_ns)
        if artifact is None:
            continue
        if artifact.model.spec == model and artifact_hardware(artifact) == hardware.name:
            cost = CalibratedCost.from_artifact(artifact, path.name)
            return cost, f"{why}; calibrated {path.name}"
    return RooflineCost(model, hardware), f"{why}; the roofline"


def auto_choice(
    model: ModelSpec, hardware: HardwareSpec, parallelism: ParallelismConfig | None = None
) -> str:
    """What ``kind: auto`` prices ``model`` on ``hardware`` from, or why not tables (one line)."""
    if parallelism is not None and parallelism.is_single_device:
        parallelism = None
    return _auto(model, hardware, parallelism)[1]


# Attributes by which a cost model wraps another, the one it stands for first: the
# engine's CPU work (gpu), a fit (base), speculative decoding (target, then draft).
_WRAPPED = ("gpu", "base", "target", "draft")


def wrapped_models(cost: object) -> list[CostModel]:
    """The models ``cost`` wraps (none for a bare model), the one it stands for first."""
    # Duck-typed across sim.cost's wrapper classes by the attributes _WRAPPED names.
    return [inner for name in _WRAPPED if (inner := getattr(cost, name, None)) is not None]


def _derived(cost: object) -> list[str]:
    """What of ``cost``'s kernel tables, and of the models it wraps, is derived rather
    than measured (``KernelCost.derived``)."""
    found = list(getattr(cost, "derived", ()))  # duck-typed: only KernelCost has it
    for inner in wrapped_models(cost):
        found += _derived(inner)
    return found


def cost_caveats(
    config: CostConfig,
    cost: CostModel,
    model: ModelSpec,
    hardware: HardwareSpec,
    parallelism: ParallelismConfig | None = None,
) -> list[str]:
    """What a run priced by ``cost`` (built from ``config``) rests on that was not
    measured for it, one line each (summary.json's ``caveats``): kernel-table rows
    derived from another head layout's, and ``kind: auto`` falling back from this
    GPU's kernel tables because they lack a row the model needs. A plain roofline or
    fallback for want of tables says so in its label ("uncalibrated")."""
    out = [f"cost: {phrase}: an estimate" for phrase in dict.fromkeys(_derived(cost))]
    if isinstance(config, AutoCostConfig):
        why = auto_choice(model, hardware, parallelism)
        if why.startswith(NOT_COVERED):
            out.append(f"cost: auto: {why}")
    return out


class LinearCostConfig(Frozen):
    """Coefficients of ``LinearCost``, all in seconds per unit, all >= 0."""

    kind: Literal["linear"] = "linear"
    step_overhead_s: Seconds = 0.0
    per_prefill_seq_s: Seconds = 0.0
    per_prefill_token_s: Seconds = 0.0
    per_attention_pair_s: Seconds = 0.0
    per_decode_seq_s: Seconds = 0.0
    per_context_token_s: Seconds = 0.0

    @model_validator(mode="after")
    def _no_zero_steps(self) -> LinearCostConfig:
        """A non-empty step taking 0 s would stall simulated time: a prefill-only step has
        at least one seq, token and pair, a decode-only one a seq and a context token."""
        if self.step_overhead_s > 0:
            return self
        if max(self.per_prefill_seq_s, self.per_prefill_token_s, self.per_attention_pair_s) <= 0:
            raise ValueError(
                "prefill-only steps would take 0 s: set step_overhead_s or a prefill coefficient"
            )
        if max(self.per_decode_seq_s, self.per_context_token_s) <= 0:
            raise ValueError(
                "decode-only steps would take 0 s: set step_overhead_s or a decode coefficient"
            )
        return self


class RooflineCostConfig(Frozen):
    """Roofline model; ``None`` fields keep the hardware preset's value."""

    kind: Literal["roofline"] = "roofline"
    compute_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    memory_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None


class FittedCostConfig(Frozen):
    """A base model with parameters fitted to measured runs (``servesim calibrate --from-run``).

    ``artifact`` is a path (relative to the scenario's folder) to the JSON
    file the fit wrote; it names its own base model.
    """

    kind: Literal["fitted"] = "fitted"
    artifact: str = Field(min_length=1)


# The kinds a fitted artifact may wrap (a fitted model is not refitted).
_BASE_KINDS = (
    AutoCostConfig
    | CalibratedCostConfig
    | KernelsCostConfig
    | LinearCostConfig
    | RooflineCostConfig
)
BaseCostConfig = Annotated[_BASE_KINDS, Field(discriminator="kind")]
# A new kind goes into _BASE_KINDS (or here) and into build_cost_model.
CostConfig = Annotated[_BASE_KINDS | FittedCostConfig, Field(discriminator="kind")]

_BASE_ADAPTER: TypeAdapter[BaseCostConfig] = TypeAdapter(BaseCostConfig)


def build_cost_model(
    config: CostConfig,
    model: ModelSpec,
    hardware: HardwareSpec,
    base_dir: Path | None = None,
    parallelism: ParallelismConfig | None = None,
    engine_cpu: EngineCpu | None = None,
) -> CostModel:
    """The cost model ``config`` describes, for ``model`` on ``hardware``, with the
    engine's CPU work added where it prices GPU work only (module docstring; None:
    the GPU's alone). A scenario's own ``engine.cpu`` it cannot take is refused."""
    cost = _build(config, model, hardware, base_dir, parallelism)
    if engine_cpu is None:
        return cost
    if isinstance(config, RooflineCostConfig | KernelsCostConfig) or (
        isinstance(config, AutoCostConfig) and not isinstance(cost, CalibratedCost)
    ):
        return EngineCpuCost(cost, engine_cpu)
    if engine_cpu.given:
        raise ConfigError(
            f"engine.cpu: cost {cost.label} times whole steps, the engine's CPU work "
            "included; remove engine.cpu (it adds to roofline and kernel-table costs only)"
        )
    return cost


def _build(
    config: CostConfig,
    model: ModelSpec,
    hardware: HardwareSpec,
    base_dir: Path | None,
    parallelism: ParallelismConfig | None,
) -> CostModel:
    """``build_cost_model`` without the engine's CPU work; ``base_dir`` anchors a
    relative artifact path. Linear coefficients price a whole replica as given."""
    layout = parallelism  # the link too: an expert-parallel group spans GPUs at tp 1
    if parallelism is not None and parallelism.is_single_device:
        parallelism = None
    if isinstance(config, FittedCostConfig):
        path = anchored(config.artifact, base_dir)
        artifact = load_fitted_artifact(path)
        try:  # the base model's cost: block, stored in the artifact
            base_config = _BASE_ADAPTER.validate_python(artifact.base_cost)
        except ValidationError as error:
            raise ConfigError(
                format_error(str(path), error, artifact.base_cost, "base_cost")
            ) from None
        base = build_cost_model(base_config, model, hardware, path.parent, parallelism)
        return FittedCost(base, artifact.parameters, source=path.name)
    if isinstance(config, AutoCostConfig):
        return _auto(model, hardware, parallelism)[0]
    if isinstance(config, CalibratedCostConfig):
        if parallelism is not None:
            raise ConfigError(
                f"cost: calibrated artifacts are measured on one device; layout "
                f"{parallelism.layout} ({parallelism.num_gpus} GPUs) is not supported yet "
                "(use cost.kind roofline or auto)"
            )
        return build_calibrated(config, model, hardware, base_dir)
    if isinstance(config, KernelsCostConfig):
        expert_parallel = config.expert_parallel_size > 1
        return build_kernels(
            config, model, hardware, layout if expert_parallel else parallelism, base_dir
        )
    if isinstance(config, LinearCostConfig):
        return LinearCost(**config.model_dump(exclude={"kind"}))
    if isinstance(config, RooflineCostConfig):
        overrides = {
            field: value
            for field, value in config.model_dump(exclude={"kind"}).items()
            if value is not None
        }
        tuned = hardware.model_copy(update=overrides)
        return RooflineCost(model, tuned, parallelism)
    raise TypeError(f"unknown cost config {type(config).__name__}")  # pragma: no cover
