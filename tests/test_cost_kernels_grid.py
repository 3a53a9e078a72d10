"""Grid interpolation of kernel tables: exact at points, monotone between, stated extrapolation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.kernels.grid import Grid, fill_holes

AXIS_M = [1.0, 2.0, 4.0, 16.0, 64.0]
AXIS_N = [128.0, 1024.0, 4096.0]


def table_value(m: float, n: float) -> float:
    # Increasing in both coordinates, not linear: interpolation is not trivially exact.
    return 1e-5 + 1e-7 * m * np.sqrt(n) + 1e-9 * n


def make_grid() -> Grid:
    values = [[table_value(m, n) for n in AXIS_N] for m in AXIS_M]
    return Grid("test", ("m", "n"), (AXIS_M, AXIS_N), values)


def test_grid_returns_table_values_at_grid_points() -> None:
    grid = make_grid()
    for m in AXIS_M:
        for n in AXIS_N:
            assert grid(m, n) == pytest.approx(table_value(m, n), rel=1e-12)


def test_grid_is_linear_between_neighbours() -> None:
    grid = make_grid()
    mid = grid(3.0, 128.0)
    assert mid == pytest.approx((table_value(2, 128) + table_value(4, 128)) / 2, rel=1e-12)
    # Bilinear in the cell: the centre is the mean of the four corners.
    centre = grid(3.0, 576.0)
    corners = [table_value(m, n) for m in (2, 4) for n in (128, 1024)]
    assert centre == pytest.approx(sum(corners) / 4, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    m1=st.floats(1, 64),
    m2=st.floats(1, 64),
    n=st.floats(128, 4096),
)
def test_grid_is_monotone_where_the_table_is(m1: float, m2: float, n: float) -> None:
    grid = make_grid()
    low, high = sorted((m1, m2))
    assert grid(low, n) <= grid(high, n) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(m=st.floats(1, 64), n=st.floats(128, 4096))
def test_grid_stays_within_its_cell_corners(m: float, n: float) -> None:
    grid = make_grid()
    i = min(int(np.searchsorted(AXIS_M, m, side="right")) - 1, len(AXIS_M) - 2)
    j = min(int(np.searchsorted(AXIS_N, n, side="right")) - 1, len(AXIS_N) - 2)
    corners = [table_value(AXIS_M[a], AXIS_N[b]) for a in (i, i + 1) for b in (j, j + 1)]
    value = grid(m, n)
    assert min(corners) * (1 - 1e-12) <= value <= max(corners) * (1 + 1e-12)


def test_many_gives_the_same_bits_as_one_point_at_a_time() -> None:
    grid = make_grid()
    ms = np.array([1.0, 1.5, 3.3, 17.0, 64.0, 100.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        many = grid.many(ms, 700.0)
        one = [grid(m, 700.0) for m in ms]
    assert many.tolist() == one


def test_past_the_last_point_scales_proportionally_and_warns_once() -> None:
    grid = make_grid()
    with pytest.warns(UserWarning, match=r"kernel table test: m 128 is past the measured 64"):
        value = grid(128.0, 1024.0)
    assert value == pytest.approx(2 * table_value(64, 1024), rel=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second extrapolation on the same axis is silent
        assert grid(256.0, 1024.0) == pytest.approx(4 * table_value(64, 1024), rel=1e-12)


def test_extrapolating_two_axes_multiplies_the_factors() -> None:
    grid = make_grid()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = grid(128.0, 8192.0)
    assert value == pytest.approx(4 * table_value(64, 4096), rel=1e-12)
    assert len(caught) == 2


def test_below_the_first_point_takes_the_first_value() -> None:
    grid = make_grid()
    assert grid(0.5, 64.0) == pytest.approx(table_value(1, 128), rel=1e-12)


def test_single_point_axis_is_constant_inside_and_proportional_past_it() -> None:
    grid = Grid("one", ("x",), ([10.0],), [2.0])
    assert grid(3.0) == 2.0
    with pytest.warns(UserWarning):
        assert grid(30.0) == pytest.approx(6.0)


def test_from_points_averages_duplicates_and_fills_holes_along_the_axis() -> None:
    # batch 1 and 2 measured at both lengths; batch 4 only at the short one.
    grid = Grid.from_points(
        "attn",
        ("batch", "len"),
        ([1, 1, 1, 2, 2, 4], [16, 16, 32, 16, 32, 16]),
        [1.0, 3.0, 4.0, 3.0, 6.0, 5.0],
        fill_axis=0,
    )
    assert grid(1, 16) == 2.0  # mean of the duplicate rows
    # The hole (4, 32) is the largest measured batch before it (2) scaled by 4 / 2.
    assert grid(4, 32) == pytest.approx(12.0)


def test_from_points_fills_an_empty_line_along_another_axis() -> None:
    # (m, n=2) has no row at all: filled along n from n=1, proportionally.
    grid = Grid.from_points("g", ("m", "n"), ([1, 2], [1, 1]), [1.0, 2.0])
    assert grid.values.shape == (2, 1)
    grid = Grid.from_points(
        "g", ("m", "n"), ([1, 2, 1, 2, 1], [1, 1, 3, 3, 2]), [1.0, 2.0, 3.0, 6.0, 2.0]
    )
    assert grid(2, 2) == pytest.approx(2.0 * 2 / 1)


def test_fill_holes_uses_the_next_point_before_the_first_measurement() -> None:
    values = np.array([[np.nan, 2.0, np.nan]])
    filled = fill_holes(values, np.array([1.0, 2.0, 4.0]), axis=1)
    assert filled.tolist() == [[2.0, 2.0, 4.0]]


def test_bad_grids_are_refused() -> None:
    with pytest.raises(ValueError, match="does not match axes"):
        Grid("bad", ("x",), ([1.0, 2.0],), [1.0])
    with pytest.raises(ValueError, match="increasing"):
        Grid("bad", ("x",), ([2.0, 1.0],), [1.0, 2.0])
    with pytest.raises(ValueError, match="holes"):
        Grid("bad", ("x",), ([1.0, 2.0],), [1.0, np.nan])
    with pytest.raises(ValueError, match="expected 2 coordinates"):
        make_grid()(1.0)
    with pytest.raises(ValueError, match="expected 2 coordinates"):
        make_grid().many([1.0])
