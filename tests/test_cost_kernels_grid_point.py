"""The one-point grid lookups (``sim.cost.kernels.price``) against ``Grid``'s general loop.

They must give the same bits at every point (inside, below, past the grid),
warn as the loop does (once per axis, naming the caller's line), and stand
aside for grids they do not unroll.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.kernels.grid import Grid

SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def grids(draw: st.DrawFn, max_axes: int = 4, min_points: int = 2) -> Grid:
    """A grid of 1-``max_axes`` axes of increasing points and positive latencies."""
    num_axes = draw(st.integers(1, max_axes))
    axes = []
    for _ in range(num_axes):
        size = draw(st.integers(min_points, 6))
        gaps = draw(st.lists(st.floats(0.01, 1e4), min_size=size, max_size=size))
        axes.append(np.cumsum(gaps))
    shape = tuple(len(axis) for axis in axes)
    count = int(np.prod(shape))
    values = draw(st.lists(st.floats(1e-7, 1.0), min_size=count, max_size=count))
    return Grid("g", [f"x{i}" for i in range(num_axes)], axes, np.reshape(values, shape))


def general(grid: Grid) -> Grid:
    """The same grid, priced by ``Grid.__call__``'s general loop only."""
    twin = Grid(grid.name, grid.axis_names, grid.axes, grid.values)
    twin._point = None
    return twin


def points(grid: Grid, fractions: list[float]) -> tuple[float, ...]:
    """A point given by fractions of each axis's span: < 0 below, > 1 past it."""
    coords = []
    for axis, f in zip(grid.axes, fractions, strict=False):
        coords.append(float(axis[0] + f * (axis[-1] - axis[0])))
    return tuple(coords)


fractions = st.lists(
    st.one_of(st.floats(-0.5, 1.5), st.sampled_from([0.0, 1.0, 0.5])), min_size=4, max_size=4
)


@SETTINGS
@given(grid=grids(), where=st.lists(fractions, min_size=1, max_size=8))
def test_the_unrolled_lookup_gives_the_general_loops_bits(
    grid: Grid, where: list[list[float]]
) -> None:
    assert grid._point is not None  # every grid of 1-4 axes of 2+ points is unrolled
    loop = general(grid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fraction in where:
            coords = points(grid, fraction)
            assert grid(*coords) == loop(*coords)


@SETTINGS
@given(grid=grids(), where=st.lists(fractions, min_size=1, max_size=8))
def test_many_gives_the_unrolled_lookups_bits(grid: Grid, where: list[list[float]]) -> None:
    coords = [points(grid, fraction) for fraction in where]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        many = grid.many(*(np.array(axis) for axis in zip(*coords, strict=True)))
        assert many.tolist() == [grid(*c) for c in coords]


@SETTINGS
@given(grid=grids(), where=fractions)
def test_grid_points_are_the_table_values(grid: Grid, where: list[float]) -> None:
    # Snap each coordinate to an axis point: the lookup returns that entry exactly
    # (its weights are 0 and 1; the other corners add 0.0).
    index = tuple(
        int(np.clip(round(f * (len(axis) - 1)), 0, len(axis) - 1))
        for axis, f in zip(grid.axes, where, strict=False)
    )
    coords = tuple(float(axis[i]) for axis, i in zip(grid.axes, index, strict=True))
    assert grid(*coords) == grid.values[index]


def lookup(grid: Grid, *coords: float) -> float:
    return grid(*coords)  # the line a warning should name is the caller of this


@pytest.mark.parametrize("unrolled", [True, False])
def test_past_the_grid_warns_once_per_axis_naming_the_callers_line(unrolled: bool) -> None:
    axes = ([1.0, 2.0], [10.0, 20.0, 40.0])
    grid = Grid("t", ("m", "n"), axes, [[1.0, 2.0, 4.0], [2.0, 4.0, 8.0]])
    if not unrolled:
        grid = general(grid)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lookup(grid, 4.0, 20.0) == 2.0 * 4.0  # m twice the last point: twice its value
        lookup(grid, 8.0, 80.0)
        lookup(grid, 3.0, 40.0)
    messages = [str(w.message) for w in caught]
    assert messages == [
        "kernel table t: m 4 is past the measured 2; extrapolating proportionally",
        "kernel table t: n 80 is past the measured 40; extrapolating proportionally",
    ]
    assert {w.filename for w in caught} == {__file__}
    source = Path(__file__).read_text().splitlines()
    assert all("lookup(grid, " in source[w.lineno - 1] for w in caught)


def test_a_one_point_axis_takes_the_lookup_and_five_axes_the_general_loop() -> None:
    one_point = Grid("p", ("m", "n"), ([1.0], [1.0, 2.0]), [[3.0, 5.0]])
    assert one_point._point is not None  # (price.cell: weight 0 along it)
    assert one_point(0.5, 1.5) == 4.0 == general(one_point)(0.5, 1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert one_point(2.0, 1.5) == 8.0 == general(one_point)(2.0, 1.5)  # twice m's point
    five = Grid("f", "abcde", [[1.0, 2.0]] * 5, np.ones((2, 2, 2, 2, 2)))
    assert five._point is None
    assert five(1.5, 1.5, 1.5, 1.5, 1.5) == 1.0


def test_the_four_axis_lookup_is_multilinear() -> None:
    # value = 1 + a + 10 b + 100 c + 1000 d on the corners of [0, 1]^4 (times 2 on d's
    # far side of [1, 3]): linear in each coordinate, so the lookup gives it anywhere.
    axes = [[0.0, 1.0]] * 3 + [[0.0, 1.0, 3.0]]
    a, b, c, d = np.meshgrid(*axes, indexing="ij")
    grid = Grid("f", "abcd", axes, 1 + a + 10 * b + 100 * c + 1000 * d)
    assert grid._point is not None
    assert grid(0.5, 0.25, 0.75, 2.0) == pytest.approx(1 + 0.5 + 2.5 + 75 + 2000, rel=1e-15)
    assert grid(1.0, 0.0, 1.0, 3.0) == 1 + 1 + 100 + 3000


def test_a_wrong_number_of_coordinates_is_refused_on_either_path() -> None:
    grid = Grid("t", ("m", "n"), ([1.0, 2.0], [1.0, 2.0]), np.ones((2, 2)))
    for g in (grid, general(grid)):
        with pytest.raises(ValueError, match="expected 2 coordinates"):
            g(1.0)
