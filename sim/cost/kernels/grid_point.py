"""One point of a ``Grid``, fast: unrolled twins of ``Grid.__call__`` for 1, 2 and 3 axes.

A kernel-table run prices tens of thousands of steps, each a handful of grid
lookups (GEMMs, attention, LM head), one point at a time; ``Grid.__call__``'s
general loop over 2^axes corners and the axes within each corner cost ~5x the
arithmetic. These closures do the same operations in the same order (corner
weights multiplied axis by axis from 1.0, corners summed from 0.0 in
``Grid.__call__``'s order, the scale past the grid applied last), so they
give the same bits; ``tests/test_cost_kernels_grid_point.py`` holds them to
it. Grids with a one-point axis keep the general loop.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence

# warn(axis_index, x): x is past the last point of that axis.
Warn = Callable[[int, float], None]
Point = Callable[..., float]


def cell(axis: list[float], x: float) -> tuple[int, float]:
    """``x``'s cell on ``axis`` (clipped to it): lower corner and the upper corner's weight."""
    first, last = axis[0], axis[-1]
    clipped = last if x > last else (first if x < first else x)
    top = len(axis) - 2
    low = bisect_right(axis, clipped) - 1
    low = 0 if low < 0 else (top if low > top else low)
    return low, (clipped - axis[low]) / (axis[low + 1] - axis[low])


def point_function(
    axes: Sequence[list[float]], flat: list[float], strides: Sequence[int], warn: Warn
) -> Point | None:
    """The unrolled lookup for this grid, or None (4+ axes, or an axis of one point)."""
    if any(len(axis) < 2 for axis in axes):
        return None
    if len(axes) == 1:
        return _point_1d(axes[0], flat, strides[0], warn)
    if len(axes) == 2:
        return _point_2d(axes[0], axes[1], flat, strides, warn)
    if len(axes) == 3:
        return _point_3d(axes, flat, strides, warn)
    return None


def _point_1d(axis: list[float], flat: list[float], stride: int, warn: Warn) -> Point:
    last = axis[-1]

    def point(x: float) -> float:
        scale = 1.0
        if x > last:
            scale = scale * x / last
            warn(0, x)
        low, w = cell(axis, x)
        o = low * stride
        result = 0.0 + (1.0 - w) * flat[o]
        result = result + w * flat[o + stride]
        return result * scale

    return point


def _point_2d(
    ax0: list[float], ax1: list[float], flat: list[float], strides: Sequence[int], warn: Warn
) -> Point:
    last0, last1 = ax0[-1], ax1[-1]
    s0, s1 = strides

    def point(x0: float, x1: float) -> float:
        scale = 1.0
        if x0 > last0:
            scale = scale * x0 / last0
            warn(0, x0)
        low0, w0 = cell(ax0, x0)
        if x1 > last1:
            scale = scale * x1 / last1
            warn(1, x1)
        low1, w1 = cell(ax1, x1)
        a0, a1 = 1.0 - w0, 1.0 - w1
        o = low0 * s0 + low1 * s1
        result = 0.0 + a0 * a1 * flat[o]
        result = result + w0 * a1 * flat[o + s0]
        result = result + a0 * w1 * flat[o + s1]
        result = result + w0 * w1 * flat[o + s0 + s1]
        return result * scale

    return point


def _point_3d(
    axes: Sequence[list[float]], flat: list[float], strides: Sequence[int], warn: Warn
) -> Point:
    ax0, ax1, ax2 = axes
    last0, last1, last2 = ax0[-1], ax1[-1], ax2[-1]
    s0, s1, s2 = strides

    def point(x0: float, x1: float, x2: float) -> float:
        scale = 1.0
        if x0 > last0:
            scale = scale * x0 / last0
            warn(0, x0)
        low0, w0 = cell(ax0, x0)
        if x1 > last1:
            scale = scale * x1 / last1
            warn(1, x1)
        low1, w1 = cell(ax1, x1)
        if x2 > last2:
            scale = scale * x2 / last2
            warn(2, x2)
        low2, w2 = cell(ax2, x2)
        a0, a1, a2 = 1.0 - w0, 1.0 - w1, 1.0 - w2
        o = low0 * s0 + low1 * s1 + low2 * s2
        # Corner c takes axis d's upper point where bit d of c is set.
        result = 0.0 + a0 * a1 * a2 * flat[o]
        result = result + w0 * a1 * a2 * flat[o + s0]
        result = result + a0 * w1 * a2 * flat[o + s1]
        result = result + w0 * w1 * a2 * flat[o + s0 + s1]
        result = result + a0 * a1 * w2 * flat[o + s2]
        result = result + w0 * a1 * w2 * flat[o + s0 + s2]
        result = result + a0 * w1 * w2 * flat[o + s1 + s2]
        result = result + w0 * w1 * w2 * flat[o + s0 + s1 + s2]
        return result * scale

    return point
