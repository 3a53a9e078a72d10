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
    max_iter = 3 * n if max_iter is None else max_iter
    tol = 10 * np.finfo(np.float64).eps * np.linalg.norm(a, 1) * max(m, n)
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or not (w[~passive] > tol).any():
            return x
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (s[passive] > 0).all():
                break
            # Step from x toward s until the first passive variable hits zero.
            blocking = passive & (s <= 0)
            alpha = np.min(x[blocking] / (x[blocking] - s[blocking]))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = s
        w = a.T @ (b - a @ x)
    raise RuntimeError(f"nnls did not converge in {max_iter} iterations")
