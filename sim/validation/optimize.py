"""A small deterministic Nelder–Mead minimiser with box bounds (numpy only, no scipy).

The black-box fit (``sim.validation.fit``) minimises an objective that is a
whole simulation per evaluation: no gradients, small jumps where a batch's
composition changes, a handful of parameters. Nelder–Mead needs only
function values, is deterministic from its starting simplex, and converges
in tens of evaluations for three parameters.

Bounds are kept by projection: every point is clipped into the box before
it is evaluated, so the objective is never asked outside it. Coefficients
are the standard ones (reflection 1, expansion 2, contraction 1/2,
shrink 1/2). It stops when the simplex's values spread less than
``f_tol`` and its vertices less than ``x_tol`` (both absolute), or after
``max_evaluations``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Minimum:
    """The best point found, its value, and what the search cost."""

    x: FloatArray
    value: float
    num_evaluations: int
    converged: bool


def nelder_mead(
    objective: Callable[[FloatArray], float],
    start: Sequence[float] | FloatArray,
    step: Sequence[float] | FloatArray,
    lower: Sequence[float] | FloatArray | None = None,
    upper: Sequence[float] | FloatArray | None = None,
    max_evaluations: int = 200,
    f_tol: float = 1e-8,
    x_tol: float = 1e-6,
) -> Minimum:
    """Minimise ``objective`` from ``start``; ``step`` sizes the first simplex per coordinate."""
    x0 = np.asarray(start, dtype=np.float64)
    steps = np.asarray(step, dtype=np.float64)
    n = x0.size
    if n == 0 or steps.shape != x0.shape or not np.all(steps != 0):
        raise ValueError("start and step must be equally long, non-empty, with non-zero steps")
    if max_evaluations < n + 1:
        raise ValueError(f"max_evaluations must be at least {n + 1} (one simplex)")
    lo = np.full(n, -np.inf) if lower is None else np.asarray(lower, dtype=np.float64)
    hi = np.full(n, np.inf) if upper is None else np.asarray(upper, dtype=np.float64)
    if np.any(lo > hi):
        raise ValueError("every lower bound must be <= its upper bound")
    count = 0

    def f(x: FloatArray) -> float:
        nonlocal count
        count += 1
        value = float(objective(np.clip(x, lo, hi)))
        return value if np.isfinite(value) else np.inf

    start_x = np.clip(x0, lo, hi)
    simplex = [start_x]
    for i in range(n):
        vertex = start_x.copy()
        vertex[i] += steps[i]
        if np.clip(vertex, lo, hi)[i] == start_x[i]:  # stepped onto a bound: step the other way
            vertex[i] = start_x[i] - steps[i]
        simplex.append(np.clip(vertex, lo, hi))
    points = np.array(simplex)
    values = np.array([f(p) for p in points])
    converged = False
    while count < max_evaluations:
        order = np.argsort(values, kind="stable")
        points, values = points[order], values[order]
        spread_x = float(np.max(np.abs(points[1:] - points[0])))
        if values[-1] - values[0] <= f_tol and spread_x <= x_tol:
            converged = True
            break
        centroid = points[:-1].mean(axis=0)
        reflected = np.clip(centroid + (centroid - points[-1]), lo, hi)
        f_reflected = f(reflected)
        if f_reflected < values[0]:
            expanded = np.clip(centroid + 2.0 * (centroid - points[-1]), lo, hi)
            f_expanded = f(expanded)
            if f_expanded < f_reflected:
                points[-1], values[-1] = expanded, f_expanded
            else:
                points[-1], values[-1] = reflected, f_reflected
            continue
        if f_reflected < values[-2]:
            points[-1], values[-1] = reflected, f_reflected
            continue
        # Contract towards the better of the worst point and its reflection.
        outside = f_reflected < values[-1]
        toward = reflected if outside else points[-1]
        contracted = np.clip(centroid + 0.5 * (toward - centroid), lo, hi)
        f_contracted = f(contracted)
        if f_contracted < min(f_reflected, values[-1]):
            points[-1], values[-1] = contracted, f_contracted
            continue
        for i in range(1, n + 1):  # shrink everything towards the best point
            points[i] = np.clip(points[0] + 0.5 * (points[i] - points[0]), lo, hi)
            values[i] = f(points[i])
    best = int(np.argmin(values))
    return Minimum(points[best].copy(), float(values[best]), count, converged)
