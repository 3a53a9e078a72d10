"""The black-box fit's minimiser: scipy's Nelder–Mead, box-bounded, from a stepped simplex.

The fit's objective (``sim.validation.fit``) is a whole simulation per evaluation: no
gradients, small jumps where a batch's composition changes, a handful of parameters.
Nelder–Mead needs only function values, is deterministic from its starting simplex,
and converges in tens of evaluations for three parameters. This module adds what both
fits share: the first simplex (``first_simplex``), the evaluation budget, and
non-finite values counted as worse than any finite one. scipy keeps the bounds by
projection (every point is clipped into the box before it is evaluated) and stops when
the simplex's values spread less than 1e-8 (``fatol``) and its vertices less than 1e-6
(``xatol``, both absolute), or after ``max_evaluations``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.config import FloatArray


@dataclass(frozen=True)
class Minimum:
    """The best point found, its value, and what the search cost."""

    x: FloatArray
    value: float
    num_evaluations: int
    converged: bool


def first_simplex(
    start: FloatArray, step: FloatArray, lower: FloatArray, upper: FloatArray
) -> FloatArray:
    """``start`` (clipped into the box) and one vertex per coordinate moved by its step,
    the other way where the step is cut to nothing by a bound; shape (n + 1, n)."""
    start_x = np.clip(start, lower, upper)
    simplex = [start_x]
    for i in range(start_x.size):
        vertex = start_x.copy()
        vertex[i] += step[i]
        if np.clip(vertex, lower, upper)[i] == start_x[i]:
            vertex[i] = start_x[i] - step[i]
        simplex.append(np.clip(vertex, lower, upper))
    return np.array(simplex)


def nelder_mead(
    objective: Callable[[FloatArray], float],
    start: Sequence[float] | FloatArray,
    step: Sequence[float] | FloatArray,
    lower: Sequence[float] | FloatArray | None = None,
    upper: Sequence[float] | FloatArray | None = None,
    max_evaluations: int = 200,
) -> Minimum:
    """Minimise ``objective`` from ``start``; ``step`` sizes the first simplex per coordinate."""
    from scipy.optimize import Bounds, minimize  # ~0.2 s: only when a fit runs

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

    def f(x: FloatArray) -> float:
        value = float(objective(x))
        return value if np.isfinite(value) else np.inf

    simplex = first_simplex(x0, steps, lo, hi)
    found = minimize(
        f,
        simplex[0],
        method="Nelder-Mead",
        bounds=Bounds(lo, hi),
        options={
            "initial_simplex": simplex,
            "maxfev": max_evaluations,
            "maxiter": max_evaluations,  # every iteration evaluates at least once
            "xatol": 1e-6,
            "fatol": 1e-8,
        },
    )
    # status 0: converged; 1: the budget ran out first.
    return Minimum(
        np.asarray(found.x, dtype=np.float64), float(found.fun), int(found.nfev), found.status == 0
    )
