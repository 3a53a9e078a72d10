"""Schema, loader and saver of calibration artifacts (torch-free).

An artifact is one JSON file per (device, model, dtype), written by
``servesim calibrate``: where and how it was measured (hardware, software,
git revision, date, exact command), the model's spec, every raw timing sample,
the fitted coefficients and the fit's error on held-out grid points. Loading
checks ``schema_version`` first, then the full schema; any problem is a
one-line ``ConfigError`` naming the file and the field.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.cost.base import SHAPE_FIELDS, StepShape
from sim.cost.provenance import read_artifact, validated
from sim.errors import ConfigError
from sim.hardware.specs import ModelSpec

SCHEMA_VERSION: Literal[1] = 1

_FROZEN = ConfigDict(extra="forbid", frozen=True)

NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class HardwareInfo(BaseModel):
    """The machine a calibration ran on."""

    model_config = _FROZEN

    device: Literal["cpu", "cuda"]
    device_name: str  # GPU name, or the CPU model on a CPU run
    device_count: int = Field(ge=1)
    cpu_model: str
    num_threads: int = Field(ge=1)  # torch intra-op threads used while timing
    driver_version: str | None = None
    cuda_version: str | None = None


class ModelInfo(BaseModel):
    """The model timed: its architecture, parameter count and compute dtype."""

    model_config = _FROZEN

    spec: ModelSpec
    num_params: int = Field(gt=0)
    dtype: Literal["fp32", "bf16", "fp16"]


class SoftwareInfo(BaseModel):
    """Versions of what did the timing (``torch`` is None only in tests)."""

    model_config = _FROZEN

    python: str
    numpy: str
    servesim: str
    torch: str | None = None


Section = Literal["prefill", "decode", "mixed"]


class CalibrationSample(BaseModel):
    """One grid point: its step shape, section, and the measured wall times."""

    model_config = _FROZEN

    section: Section
    num_prefill_seqs: NonNegativeInt = 0
    num_prefill_tokens: NonNegativeInt = 0
    prefill_attention_pairs: NonNegativeInt = 0
    prefill_kv_read_tokens: NonNegativeInt = 0
    num_decode_seqs: NonNegativeInt = 0
    num_decode_context_tokens: NonNegativeInt = 0
    times_s: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(min_length=1)
    median_s: float = Field(gt=0, allow_inf_nan=False)
    iqr_s: NonNegativeFloat  # 75th minus 25th percentile of times_s
    held_out: bool = False  # kept out of the fit, used to measure its error

    @classmethod
    def from_times(
        cls, section: Section, shape: StepShape, times_s: list[float]
    ) -> CalibrationSample:
        """A sample of ``shape`` whose median and interquartile range come from ``times_s``."""
        q25, q50, q75 = np.percentile(times_s, [25, 50, 75])
        return cls(
            section=section,
            **{name: getattr(shape, name) for name in SHAPE_FIELDS},
            times_s=list(times_s),
            median_s=float(q50),
            iqr_s=float(q75 - q25),
        )

    @property
    def shape(self) -> StepShape:
        """The StepShape this sample timed."""
        return StepShape(**{name: getattr(self, name) for name in SHAPE_FIELDS})


class FitCoefficients(BaseModel):
    """Coefficients of ``sim.cost.calibrated.CalibratedCost`` (seconds per unit).

    ``kind`` names how they were fitted: ``linear`` (no knots) or
    ``piecewise`` (a piecewise-linear curve in the step's token count, and
    hinges in the decode context).
    """

    model_config = _FROZEN

    kind: Literal["linear", "piecewise"]
    token_knots: list[Annotated[int, Field(gt=0)]] = []
    token_knot_s: list[NonNegativeFloat] = []
    # Added once when a step has decode sequences: piecewise linear in their number.
    decode_batch_knots: list[Annotated[int, Field(gt=0)]] = []
    decode_batch_knot_s: list[NonNegativeFloat] = []
    intercept_s: NonNegativeFloat = 0.0
    per_token_s: NonNegativeFloat = 0.0
    per_prefill_seq_s: NonNegativeFloat = 0.0
    per_prefill_attention_pair_s: NonNegativeFloat = 0.0
    per_prefill_kv_read_token_s: NonNegativeFloat = 0.0
    per_decode_seq_s: NonNegativeFloat = 0.0
    # Decode context cost is convex piecewise linear: each hinge h adds its
    # slope (s/token) for the context beyond h tokens; the first hinge is 0.
    decode_context_hinges: list[NonNegativeInt] = [0]
    per_decode_context_token_s: list[NonNegativeFloat] = [0.0]
    floor_s: float = Field(gt=0, allow_inf_nan=False)  # no non-empty step is faster

    @model_validator(mode="after")
    def _check_knots(self) -> FitCoefficients:
        for name in ("token_knots", "decode_batch_knots"):
            knots: list[int] = getattr(self, name)
            if len(knots) != len(getattr(self, name.replace("knots", "knot_s"))):
                raise ValueError(f"{name} and its values differ in length")
            if any(b <= a for a, b in pairwise(knots)):
                raise ValueError(f"{name} must be strictly increasing")
            if self.kind == "linear" and knots:
                raise ValueError(f"a linear fit has no {name}")
        hinges = self.decode_context_hinges
        if len(hinges) != len(self.per_decode_context_token_s):
            raise ValueError(
                "decode_context_hinges and per_decode_context_token_s differ in length"
            )
        if not hinges or hinges[0] != 0:
            raise ValueError("decode_context_hinges must start at 0")
        if any(b <= a for a, b in pairwise(hinges)):
            raise ValueError("decode_context_hinges must be strictly increasing")
        return self


class FitError(BaseModel):
    """Absolute percentage error of the fit on training and held-out points."""

    model_config = _FROZEN

    num_train: int = Field(ge=1)
    num_held_out: NonNegativeInt
    train_mean_ape: NonNegativeFloat  # fractions: 0.05 means 5 %
    held_out_mean_ape: NonNegativeFloat | None
    held_out_max_ape: NonNegativeFloat | None


class Extrapolation(BaseModel):
    """Set when coefficients were scaled from other hardware instead of measured."""

    model_config = _FROZEN

    from_hardware: str
    to_hardware: str
    method: str


class CalibrationArtifact(BaseModel):
    """Everything one calibration run measured and fitted."""

    model_config = _FROZEN

    schema_version: Literal[1]
    created_utc: str  # ISO 8601
    command: str
    git_revision: str | None
    hardware: HardwareInfo
    model: ModelInfo
    software: SoftwareInfo
    grid: str
    num_warmup: NonNegativeInt
    num_repeats: int = Field(ge=1)
    sampling_temperature: NonNegativeFloat  # 0 = greedy argmax while timing
    total_seconds: NonNegativeFloat  # wall time of the whole timing run
    samples: list[CalibrationSample] = Field(min_length=1)
    fit: FitCoefficients
    fit_error: FitError
    extrapolation: Extrapolation | None = None


def load_artifact(path: str | Path) -> CalibrationArtifact:
    """Read and validate an artifact; ConfigError naming the file and field if bad."""
    path = Path(path)
    data = read_artifact(path, "calibration artifact")
    if "schema_version" not in data:
        raise ConfigError(f"{path}: field 'schema_version' is missing")
    if data["schema_version"] != SCHEMA_VERSION:
        raise ConfigError(
            f"{path}: field 'schema_version' is {data['schema_version']!r}; this servesim "
            f"reads version {SCHEMA_VERSION} (re-run servesim calibrate)"
        )
    return validated(CalibrationArtifact, data, path)


def save_artifact(artifact: CalibrationArtifact, path: str | Path) -> Path:
    """Write ``artifact`` as indented JSON (creating folders); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = artifact.model_dump(mode="json")
    for sample in data["samples"]:
        # Microsecond resolution is far below timing noise and halves the file.
        sample["times_s"] = [round(t, 7) for t in sample["times_s"]]
    text = json.dumps(data, indent=1, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def ape(predicted_s: float, measured_s: float) -> float:
    """Absolute percentage error as a fraction (0.05 is 5 %)."""
    if measured_s <= 0 or not math.isfinite(predicted_s):
        raise ValueError(f"cannot compare {predicted_s} with {measured_s}")
    return abs(predicted_s - measured_s) / measured_s
