"""Fit cost curves to timing samples by non-negative least squares.

Features of a step (``sim.cost.calibrated`` has the formula) are its token
count ``T``, prefill sequences, prefill attention pairs, prefill KV reads,
decode sequences and decode context tokens. Two kinds of fit:

- ``linear``: intercept + per-token slope + one coefficient per feature;
- ``piecewise``: the intercept and per-token slope replaced by a
  piecewise-linear curve in ``T`` with knots at token counts of the training
  data (``choose_knots``). On a CPU the dense layers' cost is not smooth in
  the row count (batch 3 can be slower than batch 4), so small ``T`` needs
  its own table; a hat-function basis keeps the whole fit one NNLS problem.

Rows are weighted by 1/measured time, so the fit minimises relative error
(what the reported percentage errors measure). Every coefficient is
non-negative: a step can never get cheaper by adding work. Held-out points
(``split_held_out``) are never seen by the fit. ``fit_engine_overhead`` fits a
measured run's step log: fit it on one run and predict *another*.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.cost.base import SHAPE_FIELDS, CostModel, StepShape
from sim.cost.calibrated import (
    CalibratedCost,
    CalibrationSample,
    FitCoefficients,
    FitError,
    ape,
)
from sim.cost.fitted import ScaledCost

FitKind = Literal["linear", "piecewise"]
Matrix = npt.NDArray[np.float64]


def nnls(a: Matrix, b: npt.NDArray[np.float64]) -> Matrix:
    """argmin ||a x - b||_2 subject to x >= 0: scipy's Lawson-Hanson
    (``scipy.optimize.nnls``, imported here so that start-up does not load scipy).

    Scale columns to comparable norms before calling. RuntimeError if it fails to
    converge (scipy's own error, or its non-finite answer).
    """
    # Imported here: scipy (~0.2 s) loads only for the optimiser that uses it.
    from scipy.optimize import nnls as lawson_hanson

    x, _ = lawson_hanson(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    if not np.isfinite(x).all():
        raise RuntimeError("nnls: no finite solution")
    return np.asarray(x, dtype=np.float64)


def choose_knots(
    num_tokens: Sequence[int],
    *,
    min_support: int = 2,
    dense_below: int = 16,
    knot_ratio: float = 1.3,
) -> list[int]:
    """Knots at token counts observed in at least ``min_support`` samples.

    A knot is a free parameter, so it needs repeated evidence (samples with
    exactly that count) or it fits noise. All supported counts up to
    ``dense_below`` are kept, larger ones only ``knot_ratio`` apart; the
    smallest and largest counts are always knots, so training data never
    needs extrapolation.
    """
    values, counts = np.unique([int(t) for t in num_tokens if t > 0], return_counts=True)
    if values.size == 0:
        return []
    lo, hi = int(values[0]), int(values[-1])
    knots: list[int] = []
    for t, n in zip(values.tolist(), counts.tolist(), strict=True):
        if n < min_support and t not in (lo, hi):
            continue
        if not knots or t <= dense_below or t >= knots[-1] * knot_ratio or t == hi:
            knots.append(t)
    return knots


def choose_hinges(context_tokens: Sequence[int], *, min_support: int = 2) -> list[int]:
    """0, then powers of 2 from 4x the smallest to half the largest context.

    Each hinge lets the per-context-token slope grow beyond it, so it is kept
    only if at least ``min_support`` samples lie beyond it (a slope fitted to
    one point fits its noise).
    """
    positive = sorted(int(c) for c in context_tokens if c > 0)
    hinges = [0]
    if not positive:
        return hinges
    h = 1
    while h <= positive[-1] // 2:
        beyond = sum(c > h for c in positive)
        if h >= 4 * positive[0] and beyond >= min_support:
            hinges.append(h)
        h *= 2
    return hinges


def hinge_basis(context_tokens: npt.NDArray[np.float64], hinges: Sequence[int]) -> Matrix:
    """``max(0, context - h)`` for each hinge ``h``: ``[len(context_tokens), len(hinges)]``."""
    c = np.asarray(context_tokens, dtype=np.float64)[:, None]
    return np.maximum(c - np.asarray(hinges, dtype=np.float64)[None, :], 0.0)


def hat_basis(num_tokens: npt.NDArray[np.float64], knots: Sequence[int]) -> Matrix:
    """``[len(num_tokens), len(knots)]`` hat functions, extended linearly outside the knots.

    Matches ``sim.cost.calibrated.tokens_curve_s`` wherever that curve is not
    floored or clipped (always inside the knot range).
    """
    k = np.asarray(knots, dtype=np.float64)
    t = np.asarray(num_tokens, dtype=np.float64)
    out = np.zeros((t.size, k.size))
    if k.size == 1:
        out[:, 0] = 1.0
        return out
    i = np.clip(np.searchsorted(k, t, side="right") - 1, 0, k.size - 2)
    frac = (t - k[i]) / (k[i + 1] - k[i])
    rows = np.arange(t.size)
    out[rows, i] = 1.0 - frac
    out[rows, i + 1] += frac
    return out


def fit_coefficients(
    samples: Sequence[CalibrationSample], kind: FitKind = "piecewise"
) -> FitCoefficients:
    """NNLS fit of ``kind`` to ``samples`` (all of them: split beforehand).

    Piecewise: token knots come from steps with a prefill (their dense cost
    pins the curve), decode-batch knots from the batch sizes seen.
    """
    if not samples:
        raise ValueError("no samples to fit")
    terms = np.array(
        [
            [
                s.num_prefill_seqs,
                s.prefill_attention_pairs,
                s.prefill_kv_read_tokens,
                s.num_decode_seqs,
            ]
            for s in samples
        ],
        dtype=np.float64,
    )  # the design matrix's per-feature columns, in order (coefficients named *_s)
    tokens = np.array([s.num_prefill_tokens + s.num_decode_seqs for s in samples], float)
    contexts = np.array([s.num_decode_context_tokens for s in samples], float)
    batch = terms[:, 3]
    measured = np.array([s.median_s for s in samples])
    knots: list[int] = []
    batch_knots: list[int] = []
    if kind == "linear":
        hinges = [0]
        columns = [np.ones_like(tokens), tokens, terms, hinge_basis(contexts, hinges)]
    else:
        hinges = choose_hinges([int(c) for c in contexts])
        has_prefill = terms[:, 0] > 0
        knots = choose_knots(
            [int(t) for t in (tokens[has_prefill] if has_prefill.any() else tokens)]
        )
        batch_knots = choose_knots([int(b) for b in batch])
        batch_columns = (
            hat_basis(batch, batch_knots) * (batch > 0)[:, None]
            if batch_knots
            else np.zeros((len(samples), 0))
        )
        # The batch curve replaces per_decode_seq_s (column 3), which it contains.
        columns = [
            hat_basis(tokens, knots),
            batch_columns,
            terms[:, :3],
            hinge_basis(contexts, hinges),
        ]
    design = np.column_stack(columns) / measured[:, None]  # relative-error rows
    norms = np.linalg.norm(design, axis=0)
    used = norms > 0  # a feature absent from the data (e.g. no decode) stays 0
    coef = np.zeros(design.shape[1])
    coef[used] = nnls(design[:, used] / norms[used], np.ones(len(samples))) / norms[used]
    parts = np.split(coef, np.cumsum([c.shape[1] if c.ndim == 2 else 1 for c in columns])[:-1])
    common: dict[str, Any] = {
        "per_prefill_seq_s": float(parts[2][0]),
        "per_prefill_attention_pair_s": float(parts[2][1]),
        "per_prefill_kv_read_token_s": float(parts[2][2]),
        "decode_context_hinges": hinges,
        "per_decode_context_token_s": parts[3].tolist(),
        "floor_s": 0.5 * float(measured.min()),
    }
    if kind == "linear":
        return FitCoefficients(
            kind="linear",
            intercept_s=float(parts[0][0]),
            per_token_s=float(parts[1][0]),
            per_decode_seq_s=float(parts[2][3]),
            **common,
        )
    return FitCoefficients(
        kind="piecewise",
        token_knots=knots,
        token_knot_s=parts[0].tolist(),
        decode_batch_knots=batch_knots,
        decode_batch_knot_s=parts[1].tolist(),
        **common,
    )


def split_held_out(samples: Sequence[CalibrationSample], every: int = 4) -> list[CalibrationSample]:
    """Mark every ``every``-th sample of each section as held out (deterministic).

    Indices ``every // 2, every // 2 + every, ...`` within each section's grid
    order, so the smallest and largest points of a section stay in the fit.
    """
    sizes = Counter(s.section for s in samples)
    seen: dict[str, int] = {}
    out = []
    for s in samples:
        i = seen.get(s.section, 0)
        seen[s.section] = i + 1
        held = i % every == every // 2 and i != sizes[s.section] - 1
        out.append(s.model_copy(update={"held_out": held}))
    return out


def fit_error(fit: FitCoefficients, samples: Sequence[CalibrationSample]) -> FitError:
    """Mean APE on training samples; mean and max APE on held-out ones."""
    cost = CalibratedCost(fit)
    train = [ape(cost.step_s(s.shape), s.median_s) for s in samples if not s.held_out]
    held = [ape(cost.step_s(s.shape), s.median_s) for s in samples if s.held_out]
    return FitError(
        num_train=len(train),
        num_held_out=len(held),
        train_mean_ape=float(np.mean(train)),
        held_out_mean_ape=float(np.mean(held)) if held else None,
        held_out_max_ape=float(np.max(held)) if held else None,
    )


def fit_samples(
    samples: Sequence[CalibrationSample], kind: FitKind = "piecewise"
) -> tuple[FitCoefficients, FitError]:
    """Fit on the samples not held out; report errors on both parts."""
    train = [s for s in samples if not s.held_out]
    fit = fit_coefficients(train, kind)
    return fit, fit_error(fit, samples)


def fit_engine_overhead(
    steps: pd.DataFrame, base: CostModel, source: str = "engine step log"
) -> ScaledCost:
    """Fit ``scale * base + per_step_s + per_seq_s * seqs`` to the busy time of each step."""
    if steps.empty:
        raise ValueError("no steps to fit")
    busy = (steps["done_s"] - steps["start_s"]).to_numpy(dtype=np.float64)
    # A log written before the decode spread was recorded lacks its two columns:
    # its shapes then price as even batches (only a skew fit reads the spread).
    spread = ("max_decode_context_tokens", "min_decode_context_tokens")
    columns = [f for f in SHAPE_FIELDS if f in steps.columns or f not in spread]
    rows = steps[columns].to_numpy(dtype=np.int64)
    shapes = [StepShape(**dict(zip(columns, (int(v) for v in row), strict=True))) for row in rows]
    predicted = np.array([base.step_s(s) for s in shapes])
    seqs = np.array([s.num_prefill_seqs + s.num_decode_seqs for s in shapes], dtype=np.float64)
    design = np.column_stack([predicted, np.ones_like(predicted), seqs]) / busy[:, None]
    norms = np.linalg.norm(design, axis=0)
    norms[norms == 0] = 1.0
    coef = nnls(design / norms, np.ones_like(busy)) / norms
    scale = float(coef[0]) if coef[0] > 0 else 1.0
    return ScaledCost(base, scale, float(coef[1]), float(coef[2]), source=source)
