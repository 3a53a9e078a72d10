"""Multilinear interpolation over a measured grid, with stated extrapolation.

A kernel table is a rectangular grid: one sorted axis per input and a latency
in seconds at every point. Between points the latency is linear in each
coordinate; below the first point it is the first point's value; past the
last it grows in proportion to the coordinate, with one warning per grid and
axis; holes are filled when the grid is built, by the same proportional rule
along ``fill_axis`` (``Grid.from_points``), or by ``interpolate_holes`` and
``extrapolate_holes`` (linear between and past timed points) for a table
builder that knows its lattice. Why linear and not log-space: ``docs/kernels.md``.

One point fast (``point_function``): unrolled twins of ``Grid.__call__`` for 2
and 4 axes (4: the mixed-attention lattice; 1 and 3 axes padded to them). A
kernel-table run prices tens of thousands of steps, each a handful of grid
lookups, one point at a time; the general loop over 2^axes corners costs ~5x
the arithmetic (4 axes: ~50x). The twins do the same operations in the same
order (corner weights multiplied axis by axis from 1.0, corners summed from 0.0
in ``Grid._lookup``'s order, the scale past the grid applied last), so they give
the same bits (``tests/test_cost_kernels_grid_point.py``). Grids with a
one-point axis keep the general loop.
"""

from __future__ import annotations

import warnings
from bisect import bisect_right
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from sim.cost.base import FloatArray
from sim.cost.kernels.price import corners_4d

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
    """The unrolled lookup for this grid, or None (5+ axes, or an axis of one point).

    A 1- or 3-axis grid takes the 2- or 4-axis lookup with one more axis, of two
    points at stride 0, read at its first point (weight 1 below, 0 above): its
    terms are ``x * 1.0`` and ``+ 0.0 * v``, so the same bits as its own loop.
    """
    if any(len(axis) < 2 for axis in axes) or len(axes) > 4:
        return None
    if len(axes) <= 2:
        padded = [*axes, *[_PAD] * (2 - len(axes))]
        return _point_2d(padded[0], padded[1], flat, [*strides, 0], warn)
    return _point_4d([*axes, *[_PAD] * (4 - len(axes))], flat, [*strides, 0], warn)


# The padding axis: read at 0.0 (``x`` defaults to it), never past its last point.
_PAD = [0.0, 1.0]


def _point_2d(
    ax0: list[float], ax1: list[float], flat: list[float], strides: Sequence[int], warn: Warn
) -> Point:
    last0, last1 = ax0[-1], ax1[-1]
    s0, s1 = strides[0], strides[1]

    def point(x0: float, x1: float = 0.0) -> float:
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


def _point_4d(
    axes: Sequence[list[float]], flat: list[float], strides: Sequence[int], warn: Warn
) -> Point:
    ax0, ax1, ax2, ax3 = axes
    last0, last1, last2, last3 = ax0[-1], ax1[-1], ax2[-1], ax3[-1]
    s0, s1, s2, s3 = strides[0], strides[1], strides[2], strides[3]

    def point(x0: float, x1: float, x2: float, x3: float = 0.0) -> float:
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
        if x3 > last3:
            scale = scale * x3 / last3
            warn(3, x3)
        low3, w3 = cell(ax3, x3)
        o = low0 * s0 + low1 * s1 + low2 * s2 + low3 * s3
        return corners_4d(flat, o, s0, s1, s2, s3, w0, w1, w2, w3) * scale

    return point


class Grid:
    """Latencies (seconds) on a rectangular grid, interpolated multilinearly."""

    __slots__ = (
        "_axes_list",
        "_flat",
        "_point",
        "_strides",
        "_warned",
        "axes",
        "axis_names",
        "name",
        "values",
    )

    def __init__(
        self,
        name: str,
        axis_names: Sequence[str],
        axes: Sequence[npt.ArrayLike],
        values: npt.ArrayLike,
    ) -> None:
        self.name = name
        self.axis_names = tuple(axis_names)
        self.axes = tuple(np.asarray(a, dtype=np.float64) for a in axes)
        self.values: FloatArray = np.asarray(values, dtype=np.float64)
        if self.values.shape != tuple(len(a) for a in self.axes):
            raise ValueError(f"{name}: values shape {self.values.shape} does not match axes")
        for axis_name, axis in zip(self.axis_names, self.axes, strict=True):
            if len(axis) == 0 or np.any(np.diff(axis) <= 0):
                raise ValueError(f"{name}: axis {axis_name} must be non-empty and increasing")
        if np.any(~np.isfinite(self.values)):
            raise ValueError(f"{name}: grid has holes; fill them first (fill_holes)")
        self._warned: set[str] = set()
        # Plain-Python copies for the scalar path (numpy's per-call overhead
        # is ~10x the arithmetic for a single point).
        self._axes_list = [a.tolist() for a in self.axes]
        self._flat: list[float] = self.values.ravel().tolist()
        self._strides = [int(s) // self.values.itemsize for s in self.values.strides]
        self._point: Point | None = point_function(
            self._axes_list, self._flat, self._strides, self.warn_past
        )

    @staticmethod
    def from_points(
        name: str,
        axis_names: Sequence[str],
        points: Sequence[npt.ArrayLike],
        latency_s: npt.ArrayLike,
        fill_axis: int = 0,
    ) -> Grid:
        """Grid from scattered rows (one array per axis, one latency per row).

        Duplicate points keep their mean; holes are filled along ``fill_axis``
        (see the module docstring).
        """
        coords = [np.asarray(p, dtype=np.float64) for p in points]
        axes = [np.unique(c) for c in coords]
        sums = np.zeros(tuple(len(a) for a in axes))
        counts = np.zeros_like(sums)
        index = tuple(np.searchsorted(a, c) for a, c in zip(axes, coords, strict=True))
        np.add.at(sums, index, np.asarray(latency_s, dtype=np.float64))
        np.add.at(counts, index, 1.0)
        with np.errstate(invalid="ignore"):
            values = sums / counts
        # Fill along fill_axis first; lines with no measurement at all are
        # then filled along the other axes in turn.
        for axis in [fill_axis, *(a for a in range(len(axes)) if a != fill_axis)]:
            values = fill_holes(values, axes[axis], axis)
        return Grid(name, axis_names, axes, values)

    def __call__(self, *coords: float) -> float:
        """Interpolated latency in seconds at one point: ``many``'s operations (so its bits),
        unrolled when ``point_function`` has a twin for this grid."""
        if self._point is not None and len(coords) == len(self.axes):
            return self._point(*coords)
        # stacklevel 5: a warning names the caller's line, as from a point_function twin.
        point = [np.asarray([x], dtype=np.float64) for x in coords]
        return float(self._lookup(point, stacklevel=5)[0])

    @property
    def point_lists(self) -> tuple[list[list[float]], list[float], list[int]] | None:
        """What the unrolled lookup reads (axes, values in row-major order, strides
        in values), for a twin elsewhere that must give its bits; None where this
        grid keeps the general loop (``point_function``)."""
        if self._point is None:
            return None
        return self._axes_list, self._flat, self._strides

    def many(self, *coords: npt.ArrayLike) -> FloatArray:
        """Interpolated latencies at many points (coordinates broadcast together)."""
        arrays = np.broadcast_arrays(*(np.asarray(c, dtype=np.float64) for c in coords))
        flat = [a.ravel() for a in arrays]
        return self._lookup(flat).reshape(arrays[0].shape)

    def _lookup(self, coords: list[FloatArray], stacklevel: int = 4) -> FloatArray:
        if len(coords) != len(self.axes):
            raise ValueError(f"{self.name}: expected {len(self.axes)} coordinates")
        size = len(coords[0])
        # Per axis: lower corner index, weight of the upper corner, and the
        # proportional factor applied past the last point (1 inside).
        lows, weights = [], []
        scale = np.ones(size)
        for axis_index, (axis, x) in enumerate(zip(self.axes, coords, strict=True)):
            if len(axis) == 1:
                lows.append(np.zeros(size, dtype=np.intp))
                weights.append(np.zeros(size))
                above = x > axis[0]
                scale = np.where(above, scale * x / axis[0], scale)
                self._warn_above(axis_index, bool(np.any(above)), x, stacklevel)
                continue
            clipped = np.clip(x, axis[0], axis[-1])
            low = np.clip(np.searchsorted(axis, clipped, side="right") - 1, 0, len(axis) - 2)
            weight = (clipped - axis[low]) / (axis[low + 1] - axis[low])
            above = x > axis[-1]
            scale = np.where(above, scale * x / axis[-1], scale)
            self._warn_above(axis_index, bool(np.any(above)), x, stacklevel)
            lows.append(low)
            weights.append(weight)
        result = np.zeros(size)
        num_axes = len(self.axes)
        for corner in range(1 << num_axes):
            index = []
            corner_weight = np.ones(size)
            for d in range(num_axes):
                upper = (corner >> d) & 1
                if upper and len(self.axes[d]) == 1:
                    corner_weight = corner_weight * 0.0
                    index.append(lows[d])
                    continue
                index.append(lows[d] + upper)
                corner_weight = corner_weight * (weights[d] if upper else 1.0 - weights[d])
            result = result + corner_weight * self.values[tuple(index)]
        out: FloatArray = result * scale
        return out

    def warn_past(self, axis_index: int, x: float) -> None:
        """Warn (once per axis) that a lookup at ``x`` is past axis ``axis_index``'s last
        point: from a point_function closure, or for ``KernelCost``'s flat lookups."""
        # From a closure, two frames deeper than from __call__: the same caller's line.
        self._warn_above(axis_index, True, np.asarray([x]), stacklevel=6)

    def _warn_above(self, axis_index: int, above: bool, x: FloatArray, stacklevel: int = 4) -> None:
        axis_name = self.axis_names[axis_index]
        if above and axis_name not in self._warned:
            self._warned.add(axis_name)
            warnings.warn(
                f"kernel table {self.name}: {axis_name} {float(np.max(x)):g} is past the "
                f"measured {self.axes[axis_index][-1]:g}; extrapolating proportionally",
                UserWarning,
                stacklevel=stacklevel,
            )


def _each_line(values: FloatArray, axis: int, fill: Callable[[FloatArray], None]) -> FloatArray:
    """A copy of ``values`` with ``fill`` applied in place to each line along ``axis``."""
    moved = np.moveaxis(values.copy(), axis, -1)
    lines = moved.reshape(-1, moved.shape[-1])
    for line in lines:
        fill(line)
    filled: FloatArray = np.moveaxis(lines.reshape(moved.shape), -1, axis)
    return filled


def fill_holes(values: FloatArray, axis_values: FloatArray, axis: int) -> FloatArray:
    """Fill NaN entries by proportional extrapolation along ``axis``.

    A hole at coordinate ``x`` takes the value of the largest measured point
    ``x0 < x`` on the same line, times ``x / x0``. A line whose first point is
    missing takes the next measured point's value (no smaller measurement).
    A line with no measurement stays NaN.
    """

    def fill(line: FloatArray) -> None:
        measured = np.flatnonzero(np.isfinite(line))
        if len(measured) == 0:
            return  # nothing to extrapolate from along this axis
        for j in np.flatnonzero(~np.isfinite(line)):
            before = measured[measured < j]
            if len(before):
                j0 = before[-1]
                line[j] = line[j0] * axis_values[j] / axis_values[j0]
            else:
                line[j] = line[measured[0]]

    return _each_line(values, axis, fill)


def interpolate_holes(values: FloatArray, axis_values: FloatArray, axis: int) -> FloatArray:
    """Fill NaN entries that lie between two measured points of their line along ``axis``,
    linearly in the coordinate (the grid's own rule between points); others stay NaN."""

    def fill(line: FloatArray) -> None:
        measured = np.flatnonzero(np.isfinite(line))
        if len(measured) < 2 or len(measured) == len(line):
            return
        inside = np.arange(measured[0], measured[-1] + 1)
        holes = inside[~np.isfinite(line[inside])]
        line[holes] = np.interp(axis_values[holes], axis_values[measured], line[measured])

    return _each_line(values, axis, fill)


def extrapolate_holes(values: FloatArray, axis_values: FloatArray, axis: int) -> FloatArray:
    """Fill NaN entries past the last measured point of their line along ``axis`` by the
    line through its last two measured points (time is affine in a size), never below
    the last value; a line with one measured point extrapolates proportionally
    (``fill_holes``)."""

    def fill(line: FloatArray) -> None:
        measured = np.flatnonzero(np.isfinite(line))
        if len(measured) < 2:
            return
        j1, j0 = measured[-1], measured[-2]
        slope = (line[j1] - line[j0]) / (axis_values[j1] - axis_values[j0])
        for j in range(j1 + 1, len(line)):
            if not np.isfinite(line[j]):
                line[j] = line[j1] + max(slope, 0.0) * (axis_values[j] - axis_values[j1])

    return fill_holes(_each_line(values, axis, fill), axis_values, axis)
