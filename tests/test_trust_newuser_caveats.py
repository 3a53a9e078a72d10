"""Issue 39, a new user's round: low percentiles went without their caveat.

A low percentile rests on the samples below it just as a high one on those
above, so p1 of 50 samples (half a sample below) measures no tail, as p99
does not, yet ``--metric-percentiles 1`` printed no caveat (nor did p0).
"""

from __future__ import annotations

import numpy as np

from sim.metrics.stats import MIN_TAIL_SAMPLES, percentile_caveats


def test_p0_is_named_the_minimum_as_p100_the_maximum() -> None:
    # The mirror of tests/test_trust_invariants_percentiles.py's p100 case.
    samples = np.arange(5.0)
    assert np.percentile(samples, 0) == samples.min()
    assert percentile_caveats({"ttft": 5}, (0,)) == [
        "p0_ttft_ms from 5 sample(s) is their minimum, not a percentile"
    ]


def test_a_low_percentile_on_few_samples_is_the_mirror_of_a_high_one() -> None:
    # p1 of 50 samples: 50 x 0.01 = 0.5 samples below it, fewer than one. The linear
    # method is symmetric, so it sits between the two smallest as p99 between the
    # two largest, the same share of the way.
    (low,) = percentile_caveats({"ttft": 50}, [1.0])
    (high,) = percentile_caveats({"ttft": 50}, [99.0])
    assert low.startswith("p1_ttft_ms") and "smallest" in low
    assert low.removeprefix("p1") == high.removeprefix("p99").replace("largest", "smallest")


def test_low_and_high_percentiles_are_judged_alike() -> None:
    # p5 and p95 of 100 samples each rest on 5 beyond them: both noisy, neither extreme.
    low, high = (percentile_caveats({"ttft": 100}, [p]) for p in (5.0, 95.0))
    assert len(low) == len(high) == 1 and "noisy" in low[0] and "noisy" in high[0]
    # With MIN_TAIL_SAMPLES on each side both are fine.
    n = 20 * MIN_TAIL_SAMPLES
    assert percentile_caveats({"ttft": n}, [5.0, 95.0]) == []
