"""The engine's CPU work and the server's way in, fitted to measured runs: the artifact.

``servesim calibrate --from-run ... --fit-kind engine-cpu`` (``sim.validation.fit``)
fits the coefficients of ``sim.cost.engine_cpu.EngineCpuConfig`` (per step,
per scheduled sequence, per token, and the part no mode overlaps) on top of a
GPU-only base cost model (kernel tables, the roofline: their prices are kept
as they are, not scaled), and the way in per request
(``FrontendConfig.way_in_s_per_request``) where the runs' arrival times are
the clients' send times. ``EngineCpuFitValues`` holds the result;
``EngineCpuArtifact`` stores it, versioned, with its provenance and errors.

A scenario names the artifact with ``engine: {cpu_artifact: PATH}`` (relative
to the scenario's folder, like any artifact): its ``engine.cpu`` becomes the
fitted coefficients (when the base priced GPU work only; a base that times
whole steps has none to fit, and only the way in is) and, when the fit
identified it, its ``frontend.way_in_s_per_request`` the fitted way in
(``sim.scenario``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.cost.engine_cpu import EngineCpuConfig
from sim.cost.fitted import FitSummary, FittedProvenance
from sim.cost.provenance import (
    anchored,
    check_format,
    read_artifact,
    validated,
    write_artifact,
)


@dataclass(frozen=True, slots=True)
class EngineCpuFitValues:
    """One candidate of the fit: the engine's CPU coefficients and, if fitted, the way in
    per request in seconds (None: the scenario's own way in, not fitted)."""

    cpu: EngineCpuConfig
    way_in_s_per_request: float | None = None

    def __post_init__(self) -> None:
        if self.way_in_s_per_request is not None and not self.way_in_s_per_request >= 0.0:
            raise ValueError(f"way_in_s_per_request must be >= 0, got {self.way_in_s_per_request}")


FORMAT_NAME: Literal["servesim-fitted-engine-cpu"] = "servesim-fitted-engine-cpu"
FORMAT_VERSION: Literal[1] = 1
KIND = "fitted engine-CPU artifact"
_FROZEN = ConfigDict(extra="forbid", frozen=True)


class EngineCpuProvenance(FittedProvenance):
    """A multiplier fit's provenance, plus the engine the runs were replayed as."""

    tool: str = "servesim calibrate --from-run --fit-kind engine-cpu"
    vllm_version: str  # the engine version the runs were replayed as
    async_scheduling: bool  # whether the replays overlapped CPU and GPU work


class EngineCpuArtifact(BaseModel):
    """Everything one engine-CPU fit produced (module docstring)."""

    model_config = _FROZEN

    format: Literal["servesim-fitted-engine-cpu"] = FORMAT_NAME
    format_version: Literal[1] = FORMAT_VERSION
    provenance: EngineCpuProvenance
    base_cost: dict[str, Any]  # the GPU-only cost: block the coefficients sit on
    base_cost_label: str
    # None: the base times whole steps (a calibrated or fitted cost), no CPU work fitted.
    cpu: EngineCpuConfig | None = None
    # None: the runs' arrivals were the engine's queue times; no way in was fitted.
    way_in_s_per_request: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    fit: FitSummary
    errors: dict[str, Any] = Field(default_factory=dict)  # a report for people


def save_engine_cpu_artifact(artifact: EngineCpuArtifact, path: str | Path) -> Path:
    """Write ``artifact`` as indented JSON (creating folders); returns the path."""
    return write_artifact(artifact.model_dump(mode="json"), path)


def load_engine_cpu_artifact(path: str | Path, base_dir: Path | None = None) -> EngineCpuArtifact:
    """Read and validate an artifact (a relative ``path`` from ``base_dir``); ConfigError
    naming the file and the field when it is missing, not one, or of another format."""
    where = anchored(path, base_dir)
    data = read_artifact(where, KIND)
    check_format(
        data,
        where,
        KIND,
        FORMAT_NAME,
        FORMAT_VERSION,
        "re-run servesim calibrate --from-run --fit-kind engine-cpu",
    )
    return validated(EngineCpuArtifact, data, where)
