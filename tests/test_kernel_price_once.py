"""Attention's price from kernel tables is written once (``sim.cost.kernels.price``):
``KernelCost`` runs it on lists, the compiled loop compiles the same code (issue 40,
"a kernel term is written once"). Its flat lookups are ``Grid``'s, bit for bit,
extrapolation and its warning included, one-point axes too."""

from __future__ import annotations

import importlib.util
import inspect
import math
import warnings

import numpy as np
import pytest
from compiled_runs import kernel_gpus
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.kernels import price
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.grid import Grid
from sim.fast.compiled import loop, path

HAS_NUMBA = importlib.util.find_spec("numba") is not None


def test_the_loop_has_no_copy_of_the_attention_price() -> None:
    """Every pricing function the loop compiles is ``price``'s own code: the loop
    defines none of those names itself."""
    own = {name for name, f in vars(loop).items() if inspect.isfunction(f)}
    own = {name for name in own if vars(loop)[name].__module__ == loop.__name__}
    assert not own & set(loop.PRICE)
    assert {"attention_s", "grid_point", "skew_alpha", "prefill_attention_s"} <= set(loop.PRICE)
    for name in loop.PRICE:
        assert inspect.isfunction(getattr(price, name)), name
    if HAS_NUMBA and path.compiled() is not None:  # the compiled twins: price's very code
        for name in loop.PRICE:
            assert loop.COMPILED[name].py_func.__code__ is getattr(price, name).__code__, name
            plain = getattr(price, name)
            assert vars(loop).get(name, plain) is plain, name  # what the module holds: plain
        for name in (*loop.PIECES, *loop.RUN_ENDS_PIECES):  # plain too: the Python path
            assert inspect.isfunction(getattr(loop, name)), name  # calls decode_ends on lists


def test_the_loop_cache_is_dropped_when_price_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run`` compiles ``price``'s functions in: its cache's digest covers price.py."""
    if not HAS_NUMBA:
        pytest.skip("numba is not installed")
    seen: list[tuple[str, ...]] = []

    class Stop(Exception):
        pass

    def record(module: object, sources: tuple[object, ...]) -> None:
        seen.append(tuple(str(source) for source in sources))
        raise Stop

    monkeypatch.setattr(loop, "drop_stale_cache", record)
    with pytest.raises(Stop):
        loop.compile_run()
    assert any(source.endswith("sim/cost/kernels/price.py") for source in seen[0])


def _flat(grid: Grid, extrapolates: bool) -> tuple[list[float], list[int], int]:
    """``grid`` as ``price``'s tables and layout (its 2-D slot, or the 4-D one)."""
    tables: list[float] = [0.0] * price.MAX_PAST
    layout = [0] * price.LAYOUT_SIZE
    layout[price.EXTRAPOLATES] = int(extrapolates)
    g = price.DECODE_GRID if len(grid.axes) == 2 else price.MIXED_GRID
    grid.put(tables, layout, g)
    return tables, layout, g


@st.composite
def grids(draw: st.DrawFn) -> tuple[Grid, list[float]]:
    """A 2- or 4-axis grid (axes of one to four points) and a point around it."""
    num_axes = draw(st.sampled_from([2, 4]))
    axes = []
    for _ in range(num_axes):
        steps = draw(st.lists(st.floats(0.5, 100.0), min_size=1, max_size=4))
        axes.append(np.cumsum([draw(st.floats(1.0, 50.0)), *steps])[: draw(st.integers(1, 4))])
    shape = tuple(len(axis) for axis in axes)
    values = draw(
        st.lists(st.floats(1e-6, 1e-2), min_size=math.prod(shape), max_size=math.prod(shape))
    )
    grid = Grid("g", [f"x{d}" for d in range(num_axes)], axes, np.reshape(values, shape))
    point = [draw(st.floats(0.0, 1.5 * float(axis[-1]) + 10.0)) for axis in axes]
    return grid, point


@settings(max_examples=300, deadline=None)
@given(case=grids())
def test_a_flat_lookup_is_the_grid_s_to_the_bit(case: tuple[Grid, list[float]]) -> None:
    """Inside, below and past the grid (proportional past the last point, as
    ``Grid``), one-point axes included; past it the loop's layout gives NaN and
    the extrapolating one notes each axis passed, with its coordinate."""
    grid, point = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = grid(*point)
    passed = [d for d, x in enumerate(point) if x > grid.axes[d][-1]]
    lookup = price.grid_point if len(point) == 2 else price.grid_point_4d
    slots = price.grid_2d if len(point) == 2 else price.grid_4d
    for extrapolates in (True, False):
        tables, layout, g = _flat(grid, extrapolates)
        got = lookup(tables, layout, slots(layout, g), *point)
        if extrapolates or not passed:
            assert got.hex() == expected.hex()
        else:
            assert math.isnan(got)
        if extrapolates:
            notes = [
                layout[price.PAST + 2 * k : price.PAST + 2 * k + 2] for k in range(len(passed))
            ]
            assert layout[price.NUM_PAST] == len(passed)
            assert notes == [[g, d] for d in passed]
            assert tables[: len(passed)] == [point[d] for d in passed]


def test_kernel_cost_warns_past_a_grid_as_the_grid_does() -> None:
    """A decode lookup past the decode table's last KV length: the grid's own
    proportional price, and the grid's warning, once."""
    known = kernel_gpus()[0]  # aiconfigurator's H100 tables: the KV axis is the context
    cost = KernelCost(known.arch, known.artifact)  # fresh: a grid warns once in its life
    grid = cost._decode_attn
    kv = 3.0 * float(grid.axes[1][-1])
    with pytest.warns(UserWarning, match=f"kernel table {grid.name}: .* is past the measured"):
        got = cost.decode_attention_s(4, int(4 * kv))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (warned once already, by the cost)
        expected = grid(4.0, kv)
    assert got.hex() == expected.hex()
    assert cost.price_layout[price.NUM_PAST] == 0  # the notes were read and cleared
