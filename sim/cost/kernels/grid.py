"""Multilinear interpolation over a measured grid, with stated extrapolation.

A kernel table is a rectangular grid: one sorted axis per input and a latency
in seconds at every point. Between points the latency is linear in each
coordinate; below the first point it is the first point's value; past the last
it grows in proportion to the coordinate, with one warning per grid and axis.
Holes are filled when the grid is built: by that proportional rule along
``fill_axis`` (``Grid.from_points``), or linearly between and past timed points
(``interpolate_holes``, ``extrapolate_holes``). Why linear: ``docs/kernels.md``.

One point fast: a grid of 1 to 4 axes is looked up by ``price.grid_point`` or
``price.grid_point_4d`` (1 and 3 axes padded to 2 and 4), ~5x (4 axes: ~50x)
cheaper than the general loop over 2^axes corners, with the same operations in
the same order, so the same bits (``tests/test_cost_kernels_grid_point.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray
from sim.cost.kernels.price import (
    DECODE_GRID,
    EXTRAPOLATES,
    LAYOUT_SIZE,
    MAX_PAST,
    MIXED_GRID,
    NUM_PAST,
    PAST,
    PAST_X,
    grid_2d,
    grid_4d,
    grid_point,
    grid_point_4d,
    put_grid,
)

Point = Callable[..., float]


# The padding axis of a 1- or 3-axis grid in the 2- or 4-axis lookup: read at 0.0
# (its coordinate's default, weight 0 above), never past its last point, stride 0.
_PAD = [0.0, 1.0]


class Grid:
    """Latencies (seconds) on a rectangular grid, interpolated multilinearly."""

    __slots__ = (
        "_notes",
        "_point",
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
        # One point: ``price``'s lookup over plain lists (numpy's per-call overhead is
        # ~10x the arithmetic for a single point); 5+ axes take the general loop.
        self._point: Point | None = None
        if len(self.axes) <= 4:
            g = DECODE_GRID if len(self.axes) <= 2 else MIXED_GRID
            tables: list[float] = [0.0] * MAX_PAST  # the notes' coordinates
            layout = [0] * LAYOUT_SIZE
            layout[EXTRAPOLATES] = 1
            self.put(tables, layout, g)
            self._notes = (tables, layout)
            if len(self.axes) <= 2:
                self._point = partial(grid_point, tables, layout, grid_2d(layout, g))
            else:
                self._point = partial(grid_point_4d, tables, layout, grid_4d(layout, g))

    def put(self, tables: list[float], layout: list[int], g: int) -> None:
        """This grid appended to ``tables`` and described at ``layout[g:]`` (a 2-D or
        4-D slot of ``price``), a 1- or 3-axis grid padded with a stride-0 axis."""
        num_padded = (2 if len(self.axes) <= 2 else 4) - len(self.axes)
        strides = [int(s) // self.values.itemsize for s in self.values.strides]
        axes = [axis.tolist() for axis in self.axes] + [_PAD] * num_padded
        put_grid(tables, layout, g, axes, self.values.ravel().tolist(), strides + [0] * num_padded)

    @staticmethod
    def from_points(
        name: str,
        axis_names: Sequence[str],
        points: Sequence[npt.ArrayLike],
        latency_s: npt.ArrayLike,
        fill_axis: int = 0,
    ) -> Grid:
        """Grid from scattered rows (one array per axis, one latency per row):
        duplicate points keep their mean; holes are filled along ``fill_axis``."""
        coords = [np.asarray(p, dtype=np.float64) for p in points]
        axes = [np.unique(c) for c in coords]
        values = mean_on_grid(axes, coords, latency_s)
        # Fill along fill_axis first; lines with no measurement at all are
        # then filled along the other axes in turn.
        for axis in [fill_axis, *(a for a in range(len(axes)) if a != fill_axis)]:
            values = fill_holes(values, axes[axis], axis)
        return Grid(name, axis_names, axes, values)

    def __call__(self, *coords: float) -> float:
        """Interpolated latency in seconds at one point (``many``'s bits)."""
        if self._point is not None and len(coords) == len(self.axes):
            seconds = self._point(*coords)
            tables, layout = self._notes
            if layout[NUM_PAST]:
                warn_notes(tables, layout, {layout[PAST]: self})
            return seconds
        # stacklevel 5: a warning names the caller's line, as from the lookup above.
        point = [np.asarray([x], dtype=np.float64) for x in coords]
        return float(self._lookup(point, stacklevel=5)[0])

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
        """Warn (once per axis) of a lookup at ``x`` past axis ``axis_index``'s last point."""
        # Two frames deeper than _lookup's warning: the same caller's line.
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


def warn_notes(tables: list[float], layout: list[int], grids: Mapping[int, Grid]) -> None:
    """Warn of each lookup past a grid's last point that ``price.past`` noted, by its
    grid (``grids``, by slot); the notes cleared."""
    for k in range(layout[NUM_PAST]):
        g, axis_index = layout[PAST + 2 * k], layout[PAST + 2 * k + 1]
        grids[g].warn_past(axis_index, tables[layout[PAST_X] + k])
    layout[NUM_PAST] = 0


def mean_on_grid(
    axes: Sequence[FloatArray], coords: Sequence[FloatArray], latency_s: npt.ArrayLike
) -> FloatArray:
    """The mean latency of the rows at each point of the grid of ``axes`` (each row's
    coordinates on them), NaN where no row is."""
    sums = np.zeros(tuple(len(a) for a in axes))
    counts = np.zeros_like(sums)
    index = tuple(np.searchsorted(a, c) for a, c in zip(axes, coords, strict=True))
    np.add.at(sums, index, np.asarray(latency_s, dtype=np.float64))
    np.add.at(counts, index, 1.0)
    with np.errstate(invalid="ignore"):
        means: FloatArray = sums / counts
    return means


def _each_line(values: FloatArray, axis: int, fill: Callable[[FloatArray], None]) -> FloatArray:
    """A copy of ``values`` with ``fill`` applied in place to each line along ``axis``."""
    moved = np.moveaxis(values.copy(), axis, -1)
    lines = moved.reshape(-1, moved.shape[-1])
    for line in lines:
        fill(line)
    filled: FloatArray = np.moveaxis(lines.reshape(moved.shape), -1, axis)
    return filled


def fill_holes(values: FloatArray, axis_values: FloatArray, axis: int) -> FloatArray:
    """Fill NaN entries along ``axis``: a hole at ``x`` takes the value at the largest
    measured ``x0 < x`` on its line times ``x / x0``, or (none smaller) the next
    measured value; a line with no measurement stays NaN."""

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
