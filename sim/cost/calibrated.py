"""Calibrated cost model: step times fitted to measurements of a real model.

The artifact is one JSON file per (device, model, dtype), written by
``servesim calibrate``: where and how it was measured, the model's spec, every
raw timing sample, the fitted coefficients and the fit's error on held-out
grid points. Loading checks ``schema_version`` first, then the full schema;
any problem is a one-line ``ConfigError`` naming the file and the field.

The curve is, for a step of shape ``s`` with
``T = s.num_prefill_tokens + s.num_decode_seqs`` tokens::

    step_s = max(floor_s,
                 intercept_s + per_token_s * T + tokens_curve(T)          [s]
                 + per_prefill_seq_s * num_prefill_seqs
                 + per_prefill_attention_pair_s * prefill_attention_pairs
                 + per_prefill_kv_read_token_s * prefill_kv_read_tokens
                 + per_decode_seq_s * num_decode_seqs
                 + batch_curve(num_decode_seqs)      (only if num_decode_seqs > 0)
                 + sum over hinges h_k of per_decode_context_token_s[k]
                       * max(0, num_decode_context_tokens - h_k))

``tokens_curve`` is piecewise linear through ``(token_knots, token_knot_s)``
(the first segment extended below the first knot, floored at 0; above the last
knot the last slope if rising, else flat): the dense layers, whose cost on a
CPU is not smooth in the number of tokens. ``batch_curve``, the same through
``(decode_batch_knots, decode_batch_knot_s)``, is a decode batch's extra cost
by its size (LM head rows, sampling, the KV gather). The hinges (``h_0 = 0``)
make the decode context cost convex: on a CPU attention's cost per token rises
once the KV a step gathers outgrows the caches. A ``linear`` fit has no knots
and the one hinge at 0.

Torch-free: the simulator imports it without the calibration extras.
``scale_to_hardware`` extrapolates an artifact to other hardware.
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_right
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from sim.config import Frozen
from sim.cost.base import SHAPE_FIELDS, StepShape
from sim.cost.provenance import read_artifact, validated, write_artifact
from sim.errors import ConfigError
from sim.hardware.specs import HardwareSpec, ModelSpec

SCHEMA_VERSION: Literal[1] = 1

NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class HardwareInfo(Frozen):
    """The machine a calibration ran on."""

    device: Literal["cpu", "cuda"]
    device_name: str  # GPU name, or the CPU model on a CPU run
    device_count: int = Field(ge=1)
    cpu_model: str
    num_threads: int = Field(ge=1)  # torch intra-op threads used while timing
    driver_version: str | None = None
    cuda_version: str | None = None


class ModelInfo(Frozen):
    """The model timed: its architecture, parameter count and compute dtype."""

    spec: ModelSpec
    num_params: int = Field(gt=0)
    dtype: Literal["fp32", "bf16", "fp16"]


class SoftwareInfo(Frozen):
    """Versions of what did the timing (``torch`` is None only in tests)."""

    python: str
    numpy: str
    servesim: str
    torch: str | None = None


Section = Literal["prefill", "decode", "mixed"]


class CalibrationSample(Frozen):
    """One grid point: its step shape, section, and the measured wall times."""

    section: Section
    num_prefill_seqs: NonNegativeInt = 0
    num_prefill_tokens: NonNegativeInt = 0
    prefill_attention_pairs: NonNegativeInt = 0
    prefill_kv_read_tokens: NonNegativeInt = 0
    num_decode_seqs: NonNegativeInt = 0
    num_decode_context_tokens: NonNegativeInt = 0
    # The longest and shortest decode context (0: a sample written before they were
    # recorded; this model reads only the sums).
    max_decode_context_tokens: NonNegativeInt = 0
    min_decode_context_tokens: NonNegativeInt = 0
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
            **shape._asdict(),
            times_s=list(times_s),
            median_s=float(q50),
            iqr_s=float(q75 - q25),
        )

    @property
    def shape(self) -> StepShape:
        """The StepShape this sample timed."""
        return StepShape(**self.model_dump(include=set(SHAPE_FIELDS)))


class FitCoefficients(Frozen):
    """Coefficients of ``CalibratedCost`` (seconds per unit; ``kind``: how they were
    fitted, the module docstring's ``linear`` fit or with its curves, ``piecewise``)."""

    kind: Literal["linear", "piecewise"]
    token_knots: list[Annotated[int, Field(gt=0)]] = Field(default=[])
    token_knot_s: list[NonNegativeFloat] = Field(default=[])
    # Added once when a step has decode sequences: piecewise linear in their number.
    decode_batch_knots: list[Annotated[int, Field(gt=0)]] = Field(default=[])
    decode_batch_knot_s: list[NonNegativeFloat] = Field(default=[])
    intercept_s: NonNegativeFloat = 0.0
    per_token_s: NonNegativeFloat = 0.0
    per_prefill_seq_s: NonNegativeFloat = 0.0
    per_prefill_attention_pair_s: NonNegativeFloat = 0.0
    per_prefill_kv_read_token_s: NonNegativeFloat = 0.0
    per_decode_seq_s: NonNegativeFloat = 0.0
    # Decode context cost is convex piecewise linear: each hinge h adds its
    # slope (s/token) for the context beyond h tokens; the first hinge is 0.
    decode_context_hinges: list[NonNegativeInt] = Field(default=[0])
    per_decode_context_token_s: list[NonNegativeFloat] = Field(default=[0.0])
    floor_s: float = Field(gt=0, allow_inf_nan=False)  # no non-empty step is faster

    @model_validator(mode="after")
    def _check_knots(self) -> FitCoefficients:
        for name, knots, values in (
            ("token_knots", self.token_knots, self.token_knot_s),
            ("decode_batch_knots", self.decode_batch_knots, self.decode_batch_knot_s),
            ("decode_context_hinges", self.decode_context_hinges, self.per_decode_context_token_s),
        ):
            if len(knots) != len(values):
                raise ValueError(f"{name} and its values differ in length")
            if any(b <= a for a, b in pairwise(knots)):
                raise ValueError(f"{name} must be strictly increasing")
        if self.kind == "linear" and (self.token_knots or self.decode_batch_knots):
            raise ValueError("a linear fit has no token_knots or decode_batch_knots")
        if not self.decode_context_hinges or self.decode_context_hinges[0] != 0:
            raise ValueError("decode_context_hinges must start at 0")
        return self


class FitError(Frozen):
    """Absolute percentage error of the fit on training and held-out points."""

    num_train: int = Field(ge=1)
    num_held_out: NonNegativeInt
    train_mean_ape: NonNegativeFloat  # fractions: 0.05 means 5 %
    held_out_mean_ape: NonNegativeFloat | None
    held_out_max_ape: NonNegativeFloat | None


class Extrapolation(Frozen):
    """Set when coefficients were scaled from other hardware instead of measured."""

    from_hardware: str
    to_hardware: str
    method: str


class CalibrationArtifact(Frozen):
    """Everything one calibration run measured and fitted."""

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
    data = artifact.model_dump(mode="json")
    for sample in data["samples"]:
        # Microsecond resolution is far below timing noise and halves the file.
        sample["times_s"] = [round(t, 7) for t in sample["times_s"]]
    return write_artifact(data, path)


def ape(predicted_s: float, measured_s: float) -> float:
    """Absolute percentage error as a fraction (0.05 is 5 %)."""
    if measured_s <= 0 or not math.isfinite(predicted_s):
        raise ValueError(f"cannot compare {predicted_s} with {measured_s}")
    return abs(predicted_s - measured_s) / measured_s


def tokens_curve_s(knots: list[int], knot_s: list[float], num_tokens: float) -> float:
    """Piecewise-linear curve at ``num_tokens`` (see module docstring)."""
    if not knots:
        return 0.0
    if len(knots) == 1:
        return knot_s[0]
    i = bisect_right(knots, num_tokens)
    if i == len(knots):
        slope = (knot_s[-1] - knot_s[-2]) / (knots[-1] - knots[-2])
        return knot_s[-1] + max(slope, 0.0) * (num_tokens - knots[-1])
    i = max(i, 1)  # below the first knot: the first segment, extended
    t0, t1 = knots[i - 1], knots[i]
    value = knot_s[i - 1] + (knot_s[i] - knot_s[i - 1]) * (num_tokens - t0) / (t1 - t0)
    return max(value, 0.0)


class CalibratedCost:
    """The CostModel of a fitted artifact (formula in the module docstring)."""

    def __init__(
        self, fit: FitCoefficients, label: str = "calibrated", timed_on: HardwareInfo | None = None
    ) -> None:
        self.label = label
        # The machine the artifact's samples were timed on (None: unknown or extrapolated
        # to other hardware): servesim validate warns when a run was measured elsewhere.
        self.timed_on = timed_on
        # Plain floats and lists: attribute access on them is the fastest path.
        self._knots = list(fit.token_knots)
        self._knot_s = list(fit.token_knot_s)
        self._batch_knots = list(fit.decode_batch_knots)
        self._batch_knot_s = list(fit.decode_batch_knot_s)
        self._intercept_s = fit.intercept_s
        self._per_token_s = fit.per_token_s
        self._per_prefill_seq_s = fit.per_prefill_seq_s
        self._per_pair_s = fit.per_prefill_attention_pair_s
        self._per_kv_read_s = fit.per_prefill_kv_read_token_s
        self._per_decode_seq_s = fit.per_decode_seq_s
        self._hinges = [float(h) for h in fit.decode_context_hinges]
        self._per_context_s = list(fit.per_decode_context_token_s)
        self._floor_s = fit.floor_s

    @classmethod
    def from_artifact(cls, artifact: CalibrationArtifact, file_name: str = "") -> CalibratedCost:
        """The cost model of ``artifact``, labelled ``calibrated:<model>-<dtype>@<device>``
        (marked when extrapolated to other hardware) and `` [file_name]`` if given."""
        model = f"{artifact.model.spec.name}-{artifact.model.dtype}"
        if artifact.extrapolation is not None:
            label = f"calibrated:{model}@{artifact.extrapolation.to_hardware} (extrapolated)"
        else:
            label = f"calibrated:{model}@{artifact.hardware.device_name}"
        label += f" [{file_name}]" if file_name else ""
        # Where the samples were timed; None once scaled to other hardware.
        timed_on = artifact.hardware if artifact.extrapolation is None else None
        return cls(artifact.fit, label=label, timed_on=timed_on)

    def step_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        t = self._intercept_s + self._per_token_s * tokens
        t += tokens_curve_s(self._knots, self._knot_s, tokens)
        t += self._per_prefill_seq_s * shape.num_prefill_seqs
        t += self._per_pair_s * shape.prefill_attention_pairs
        t += self._per_kv_read_s * shape.prefill_kv_read_tokens
        num_seqs = shape.num_decode_seqs
        if num_seqs:  # the per-sequence term and the batch curve
            curve = tokens_curve_s(self._batch_knots, self._batch_knot_s, num_seqs)
            t += self._per_decode_seq_s * num_seqs + curve
        context = float(shape.num_decode_context_tokens)
        for hinge, slope in zip(self._hinges, self._per_context_s, strict=True):
            beyond = context - hinge
            t += slope * (beyond if beyond > 0.0 else 0.0)
        return max(self._floor_s, t)

    def __repr__(self) -> str:
        return f"CalibratedCost({self.label!r})"


def _roofline_s(model: ModelSpec, hw: HardwareSpec, num_tokens: float) -> float:
    """Dense-layer time of a step of ``num_tokens``: max(FLOPs, weight bytes)."""
    compute = num_tokens * model.dense_flops_per_token / hw.effective_flops_per_s
    memory = model.weight_bytes / hw.effective_bytes_per_s
    return max(compute, memory)


def scale_to_hardware(
    artifact: CalibrationArtifact, from_hw: HardwareSpec, to_hw: HardwareSpec
) -> CalibrationArtifact:
    """Extrapolate a fit measured on ``from_hw`` to ``to_hw`` by roofline ratios.

    A rough estimate, labelled as such (and a ``UserWarning``):

    - dense layers (``tokens_curve`` knots, ``intercept_s + per_token_s * T``
      evaluated at its ends): times the ratio of the roofline dense time
      ``max(T * FLOPs/token / FLOP/s, weight bytes / B/s)`` on the two machines
      at that token count, so small steps scale with bandwidth and large ones
      with compute;
    - prefill attention pairs: compute ratio; KV reads (prefill and decode
      context): bandwidth ratio;
    - decode batch curve: bandwidth ratio (LM-head rows and KV gathers);
    - per-sequence costs and the floor: unchanged (host-side bookkeeping).
    """
    warnings.warn(
        f"calibration of {artifact.model.spec.name} on {from_hw.name} extrapolated to "
        f"{to_hw.name} by roofline ratios; measure on {to_hw.name} for real numbers",
        UserWarning,
        stacklevel=2,
    )
    model = artifact.model.spec
    fit = artifact.fit
    compute_ratio = from_hw.effective_flops_per_s / to_hw.effective_flops_per_s
    memory_ratio = from_hw.effective_bytes_per_s / to_hw.effective_bytes_per_s

    def dense_ratio(num_tokens: float) -> float:
        return _roofline_s(model, to_hw, num_tokens) / _roofline_s(model, from_hw, num_tokens)

    knot_s = [s * dense_ratio(k) for k, s in zip(fit.token_knots, fit.token_knot_s, strict=True)]
    # The batch curve holds LM-head rows and the KV gather: memory-bound work.
    batch_s = [s * memory_ratio for s in fit.decode_batch_knot_s]
    # The linear part: intercept at T=1 and slope from T=1 to the largest sample.
    t_max = float(
        max((s.num_prefill_tokens + s.num_decode_seqs for s in artifact.samples), default=1)
    )
    at_1 = (fit.intercept_s + fit.per_token_s) * dense_ratio(1.0)
    at_max = (fit.intercept_s + fit.per_token_s * t_max) * dense_ratio(t_max)
    per_token_s = max((at_max - at_1) / (t_max - 1.0), 0.0) if t_max > 1 else 0.0
    scaled = fit.model_copy(
        update={
            "token_knot_s": knot_s,
            "decode_batch_knot_s": batch_s,
            "intercept_s": max(at_1 - per_token_s, 0.0),
            "per_token_s": per_token_s,
            "per_prefill_attention_pair_s": fit.per_prefill_attention_pair_s * compute_ratio,
            "per_prefill_kv_read_token_s": fit.per_prefill_kv_read_token_s * memory_ratio,
            "per_decode_context_token_s": [
                s * memory_ratio for s in fit.per_decode_context_token_s
            ],
        }
    )
    note = (
        "dense terms scaled by the roofline dense-time ratio at each token count, "
        "attention pairs by the compute ratio, KV reads by the bandwidth ratio"
    )
    return artifact.model_copy(
        update={
            "fit": scaled,
            "extrapolation": Extrapolation(
                from_hardware=from_hw.name, to_hardware=to_hw.name, method=note
            ),
        }
    )
