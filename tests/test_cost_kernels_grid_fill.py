"""``Grid.from_points``'s second pass: a line with no measurement along ``fill_axis``
is filled along the next axis, by that axis's own coordinates.

A 2-axis grid never needs the second pass (every value of the other axis has a
row, so every line along ``fill_axis`` holds one): only 3 axes reach it. Values
are chosen so that filling along the wrong axis, or with the wrong axis's
coordinates, or in the wrong order, gives a different number.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sim.cost.kernels.grid import Grid

# Axis coordinates: every axis has its own spacing, so a wrong axis's ratio shows.
A_AXIS, B_AXIS, C_AXIS = (1.0, 2.0), (1.0, 3.0), (1.0, 5.0)


def measured(a: float, b: float, c: float) -> float:
    """A latency that is not proportional along any axis (so every fill rule differs)."""
    return 1.0 + 10.0 * a + 100.0 * b + 1000.0 * c


def grid_without_line(fill_axis: int = 0) -> Grid:
    """Every (a, b, c) except the whole line b = 3, c = 5 (all a)."""
    rows = [
        (a, b, c)
        for a, b, c in itertools.product(A_AXIS, B_AXIS, C_AXIS)
        if not (b == 3.0 and c == 5.0)
    ]
    columns = tuple(np.asarray(col) for col in zip(*rows, strict=True))
    latency = [measured(*row) for row in rows]
    return Grid.from_points("g3", ("a", "b", "c"), columns, latency, fill_axis=fill_axis)


def test_an_empty_line_along_the_fill_axis_is_filled_along_the_next_axis() -> None:
    grid = grid_without_line(fill_axis=0)
    assert grid.values.shape == (2, 2, 2)
    for i, a in enumerate(A_AXIS):
        # Along a: nothing at (b=3, c=5). Along b (the next axis): the largest measured
        # b below 3 is b=1 at c=5, scaled by 3 / 1. (Along c it would be
        # measured(a, 3, 1) * 5, along b with a's coordinates measured(a, 1, 5) * 2.)
        expected = measured(a, 1.0, 5.0) * 3.0 / 1.0
        assert grid.values[i, 1, 1] == pytest.approx(expected, rel=1e-12)
        assert grid(a, 3.0, 5.0) == pytest.approx(expected, rel=1e-12)
    # Measured points are kept as they are.
    for (i, a), (j, b), (k, c) in itertools.product(
        enumerate(A_AXIS), enumerate(B_AXIS), enumerate(C_AXIS)
    ):
        if (j, k) != (1, 1):
            assert grid.values[i, j, k] == measured(a, b, c)


def test_with_fill_axis_two_the_other_axes_are_tried_in_order() -> None:
    # fill_axis=2 (c): the line along c at (a, b=3) holds c=1, so the hole is filled
    # along c first: measured(a, 3, 1) * 5 / 1.
    grid = grid_without_line(fill_axis=2)
    for i, a in enumerate(A_AXIS):
        assert grid.values[i, 1, 1] == pytest.approx(measured(a, 3.0, 1.0) * 5.0, rel=1e-12)


def test_a_hole_on_a_measured_line_is_filled_along_the_fill_axis_first() -> None:
    # fill_axis=1 (b): the line along b at (a, c=5) holds b=1: filled along b, not c.
    grid = grid_without_line(fill_axis=1)
    for i, a in enumerate(A_AXIS):
        assert grid.values[i, 1, 1] == pytest.approx(measured(a, 1.0, 5.0) * 3.0, rel=1e-12)
