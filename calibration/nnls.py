"""Non-negative least squares (Lawson-Hanson), numpy only: scipy is not a dependency."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float64]


def nnls(a: Matrix, b: npt.NDArray[np.float64], max_iter: int | None = None) -> Matrix:
    """argmin ||a x - b||_2 subject to x >= 0 (Lawson-Hanson active set).

    Scale columns to comparable norms before calling: the tolerance is
    relative to ``a``'s size. Raises RuntimeError if it fails to converge.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    m, n = a.shape
    max_iter = 5 * n + 10 if max_iter is None else max_iter
    tol = 10 * np.finfo(np.float64).eps * np.linalg.norm(a, 1) * max(m, n)
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    # A variable whose entry makes no progress (degenerate data, e.g. duplicate
    # columns) is skipped until x changes, so the outer loop cannot cycle.
    skipped = np.zeros(n, dtype=bool)
    for _ in range(max_iter):
        w = a.T @ (b - a @ x)
        candidates = ~passive & ~skipped & (w > tol)
        if not candidates.any():
            return x
        j = int(np.argmax(np.where(candidates, w, -np.inf)))
        passive[j] = True
        first = True
        while True:
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (s[passive] > tol).all():
                break
            if first and s[j] <= tol:
                passive[j] = False
                skipped[j] = True
                s = x
                break
            first = False
            # Step from x toward s until the first passive variable hits zero.
            blocking = passive & (s <= tol)
            xb, sb = x[blocking], s[blocking]
            alpha = float(np.min(xb / (xb - sb))) if (xb > 0).all() else 0.0
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
        if s is not x:
            skipped[:] = False
            x = np.where(passive, s, 0.0)
    raise RuntimeError(f"nnls did not converge in {max_iter} iterations")
