"""Weighted quantiles by radix select (``sim.metrics.quantiles``).

The select must give the same numbers as sorting every (value, weight) pair
and walking the running weight (the method it replaced, kept here as the
reference), and the same as expanding integer weights into repeated values.
``_DIRECT`` and ``_SLICE`` are made tiny so that small inputs go through
every level of buckets and several slices.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.metrics import quantiles
from sim.metrics.quantiles import latency_stats_ms, weighted_quantiles


def sorted_quantiles(values: np.ndarray, weights: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """The former method: sort by value, running weight, the linear formula."""
    keep = weights > 0
    v, w = values[keep], weights[keep].astype(np.float64)
    if v.size == 0:
        return np.full(qs.shape, np.nan)
    order = np.argsort(v)
    v = v[order]
    cum = np.cumsum(w[order])
    last = max(float(cum[-1]) - 1.0, 0.0)
    h = qs * last
    lo = np.floor(h)
    i_lo = np.searchsorted(cum, lo, side="right")
    i_hi = np.searchsorted(cum, np.minimum(lo + 1.0, last), side="right")
    return v[i_lo] + (h - lo) * (v[i_hi] - v[i_lo])


@contextmanager
def tiny() -> Iterator[None]:
    """Every input of more than two pairs is bucketed, in slices of three, 8 key bits a level."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quantiles, "_DIRECT", 2)
        patch.setattr(quantiles, "_SLICE", 3)
        patch.setattr(quantiles, "_LEVELS", tuple((shift, 8) for shift in range(56, -1, -8)))
        yield


# Few distinct values (ties), both signs, both zeros, infinities; and any finite float.
special = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, 1e-300, -1e300, math.inf, -math.inf])
value = st.one_of(special, st.floats(allow_nan=False, allow_infinity=False))
pairs = st.lists(st.tuples(value, st.integers(0, 5)), min_size=1, max_size=60)
qs_list = st.lists(st.floats(0, 1), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(pairs=pairs, qs=qs_list)
def test_the_select_equals_sorting_every_pair(
    pairs: list[tuple[float, int]], qs: list[float]
) -> None:
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    q = np.array(qs)
    with tiny(), np.errstate(invalid="ignore"):  # inf - inf between infinite neighbours
        got = weighted_quantiles(values, weights, q)
        want = sorted_quantiles(values, weights, q)
    np.testing.assert_array_equal(got, want)  # (-0.0 == 0.0; NaN where both are NaN)


positive = st.floats(1e-6, 10.0)


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(positive, st.integers(1, 40)), min_size=1, max_size=80), qs=qs_list)
def test_step_gaps_get_the_same_bits_as_before(
    pairs: list[tuple[float, int]], qs: list[float]
) -> None:
    # What ITL feeds it: positive gaps, positive integer weights.
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs], dtype=np.float64)
    q = np.array(qs)
    with tiny():
        got = weighted_quantiles(values, weights, q)
    assert got.tobytes() == sorted_quantiles(values, weights, q).tobytes()


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(value, st.integers(0, 6)), min_size=1, max_size=40), qs=qs_list)
def test_grouped_pairs_give_the_quantiles_of_their_expansion(
    pairs: list[tuple[float, int]], qs: list[float]
) -> None:
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    expanded = np.repeat(values, weights)
    with tiny(), np.errstate(invalid="ignore"):
        got = weighted_quantiles(values, weights, qs)
        want = weighted_quantiles(expanded, np.ones(expanded.size), qs)
        np.testing.assert_array_equal(got, want)
    scale = float(np.abs(expanded).max()) if expanded.size else 0.0
    if expanded.size and scale < 1e100:  # (numpy's own interpolation rounds differently)
        want = np.percentile(expanded, 100 * np.array(qs))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * scale)


def test_nans_sort_last() -> None:
    values = np.array([3.0, math.nan, 1.0, 2.0, math.nan])
    weights = np.array([1, 1, 1, 1, 1])
    with tiny():
        got = weighted_quantiles(values, weights, [0.0, 0.25, 0.5, 0.75, 1.0])
    # Expanded and sorted: 1, 2, 3, NaN, NaN (positions 0..4); q = 0.5 lands on 3 but
    # interpolates towards the NaN next to it (0 * NaN is NaN), as the sort did.
    np.testing.assert_array_equal(got, [1.0, 2.0, math.nan, math.nan, math.nan])
    np.testing.assert_array_equal(got, sorted_quantiles(values, weights, np.linspace(0, 1, 5)))


def test_equal_values_in_many_slices() -> None:
    # One value everywhere: every level's bucket holds them all, the last one answers.
    with tiny():
        got = weighted_quantiles(np.full(50, 0.25), np.arange(50) % 3, [0.0, 0.5, 1.0])
    assert got.tolist() == [0.25, 0.25, 0.25]


def test_a_large_input_by_the_default_settings() -> None:
    rng = np.random.default_rng(7)
    values = np.round(rng.gamma(5.0, 0.002, 200_000) + 0.008, 7)  # many ties
    weights = rng.integers(0, 30, values.size)
    qs = np.array([0.0, 0.5, 0.9, 0.99, 0.999, 1.0])
    got = weighted_quantiles(values, weights, qs)
    assert got.tobytes() == sorted_quantiles(values, weights, qs).tobytes()


@settings(max_examples=100, deadline=None)
@given(xs=st.lists(st.one_of(special, st.floats(allow_nan=False)), min_size=2, max_size=30))
def test_the_keys_order_like_the_floats(xs: list[float]) -> None:
    x = np.array(sorted(xs))
    levels = [quantiles._digits(x, shift, width) for shift, width in quantiles._LEVELS]
    assert sum(width for _, width in quantiles._LEVELS) == 64
    keys = list(zip(*(level.tolist() for level in levels), strict=True))
    for a, b, ka, kb in zip(x[:-1], x[1:], keys[:-1], keys[1:], strict=True):
        if a < b:
            assert ka < kb
        elif a.tobytes() == b.tobytes():
            assert ka == kb  # (-0.0 and 0.0 are equal floats with two keys: either order)


def test_overwrite_gives_the_same_statistics_and_only_then_writes() -> None:
    rng = np.random.default_rng(3)
    values = rng.gamma(2.0, 0.01, 1000)
    weights = rng.integers(1, 9, 1000).astype(np.float64)
    kept = values.copy()
    plain = latency_stats_ms("itl", values, weights, (50, 99))
    assert np.array_equal(values, kept)
    reused = latency_stats_ms("itl", values, weights, (50, 99), overwrite=True)
    assert reused == plain
    assert not np.array_equal(values, kept)  # its memory held the squares


def test_stats_of_a_copy_leave_the_input_alone() -> None:
    values = np.array([1.0, math.nan, 3.0])
    stats = latency_stats_ms("e2el", values, overwrite=True)
    assert stats["mean_e2el_ms"] == pytest.approx(2000.0)
    assert math.isnan(values[1]) and values[0] == 1.0  # the finite ones were a copy
