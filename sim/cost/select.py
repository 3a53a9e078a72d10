"""Choosing a cost model: a named calibration artifact, or the best one shipped.

``cost: {kind: calibrated, artifact: cpu-tiny-fp32}`` loads a measured curve
(a name means ``calibration/artifacts/<name>.json`` as shipped; anything with
a ``/`` or ``.json`` is a path, relative to the scenario file). ``kind: auto``
(the default) uses measured kernel tables when some cover the scenario's
model and GPU (``sim.cost.kernels.auto``), else a shipped artifact measured
for the scenario's model on its hardware when one exists, and otherwise the
roofline model, labelled as uncalibrated so that nobody mistakes it for a
measurement.
"""

from __future__ import annotations

import importlib.util
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sim.cost.base import CostModel
from sim.cost.calibrated import (
    CalibratedCost,
    CalibrationArtifact,
    artifact_label,
    load_artifact,
    scale_to_hardware,
)
from sim.cost.kernels.auto import kernel_auto
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.specs import HardwareSpec, ModelSpec, hardware_preset

_FROZEN = ConfigDict(extra="forbid", frozen=True)

# GPU name fragments (as torch reports them) -> hardware preset.
_GPU_PRESETS = (("H200", "h200"), ("H100", "h100"), ("A100", "a100-80gb"), ("L4", "l4"))


class CalibratedCostConfig(BaseModel):
    """Measured step costs from a calibration artifact."""

    model_config = _FROZEN

    kind: Literal["calibrated"] = "calibrated"
    artifact: str
    # Extrapolate to the scenario's hardware by roofline ratios (a rough
    # estimate, warned about) instead of refusing a hardware mismatch.
    scale_to_scenario_hardware: bool = False


class AutoCostConfig(BaseModel):
    """A shipped artifact for this model and hardware if any, else the roofline."""

    model_config = _FROZEN

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
        path = Path(name)
        return path if path.is_absolute() or base_dir is None else base_dir / path
    folder = artifacts_dir()
    path = folder / f"{name}.json" if folder is not None else Path(f"{name}.json")
    if not path.exists():
        known = ", ".join(p.stem for p in shipped_artifacts()) or "none"
        raise ConfigError(f"cost.artifact: no shipped artifact {name!r}; shipped: {known}")
    return path


def artifact_hardware(artifact: CalibrationArtifact) -> str | None:
    """The hardware preset an artifact was measured on, when one matches."""
    if artifact.hardware.device == "cpu":
        return "cpu-2core"
    for fragment, preset in _GPU_PRESETS:
        if fragment in artifact.hardware.device_name:
            return preset
    return None


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
    return CalibratedCost(artifact.fit, label=f"{artifact_label(artifact)} [{path.name}]")


class UncalibratedRoofline(RooflineCost):
    """The roofline model, labelled so reports say no measurement backs it."""

    @property
    def label(self) -> str:
        return f"{super().label} (uncalibrated)"


@lru_cache(maxsize=32)
def _load_shipped(path: Path, mtime_ns: int) -> CalibrationArtifact | None:
    """A shipped artifact, parsed once per file version (sweeps and capacity
    searches build a cost model for every simulation); None if unreadable."""
    try:
        return load_artifact(path)
    except ConfigError:
        return None


def build_auto(model: ModelSpec, hardware: HardwareSpec) -> CostModel:
    # Kernel tables first; None unless some cover this model and GPU, so that
    # without them auto is unchanged.
    kernels = kernel_auto(model, hardware)
    if kernels is not None:
        return kernels
    for path in shipped_artifacts():
        artifact = _load_shipped(path, path.stat().st_mtime_ns)
        if artifact is None:
            continue
        if artifact.model.spec == model and artifact_hardware(artifact) == hardware.name:
            label = f"{artifact_label(artifact)} [{path.name}]"
            return CalibratedCost(artifact.fit, label=label)
    return UncalibratedRoofline(model, hardware)
