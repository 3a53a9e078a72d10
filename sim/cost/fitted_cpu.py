"""The engine's CPU work and the server's way in, fitted to measured runs: the artifact.

``servesim calibrate --from-run ... --fit-kind engine-cpu`` (``sim.validation.fit``)
fits the coefficients of ``sim.cost.engine_cpu.EngineCpuConfig`` on top of a
GPU-only base cost, and the way in per request where the runs' arrivals are
the clients' send times; a scenario names the artifact with ``engine:
{cpu_artifact: PATH}``. What is fitted and what is refused: docs/validation.md,
"The engine's CPU work and the way in".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from sim.config import Frozen, anchored
from sim.cost.engine_cpu import EngineCpuConfig
from sim.cost.fitted import FitArtifact, FittedProvenance
from sim.cost.provenance import check_format, read_artifact, validated


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
FORMAT_VERSION: Literal[2] = 2
KIND = "fitted engine-CPU artifact"


class EngineCpuProvenance(FittedProvenance):
    """A multiplier fit's provenance, plus the engine the runs were replayed as."""

    tool: str = "servesim calibrate --from-run --fit-kind engine-cpu"
    vllm_version: str  # the engine version the runs were replayed as
    async_scheduling: bool  # whether the replays overlapped CPU and GPU work


class CoefficientInterval(Frozen):
    """One fitted coefficient, in seconds, with its standard error and 95 % interval
    (None: not defined at the fit; ``sim.validation.identify`` says how they are taken)."""

    name: str
    value_s: float = Field(ge=0, allow_inf_nan=False)
    std_error_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    low_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    high_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    degrees_of_freedom: int


class EngineCpuArtifact(FitArtifact):
    """Everything one engine-CPU fit produced (module docstring); its ``base_cost`` is
    the GPU-only cost the coefficients sit on. Saved by ``sim.cost.fitted.save_fitted_artifact``."""

    format: Literal["servesim-fitted-engine-cpu"] = FORMAT_NAME
    format_version: Literal[2] = FORMAT_VERSION
    provenance: EngineCpuProvenance
    # None: the base times whole steps (a calibrated or fitted cost), no CPU work fitted.
    cpu: EngineCpuConfig | None = None
    # None: the runs' arrivals were the engine's queue times; no way in was fitted.
    way_in_s_per_request: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # The fitted coefficients' intervals (empty: a format-1 artifact, which had none).
    coefficients: list[CoefficientInterval] = Field(default_factory=list)
    interval_method: str | None = None
    # Where the coefficients not fitted come from (the run's engine.cpu label).
    held_source: str | None = None


def load_engine_cpu_artifact(path: str | Path, base_dir: Path | None = None) -> EngineCpuArtifact:
    """Read and validate an artifact (a relative ``path`` from ``base_dir``); ConfigError
    naming the file and the field when it is missing, not one, or of another format."""
    where = anchored(path, base_dir)
    data = from_format_1(read_artifact(where, KIND))
    check_format(
        data,
        where,
        KIND,
        FORMAT_NAME,
        FORMAT_VERSION,
        "re-run servesim calibrate --from-run --fit-kind engine-cpu",
    )
    return validated(EngineCpuArtifact, data, where)


def from_format_1(data: dict[str, Any]) -> dict[str, Any]:
    """A format-1 artifact as format 2, its price kept: its one ``per_seq_s`` becomes
    ``scheduler_per_seq_s`` with ``sampling_per_seq_s`` 0 (``x + 0.0`` is ``x``), and it
    has no intervals. Any other document as it is."""
    version = data.get("format_version")
    if data.get("format") != FORMAT_NAME or version != 1 or isinstance(version, bool):
        return data  # a true is not 1: check_format refuses it
    cpu = data.get("cpu")
    if isinstance(cpu, dict) and "per_seq_s" in cpu:
        parts = {k: v for k, v in cpu.items() if k != "per_seq_s"}
        cpu = {**parts, "scheduler_per_seq_s": cpu["per_seq_s"], "sampling_per_seq_s": 0.0}
    return {**data, "format_version": FORMAT_VERSION, "cpu": cpu}
