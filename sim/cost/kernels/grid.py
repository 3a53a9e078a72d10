"""Multilinear interpolation over a measured grid, with stated extrapolation.

A kernel table is a rectangular grid: one sorted axis per input (tokens, KV
length, ...) and a latency in seconds at every grid point. Between grid
points the latency is linear in each coordinate (multilinear over the cell's
corners). Linear, not log-space: a kernel's time is affine in each size
both where it is memory-bound (bytes grow linearly with the size) and where
it is compute-bound (FLOPs do), so straight segments between neighbours are
exact there, and a convex combination of the corners keeps the result
between them (monotone where the table is).

Outside the grid:

- below the first point: the first point's value (a smaller kernel is not
  measurably faster than the smallest one timed);
- above the last point: proportional to the coordinate from the last point,
  ``value(x) = value(x_last) * x / x_last`` (the work grows linearly with any
  one size, and the last point is the best-amortised measurement), with one
  ``warnings.warn`` per grid and axis.

Holes (shapes the tool did not time, e.g. large batch x long context) are
filled when the grid is built, by the same proportional rule along one
chosen axis (``fill_axis``) from the largest measured point before the hole.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from sim.cost.base import FloatArray
from sim.cost.kernels.grid_point import Point, cell, point_function


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
            self._axes_list, self._flat, self._strides, self._warn_point
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
        """Interpolated latency in seconds at one point.

        The same operations in the same order as ``many`` (so the same bits).
        """
        if len(coords) != len(self.axes):
            raise ValueError(f"{self.name}: expected {len(self.axes)} coordinates")
        if self._point is not None:  # the unrolled twin of the loop below (grid_point)
            return self._point(*coords)
        lows, weights, sizes = [], [], []
        scale = 1.0
        for axis_index, (axis, x) in enumerate(zip(self._axes_list, coords, strict=True)):
            last = axis[-1]
            if x > last:
                scale = scale * x / last
                self._warn_above(axis_index, True, np.asarray([x]))
            sizes.append(len(axis))
            if len(axis) == 1:
                lows.append(0)
                weights.append(0.0)
                continue
            low, weight = cell(axis, x)
            lows.append(low)
            weights.append(weight)
        result = 0.0
        flat, strides = self._flat, self._strides
        for corner in range(1 << len(lows)):
            offset = 0
            corner_weight = 1.0
            for d, low in enumerate(lows):
                upper = (corner >> d) & 1
                if upper and sizes[d] == 1:
                    corner_weight = corner_weight * 0.0
                    offset += low * strides[d]
                    continue
                offset += (low + upper) * strides[d]
                corner_weight = corner_weight * (weights[d] if upper else 1.0 - weights[d])
            result = result + corner_weight * flat[offset]
        return result * scale

    def many(self, *coords: npt.ArrayLike) -> FloatArray:
        """Interpolated latencies at many points (coordinates broadcast together)."""
        arrays = np.broadcast_arrays(*(np.asarray(c, dtype=np.float64) for c in coords))
        flat = [a.ravel() for a in arrays]
        return self._lookup(flat).reshape(arrays[0].shape)

    def covers(self, axis: int, value: float) -> bool:
        """Whether ``value`` lies within the measured range of one axis."""
        return bool(self.axes[axis][0] <= value <= self.axes[axis][-1])

    def _lookup(self, coords: list[FloatArray]) -> FloatArray:
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
                self._warn_above(axis_index, bool(np.any(above)), x)
                continue
            clipped = np.clip(x, axis[0], axis[-1])
            low = np.clip(np.searchsorted(axis, clipped, side="right") - 1, 0, len(axis) - 2)
            weight = (clipped - axis[low]) / (axis[low + 1] - axis[low])
            above = x > axis[-1]
            scale = np.where(above, scale * x / axis[-1], scale)
            self._warn_above(axis_index, bool(np.any(above)), x)
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

    def _warn_point(self, axis_index: int, x: float) -> None:
        # From a grid_point closure, two frames deeper than from __call__: the warning
        # names the same line of the caller.
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


def fill_holes(values: FloatArray, axis_values: FloatArray, axis: int) -> FloatArray:
    """Fill NaN entries by proportional extrapolation along ``axis``.

    A hole at coordinate ``x`` takes the value of the largest measured point
    ``x0 < x`` on the same line, times ``x / x0``. A line whose first point is
    missing takes the next measured point's value (no smaller measurement).
    A line with no measurement stays NaN.
    """
    moved = np.moveaxis(values.copy(), axis, -1)
    lines = moved.reshape(-1, moved.shape[-1])
    for line in lines:
        measured = np.flatnonzero(np.isfinite(line))
        if len(measured) == 0:
            continue  # nothing to extrapolate from along this axis
        for j in np.flatnonzero(~np.isfinite(line)):
            before = measured[measured < j]
            if len(before):
                j0 = before[-1]
                line[j] = line[j0] * axis_values[j] / axis_values[j0]
            else:
                line[j] = line[measured[0]]
    filled: FloatArray = np.moveaxis(lines.reshape(moved.shape), -1, axis)
    return filled
