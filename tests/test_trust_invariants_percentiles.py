"""Issue 39 item 9: the caveat of a percentile with fewer than one sample beyond it
says what numpy's linear method makes of it, checked against the method's formula."""

from __future__ import annotations

import re

import numpy as np
import pytest

from sim.metrics.stats import percentile_caveats


@pytest.mark.parametrize(("n", "p"), [(50, 99), (2, 90), (99, 99), (60, 99.5)])
def test_a_thin_percentile_is_placed_between_the_two_largest_samples(n: int, p: float) -> None:
    # Fewer than one sample beyond the percentile: n (1 - p/100) < 1.
    assert n * (1 - p / 100) < 1
    (caveat,) = percentile_caveats({"ttft": n}, (p,))
    assert "maximum" not in caveat  # the linear method interpolates: the max only at rank n-1
    share = float(re.search(r"(\d+)% of the way to the largest", caveat).group(1)) / 100  # type: ignore[union-attr]
    # The linear method (numpy's default, vllm's): rank h = (n - 1) p / 100 in the
    # sorted samples, so the value is x[n-2] + (h - (n - 2)) (x[n-1] - x[n-2]).
    samples = np.sort(np.random.default_rng(0).exponential(1.0, n))
    expected = samples[-2] + share * (samples[-1] - samples[-2])
    assert np.percentile(samples, p) == pytest.approx(
        expected, abs=0.005 * (samples[-1] - samples[-2])
    )
    assert np.percentile(samples, p) < samples[-1]


def test_the_maximum_is_named_only_where_the_percentile_is_the_maximum() -> None:
    # One sample (every percentile is it) or p = 100 (rank n - 1): the largest value.
    assert percentile_caveats({"ttft": 1}, (99,)) == [
        "p99_ttft_ms from 1 sample(s) is their maximum, not a percentile"
    ]
    assert percentile_caveats({"ttft": 5}, (100,)) == [
        "p100_ttft_ms from 5 sample(s) is their maximum, not a percentile"
    ]
    samples = np.arange(5.0)
    assert np.percentile(samples, 100) == samples.max()
