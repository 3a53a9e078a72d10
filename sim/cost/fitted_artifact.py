"""The fitted-cost artifact: a base cost model, fitted parameters and where they came from.

One JSON file, written by ``servesim calibrate --from-run`` and read by
``cost: {kind: fitted, artifact: PATH}``, in the kernel artifacts' layout
(``format``, ``format_version``, ``provenance``, then the payload)::

    {"format": "servesim-fitted-cost", "format_version": 1,
     "provenance": {...},              # FittedProvenance: command, revision, runs
     "base_cost": {"kind": "kernels", ...},   # the scenario ``cost:`` block fitted on
     "base_cost_label": "...",
     "parameters": {"step_overhead_s": ..., "prefill_multiplier": ...,
                    "decode_multiplier": ...},
     "fit": {...},                     # FitSummary: free parameters, objective
     "errors": {...}}                  # base vs fitted, in sample and cross-validated

A relative path inside ``base_cost`` (an artifact file) is relative to the
artifact's own folder. ``errors`` is a report for people; nothing reads it back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.cost.fitted import FitParameters
from sim.cost.provenance import check_format, read_artifact, validated

FORMAT_NAME: Literal["servesim-fitted-cost"] = "servesim-fitted-cost"
FORMAT_VERSION: Literal[1] = 1
KIND = "fitted cost artifact"
_FROZEN = ConfigDict(extra="forbid", frozen=True)


class FittedRunInfo(BaseModel):
    """One measured run the parameters were fitted to."""

    model_config = _FROZEN

    source: str  # the path given on the command line
    format: str  # e.g. "llmservingsim", "servesim-measure"
    num_requests: int = Field(ge=1)
    sha256: str  # of the per-request table's times and lengths: which data exactly


class FittedProvenance(BaseModel):
    """Who fitted what, when, on which runs."""

    model_config = _FROZEN

    tool: str = "servesim calibrate --from-run"
    tool_version: str
    created_utc: str  # ISO 8601
    command: str
    git_revision: str | None = None
    model: str  # the model preset fitted for
    hardware: str  # the hardware preset fitted for
    runs: list[FittedRunInfo] = Field(min_length=1)


class FittedParameterValues(BaseModel):
    """``FitParameters`` as stored (same fields, same bounds)."""

    model_config = _FROZEN

    step_overhead_s: float = Field(ge=0, allow_inf_nan=False)
    prefill_multiplier: float = Field(gt=0, allow_inf_nan=False)
    decode_multiplier: float = Field(gt=0, allow_inf_nan=False)

    def to_params(self) -> FitParameters:
        return FitParameters(**self.model_dump())


class FitSummary(BaseModel):
    """How the optimiser got there."""

    model_config = _FROZEN

    free_parameters: list[str]
    objective: str
    objective_value: float = Field(ge=0)
    base_objective_value: float = Field(ge=0)
    num_evaluations: int = Field(ge=0)
    optimiser: str


class FittedCostArtifact(BaseModel):
    """Everything one black-box calibration fitted (module docstring)."""

    model_config = _FROZEN

    format: Literal["servesim-fitted-cost"] = FORMAT_NAME
    format_version: Literal[1] = FORMAT_VERSION
    provenance: FittedProvenance
    base_cost: dict[str, Any]
    base_cost_label: str
    parameters: FittedParameterValues
    fit: FitSummary
    errors: dict[str, Any] = Field(default_factory=dict)


def save_fitted_artifact(artifact: FittedCostArtifact, path: str | Path) -> Path:
    """Write ``artifact`` as indented JSON (creating folders); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(artifact.model_dump(mode="json"), indent=1, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_fitted_artifact(path: str | Path) -> FittedCostArtifact:
    """Read and validate an artifact; ConfigError naming the file and the field if bad."""
    path = Path(path)
    data = read_artifact(path, KIND)
    check_format(
        data, path, KIND, FORMAT_NAME, FORMAT_VERSION, "re-run servesim calibrate --from-run"
    )
    return validated(FittedCostArtifact, data, path)


def rebase_paths(base_cost: dict[str, Any], old_dir: Path, new_dir: Path) -> dict[str, Any]:
    """``base_cost`` with relative file paths re-anchored from ``old_dir`` to ``new_dir``.

    Only values that name files (``artifact``, ``architecture``, ``data_dir``
    with a ``/`` or a file suffix) move; shipped names stay as they are.
    """
    out = dict(base_cost)
    for key in ("artifact", "architecture", "data_dir"):
        value = out.get(key)
        if not isinstance(value, str) or Path(value).is_absolute():
            continue
        if "/" not in value and not value.endswith((".json", ".gz", ".yaml")):
            continue
        out[key] = os.path.relpath((old_dir / value).resolve(), new_dir.resolve())
    return out
