"""A base cost model adjusted by a few numbers fitted to measured runs.

``servesim calibrate --from-run`` fits three numbers to measured per-request
latencies (``sim.validation.fit``); this wrapper applies them to any base
cost model (kernel tables, roofline, a calibrated curve)::

    w       = base(prefill part) / (base(prefill part) + base(decode part))
    step_s  = step_overhead_s
            + base(s) * (prefill_multiplier * w + decode_multiplier * (1 - w))

``w`` is the prefill chunks' share of the step when each part is priced
alone, so mixed steps keep the base's shape (GEMMs over all tokens together
are not the sum of the parts); ``(0, 1, 1)`` is the base model exactly. Why
these three, and the fitted-cost artifact (``FittedCostArtifact``):
docs/validation.md, "Black-box calibration". ``ScaledCost`` is the engine
loop's overhead around a base model (``calibration.fit.fit_engine_overhead``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from sim.config import Frozen
from sim.cost.base import CostModel, StepShape
from sim.cost.provenance import check_format, read_artifact, validated, write_artifact


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class FitParameters:
    """The free parameters: an added per-step time and two multipliers of the base. The
    artifact stores them as they are; the bounds keep a step from taking no time, or less."""

    step_overhead_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    prefill_multiplier: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    decode_multiplier: float = Field(default=1.0, gt=0, allow_inf_nan=False)


def prefill_part(shape: StepShape) -> StepShape:
    """The step's prefill chunks alone."""
    return StepShape(
        num_prefill_seqs=shape.num_prefill_seqs,
        num_prefill_tokens=shape.num_prefill_tokens,
        prefill_attention_pairs=shape.prefill_attention_pairs,
        prefill_kv_read_tokens=shape.prefill_kv_read_tokens,
    )


def decode_part(shape: StepShape) -> StepShape:
    """The step's decode sequences alone."""
    return StepShape(
        num_decode_seqs=shape.num_decode_seqs,
        num_decode_context_tokens=shape.num_decode_context_tokens,
        max_decode_context_tokens=shape.max_decode_context_tokens,
        min_decode_context_tokens=shape.min_decode_context_tokens,
    )


def prefill_share(base: CostModel, shape: StepShape) -> float:
    """``w`` of the module docstring: the prefill chunks' share of the step, 0..1."""
    if shape.num_prefill_tokens == 0:
        return 0.0
    if shape.num_decode_seqs == 0:
        return 1.0
    prefill_s = base.step_s(prefill_part(shape))
    decode_s = base.step_s(decode_part(shape))
    total_s = prefill_s + decode_s
    return prefill_s / total_s if total_s > 0 else 0.5


class FittedCost:
    """``base`` with fitted overhead and prefill / decode multipliers (module docstring)."""

    def __init__(self, base: CostModel, params: FitParameters, source: str = "") -> None:
        self.base, self.params, self.source = base, params, source

    @property
    def label(self) -> str:
        p = self.params
        where = f" [{self.source}]" if self.source else ""
        return (
            f"fitted({self.base.label}; +{p.step_overhead_s * 1e3:.3g} ms/step, "
            f"prefill x{p.prefill_multiplier:.3g}, decode x{p.decode_multiplier:.3g}){where}"
        )

    def step_s(self, shape: StepShape) -> float:
        if shape.is_empty:
            return 0.0
        p = self.params
        w = prefill_share(self.base, shape)
        multiplier = p.prefill_multiplier * w + p.decode_multiplier * (1.0 - w)
        return p.step_overhead_s + self.base.step_s(shape) * multiplier


FORMAT_NAME: Literal["servesim-fitted-cost"] = "servesim-fitted-cost"
FORMAT_VERSION: Literal[1] = 1
KIND = "fitted cost artifact"


class FittedRunInfo(Frozen):
    """One measured run the parameters were fitted to."""

    source: str  # the path given on the command line
    format: str  # e.g. "llmservingsim", "servesim-measure"
    num_requests: int = Field(ge=1)
    sha256: str  # of the per-request table's times and lengths: which data exactly


class FittedProvenance(Frozen):
    """Who fitted what, when, on which runs."""

    tool: str = "servesim calibrate --from-run"
    tool_version: str
    created_utc: str  # ISO 8601
    command: str
    git_revision: str | None = None
    model: str  # the model preset fitted for
    hardware: str  # the hardware preset fitted for
    runs: list[FittedRunInfo] = Field(min_length=1)


class FitSummary(Frozen):
    """How the optimiser got there."""

    free_parameters: list[str]
    objective: str
    objective_value: float = Field(ge=0)
    base_objective_value: float = Field(ge=0)
    num_evaluations: int = Field(ge=0)
    optimiser: str


class FitArtifact(Frozen):
    """What every ``calibrate --from-run`` artifact stores; ``FittedCostArtifact`` and
    ``sim.cost.fitted_cpu.EngineCpuArtifact`` add what they fitted."""

    format: str  # each artifact's own name and version, a Literal
    format_version: int
    provenance: FittedProvenance
    base_cost: dict[str, Any]  # its cost: block; a relative path in it is from this file's folder
    base_cost_label: str
    fit: FitSummary
    errors: dict[str, Any] = Field(default_factory=dict)  # a report for people, never read back


class FittedCostArtifact(FitArtifact):
    """Everything one black-box calibration fitted (module docstring)."""

    format: Literal["servesim-fitted-cost"] = FORMAT_NAME
    format_version: Literal[1] = FORMAT_VERSION
    parameters: FitParameters


def save_fitted_artifact(artifact: FitArtifact, path: str | Path) -> Path:
    """Write ``artifact`` as indented JSON (creating folders); returns the path."""
    return write_artifact(artifact.model_dump(mode="json"), path)


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


class ScaledCost:
    """``base`` scaled by ``factor``, plus a fixed and a per-sequence cost per step::

        step_s = factor * base.step_s(shape) + per_step_s + per_seq_s * num_seqs

    The per-step work of a real engine loop around the forward pass, which
    microbenchmarks of ``forward_step`` alone miss, fitted on the step log of
    another measured run (``source``); without one, a plain scale (a what-if)."""

    def __init__(
        self,
        base: CostModel,
        factor: float,
        per_step_s: float = 0.0,
        per_seq_s: float = 0.0,
        source: str | None = None,
    ) -> None:
        if factor <= 0 or per_step_s < 0 or per_seq_s < 0:
            raise ValueError(f"bad coefficients {factor=}, {per_step_s=}, {per_seq_s=}")
        self.base, self.factor, self.source = base, factor, source
        self.per_step_s, self.per_seq_s = per_step_s, per_seq_s

    @property
    def label(self) -> str:
        if self.source is None:
            return f"{self.base.label} x{self.factor:g}"
        return (
            f"{self.base.label} x{self.factor:.3f} + {1e3 * self.per_step_s:.3f} ms/step"
            f" + {1e3 * self.per_seq_s:.3f} ms/seq (fit on {self.source})"
        )

    def step_s(self, shape: StepShape) -> float:
        if shape.is_empty:
            return 0.0
        # A plain scale adds 0.0 twice, which leaves factor * base exactly as it is.
        num_seqs = shape.num_prefill_seqs + shape.num_decode_seqs
        return self.factor * self.base.step_s(shape) + self.per_step_s + self.per_seq_s * num_seqs
