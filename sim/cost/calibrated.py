"""Calibrated cost model: step times fitted to measurements of a real model.

The artifact (JSON, written by ``servesim calibrate``; schema in
``sim.cost.calibration_artifact``) holds the raw timing samples and fitted
coefficients. The curve is, for a step of shape ``s`` with
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
(the first segment extended below the first knot, floored at 0; above the
last knot the last slope if rising, else flat); it
carries the dense layers, whose cost is not smooth in the number of tokens
on a CPU (matmul kernels change with the row count). ``batch_curve``, the
same through ``(decode_batch_knots, decode_batch_knot_s)``, is the extra cost
of a decode batch of that size (LM head rows, sampling, the KV gather), a
per-batch-size table where the measured cost is not smooth in batch size. The hinges (``h_0 = 0``)
make the decode context cost convex: on a CPU the per-token cost of attention
rises once the KV a step gathers outgrows the caches. A ``linear`` fit has no
knots and the one hinge at 0. Evaluation is a few float operations plus one
bisection.

This module is torch-free: the simulator imports it without the calibration
extras. ``scale_to_hardware`` extrapolates an artifact to other hardware.
"""

from __future__ import annotations

import warnings
from bisect import bisect_right
from pathlib import Path

import numpy as np

from sim.cost.base import FloatArray, StepShape, no_decode_run
from sim.cost.calibration_artifact import (
    CalibrationArtifact,
    Extrapolation,
    FitCoefficients,
    load_artifact,
)
from sim.hardware.specs import HardwareSpec, ModelSpec


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

    __slots__ = (
        "_batch_knot_s",
        "_batch_knots",
        "_floor_s",
        "_hinges",
        "_intercept_s",
        "_knot_s",
        "_knots",
        "_label",
        "_per_context_s",
        "_per_decode_seq_s",
        "_per_kv_read_s",
        "_per_pair_s",
        "_per_prefill_seq_s",
        "_per_token_s",
    )

    def __init__(self, fit: FitCoefficients, label: str = "calibrated") -> None:
        self._label = label
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
    def from_artifact(cls, artifact: CalibrationArtifact) -> CalibratedCost:
        """Cost model of ``artifact``, labelled with its model, dtype and device."""
        return cls(artifact.fit, label=artifact_label(artifact))

    @property
    def label(self) -> str:
        return self._label

    def _base_s(self, num_tokens: int, prefill_seqs: int, pairs: int, kv_read: int) -> float:
        """Every term but the decode context (shared by both entry points)."""
        t = self._intercept_s + self._per_token_s * num_tokens
        t += tokens_curve_s(self._knots, self._knot_s, num_tokens)
        t += self._per_prefill_seq_s * prefill_seqs
        t += self._per_pair_s * pairs
        t += self._per_kv_read_s * kv_read
        return t

    def _decode_batch_s(self, num_seqs: int) -> float:
        """Per-sequence term plus the batch curve (0 without decode sequences)."""
        if num_seqs == 0:
            return 0.0
        curve = tokens_curve_s(self._batch_knots, self._batch_knot_s, num_seqs)
        return self._per_decode_seq_s * num_seqs + curve

    def step_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        t = self._base_s(
            tokens,
            shape.num_prefill_seqs,
            shape.prefill_attention_pairs,
            shape.prefill_kv_read_tokens,
        )
        t += self._decode_batch_s(shape.num_decode_seqs)
        context = float(shape.num_decode_context_tokens)
        for hinge, slope in zip(self._hinges, self._per_context_s, strict=True):
            beyond = context - hinge
            t += slope * (beyond if beyond > 0.0 else 0.0)
        return max(self._floor_s, t)

    def decode_steps_s(self, num_seqs: int, context_tokens: int, num_steps: int) -> FloatArray:
        if (zeros := no_decode_run(num_seqs, context_tokens, num_steps)) is not None:
            return zeros
        # Same operations in the same order as step_s, so results match exactly.
        base = self._base_s(num_seqs, 0, 0, 0) + self._decode_batch_s(num_seqs)
        contexts = context_tokens + np.arange(num_steps, dtype=np.float64) * num_seqs
        out: FloatArray = np.full(num_steps, base)
        for hinge, slope in zip(self._hinges, self._per_context_s, strict=True):
            out += slope * np.maximum(contexts - hinge, 0.0)
        return np.maximum(out, self._floor_s)

    def __repr__(self) -> str:
        return f"CalibratedCost({self._label!r})"


def load_calibrated_cost(path: str | Path) -> CalibratedCost:
    """The cost model of the artifact at ``path`` (ConfigError if it is bad)."""
    return CalibratedCost.from_artifact(load_artifact(path))


def artifact_label(artifact: CalibrationArtifact) -> str:
    """``calibrated:<model>-<dtype>@<device>``, marked when extrapolated."""
    model = f"{artifact.model.spec.name}-{artifact.model.dtype}"
    if artifact.extrapolation is not None:
        return f"calibrated:{model}@{artifact.extrapolation.to_hardware} (extrapolated)"
    return f"calibrated:{model}@{artifact.hardware.device_name}"


def _roofline_s(model: ModelSpec, hw: HardwareSpec, num_tokens: float) -> float:
    """Dense-layer time of a step of ``num_tokens``: max(FLOPs, weight bytes)."""
    compute = (
        num_tokens * model.dense_flops_per_token / (hw.peak_flops_per_s * hw.compute_efficiency)
    )
    memory = model.weight_bytes / (hw.memory_bandwidth_bytes_per_s * hw.memory_efficiency)
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
    compute_ratio = (from_hw.peak_flops_per_s * from_hw.compute_efficiency) / (
        to_hw.peak_flops_per_s * to_hw.compute_efficiency
    )
    memory_ratio = (from_hw.memory_bandwidth_bytes_per_s * from_hw.memory_efficiency) / (
        to_hw.memory_bandwidth_bytes_per_s * to_hw.memory_efficiency
    )

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
