"""Issue 39, a new user's round: percentile caveats that were false.

``--metric-percentiles 100`` on a 50-request run printed "p100_ttft_ms from
50 sample(s) is their maximum, not a percentile": p100 *is* the maximum, so
the caveat was false. And a low percentile rests on the samples below it
just as a high one on those above, so p1 of 50 samples (half a sample below)
is their minimum, which went without a caveat.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.metrics.stats import MIN_TAIL_SAMPLES, percentile_caveats


@pytest.mark.parametrize("percentile", [0.0, 100.0])
def test_the_minimum_and_maximum_carry_no_caveat(percentile: float) -> None:
    # numpy agrees they are the extremes exactly, for any sample count.
    samples = np.arange(1.0, 51.0)
    assert np.percentile(samples, percentile) in (samples.min(), samples.max())
    assert percentile_caveats({"ttft": 50}, [percentile]) == []


def test_a_low_percentile_on_few_samples_is_called_their_minimum() -> None:
    # p1 of 50 samples: 50 x 0.01 = 0.5 samples below it, fewer than one.
    (caveat,) = percentile_caveats({"ttft": 50}, [1.0])
    assert caveat.startswith("p1_ttft_ms") and "minimum" in caveat


def test_low_and_high_percentiles_are_judged_alike() -> None:
    # p5 and p95 of 100 samples each rest on 5 beyond them: both noisy, neither extreme.
    low, high = (percentile_caveats({"ttft": 100}, [p]) for p in (5.0, 95.0))
    assert len(low) == len(high) == 1 and "noisy" in low[0] and "noisy" in high[0]
    # With MIN_TAIL_SAMPLES on each side both are fine.
    n = 20 * MIN_TAIL_SAMPLES
    assert percentile_caveats({"ttft": n}, [5.0, 95.0]) == []
