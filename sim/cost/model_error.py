"""The model's validated error for the cost source that priced a run.

``model_error.json`` (shipped beside this module) records, per kind of cost
source, the worst TTFT and TPOT p50 error the validation studies measured
(docs/validation.md): kernel tables on one GPU and on several (the public vLLM
runs), a per-model kernel profile (LLMServingSim's), and a CPU calibration (the
SmolLM2 fidelity study). Each entry names the committed results file, the rows
and the command that produced them; ``tests/test_model_error.py`` checks the
figures against those files. The roofline, linear coefficients, a fit to the
user's own runs and a GPU calibration have no validated error, and say so.

The kind is read from the cost model itself (its type, and for kernel tables
whether the artifact is a per-layer profile and how many GPUs the layout
spans), never from its label.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from sim.config import Frozen
from sim.cost.base import CostModel
from sim.cost.calibrated import CalibratedCost
from sim.cost.config import wrapped_models
from sim.cost.fitted import FittedCost
from sim.cost.kernels.cost import KernelCost
from sim.cost.linear import LinearCost
from sim.cost.provenance import read_artifact, validated
from sim.cost.roofline import RooflineCost

MODEL_ERROR_PATH = Path(__file__).with_name("model_error.json")
FORMAT = "servesim-model-error"
FORMAT_VERSION = 1

ValidatedKind = Literal["kernels_one_gpu", "kernels_several_gpus", "profile", "cpu_calibration"]

# Why a cost source has no validated error, by the type that priced the run.
_UNVALIDATED = (
    (RooflineCost, "uncalibrated roofline"),
    (LinearCost, "linear coefficients"),
    (FittedCost, "fitted to measured runs; see its fit's cross-validated error"),
    (CalibratedCost, "calibration not on a CPU, or extrapolated to other hardware"),
)


class ValidatedError(Frozen):
    """One cost source's validated error and where it comes from."""

    description: str = Field(min_length=1)  # the cost source, e.g. "kernel tables, one GPU"
    study: str = Field(min_length=1)  # what the runs were, e.g. "public vLLM runs"
    ttft_p50_error_pct: float = Field(ge=0, allow_inf_nan=False)
    tpot_p50_error_pct: float = Field(ge=0, allow_inf_nan=False)
    rows: tuple[str, ...] = Field(min_length=1)
    results: str = Field(min_length=1)  # the committed results file, from the repository root
    command: str = Field(min_length=1)
    date: str = Field(min_length=1)  # ISO 8601, when the results were produced


class ModelErrorTable(Frozen):
    """``model_error.json``: the validated error per kind of cost source."""

    format: Literal["servesim-model-error"]
    format_version: Literal[1]
    statistic: str
    sources: dict[ValidatedKind, ValidatedError]


@lru_cache(maxsize=1)
def model_error_table() -> ModelErrorTable:
    """The shipped table (read once)."""
    data = read_artifact(MODEL_ERROR_PATH, "model-error table")
    return validated(ModelErrorTable, data, MODEL_ERROR_PATH)


@dataclass(frozen=True)
class ModelError:
    """The validated error of the cost source that priced a run, or why there is none."""

    kind: ValidatedKind | None
    validated: ValidatedError | None
    why_none: str | None = None  # set when ``validated`` is None

    @property
    def headroom(self) -> float:
        """The larger p50 error as a fraction (0.15 for 15 %); 0 without a validated error."""
        v = self.validated
        return 0.0 if v is None else max(v.ttft_p50_error_pct, v.tpot_p50_error_pct) / 100

    @property
    def text(self) -> str:
        """One line for a printout."""
        v = self.validated
        if v is None:
            return f"no validated error ({self.why_none})"
        study = v.study if len(v.rows) > 1 else v.study.replace("runs", "run")
        return (
            f"±{v.ttft_p50_error_pct:.1f} % TTFT p50, ±{v.tpot_p50_error_pct:.1f} % TPOT p50 "
            f"(validated on {len(v.rows)} {study}: {v.description})"
        )

    @property
    def short(self) -> str:
        """A table cell: ``±15.0 / ±2.2 %`` (TTFT / TPOT p50), or ``none validated``."""
        v = self.validated
        if v is None:
            return "none validated"
        return f"±{v.ttft_p50_error_pct:.1f} / ±{v.tpot_p50_error_pct:.1f} %"

    def to_json(self) -> dict[str, Any]:
        v = self.validated
        return {
            "kind": self.kind,
            "ttft_p50_error_pct": None if v is None else v.ttft_p50_error_pct,
            "tpot_p50_error_pct": None if v is None else v.tpot_p50_error_pct,
            "num_runs": None if v is None else len(v.rows),
            "rows": None if v is None else list(v.rows),
            "results": None if v is None else v.results,
            "command": None if v is None else v.command,
            "date": None if v is None else v.date,
            "text": self.text,
        }


def _priced_by(cost: object) -> object:
    """The model that decides ``cost``'s kind: ``cost`` without its wrappers (engine CPU
    work, a validation study's scale, speculative decoding's target); a fit to the
    user's runs is its own kind."""
    if isinstance(cost, FittedCost):
        return cost
    inner = wrapped_models(cost)
    return _priced_by(inner[0]) if inner else cost


def _kind(cost: object) -> ValidatedKind | None:
    if isinstance(cost, KernelCost):
        if cost.artifact.has("layer_ops"):  # a per-layer profile (as KernelCost reads it)
            return "profile"
        return "kernels_one_gpu" if cost.tp * cost.pp * cost.ep == 1 else "kernels_several_gpus"
    if isinstance(cost, CalibratedCost):
        on = cost.timed_on
        return "cpu_calibration" if on is not None and on.device == "cpu" else None
    return None


def model_error_for(cost: CostModel) -> ModelError:
    """The validated error of ``cost``'s kind of source, or why it has none."""
    priced = _priced_by(cost)
    kind = _kind(priced)
    if kind is not None:
        return ModelError(kind, model_error_table().sources[kind])
    why = next((w for t, w in _UNVALIDATED if isinstance(priced, t)), None)
    return ModelError(None, None, why or f"cost model {type(priced).__name__}")
