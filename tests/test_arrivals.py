"""Arrival processes: configs, the first-arrival convention, statistics, determinism."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from sim.errors import ConfigError
from sim.workload.arrivals import (
    MAX_GENERATED_REQUESTS,
    ArrivalConfig,
    ConstantArrival,
    GammaArrival,
    PoissonArrival,
    arrival_times_s,
    sample_gaps_s,
)

ARRIVAL = TypeAdapter(ArrivalConfig)
ALL: list[ArrivalConfig] = [
    PoissonArrival(rate_per_s=4.0),
    GammaArrival(rate_per_s=4.0, burstiness=0.3),
    ConstantArrival(rate_per_s=4.0),
]
RANDOM = ALL[:2]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --- configs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ({"kind": "poisson", "rate_per_s": 2}, PoissonArrival),
        ({"kind": "gamma", "rate_per_s": 2, "burstiness": 0.5}, GammaArrival),
        ({"kind": "constant", "rate_per_s": 2}, ConstantArrival),
    ],
)
def test_union_by_kind(data: dict[str, Any], cls: type) -> None:
    assert isinstance(ARRIVAL.validate_python(data), cls)


def test_gamma_burstiness_defaults_to_poisson() -> None:
    assert GammaArrival(rate_per_s=1.0).burstiness == 1.0


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "poisson", "rate_per_s": 0},
        {"kind": "poisson", "rate_per_s": -1},
        {"kind": "poisson", "rate_per_s": float("nan")},
        {"kind": "gamma", "rate_per_s": 1, "burstiness": float("nan")},
        {"kind": "poisson", "rate_per_s": 1, "spacing": "uniform"},
        {"kind": "constant", "rate_per_s": 1, "spacing": "renewal"},
        {"kind": "poisson"},
        {"kind": "gamma", "rate_per_s": 1, "burstiness": 0},
        {"kind": "gamma", "rate_per_s": 1, "burstiness": -2},
        {"kind": "constant", "rate_per_s": 0},
        {"kind": "constant", "rate_per_s": 1, "jitter": 0.1},
        {"kind": "bursty", "rate_per_s": 1},
    ],
)
def test_invalid_configs(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ARRIVAL.validate_python(data)


# --- shape of the output ---------------------------------------------------------------


@pytest.mark.parametrize("config", ALL)
def test_num_requests_gives_that_many_sorted_float_times(config: ArrivalConfig) -> None:
    times = arrival_times_s(config, rng(), num_requests=1000)
    assert times.dtype == np.float64
    assert times.shape == (1000,)
    assert np.all(np.diff(times) >= 0)


@pytest.mark.parametrize("config", ALL)
def test_renewal_spacing_is_the_running_sum_of_the_gaps(config: ArrivalConfig) -> None:
    """spacing: renewal: arrival k is the sum of the first k gaps, the first one > 0."""
    if not isinstance(config, ConstantArrival):
        config = config.model_copy(update={"spacing": "renewal"})
    times = arrival_times_s(config, rng(5), num_requests=10)
    gaps = sample_gaps_s(config, rng(5), 10)
    assert times[0] > 0
    assert np.allclose(times, np.cumsum(gaps))


@pytest.mark.parametrize("config", ALL)
def test_vllm_bench_spacing_rescales_the_running_sums_to_n_over_rate(
    config: ArrivalConfig,
) -> None:
    """get_request: delay_ts = cumsum(gaps) * (N / rate) / sum(gaps); the first one > 0."""
    times = arrival_times_s(config, rng(5), num_requests=10)
    sums = np.cumsum(sample_gaps_s(config, rng(5), 10))
    assert times[0] > 0
    assert times[-1] == pytest.approx(10 / 4.0, rel=1e-12)
    assert np.allclose(times, sums * (10 / 4.0) / sums[-1], rtol=1e-12)


def test_constant_arrivals_are_exact_multiples() -> None:
    times = arrival_times_s(ConstantArrival(rate_per_s=10.0), rng(), num_requests=1_000_000)
    assert times[0] == pytest.approx(0.1)
    assert times[-1] == pytest.approx(100_000.0, abs=1e-9)
    assert np.allclose(np.diff(times), 0.1)


def test_constant_ignores_the_generator() -> None:
    config = ConstantArrival(rate_per_s=3.0)
    assert np.array_equal(
        arrival_times_s(config, rng(1), num_requests=50),
        arrival_times_s(config, rng(2), num_requests=50),
    )


@pytest.mark.parametrize("config", ALL)
def test_zero_requests(config: ArrivalConfig) -> None:
    assert arrival_times_s(config, rng(), num_requests=0).shape == (0,)


@pytest.mark.parametrize("config", ALL)
def test_zero_duration(config: ArrivalConfig) -> None:
    assert arrival_times_s(config, rng(), duration_s=0.0).shape == (0,)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"num_requests": 1, "duration_s": 1.0}, {"num_requests": -1}, {"duration_s": -1.0}],
)
def test_bad_extent_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        arrival_times_s(ALL[0], rng(), **kwargs)


def test_too_long_duration_is_a_config_error() -> None:
    config = PoissonArrival(rate_per_s=1e6)
    with pytest.raises(ConfigError, match="rate_per_s \\* duration_s"):
        arrival_times_s(config, rng(), duration_s=10.0 * MAX_GENERATED_REQUESTS)


# --- duration mode --------------------------------------------------------------


@given(
    rate=st.floats(0.01, 1000.0),
    burstiness=st.floats(0.05, 20.0),
    duration=st.floats(0.0, 200.0),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=80, deadline=None)
def test_duration_mode_keeps_every_arrival_before_the_end(
    rate: float, burstiness: float, duration: float, seed: int
) -> None:
    config = GammaArrival(rate_per_s=rate, burstiness=burstiness)
    times = arrival_times_s(config, rng(seed), duration_s=duration)
    assert np.all(times < duration)
    assert np.all(np.diff(times) >= 0)
    # Nothing was dropped: the arrival after the last kept one is >= duration,
    # i.e. the kept times are a prefix of the same process generated longer.
    longer = arrival_times_s(config, rng(seed), duration_s=duration * 2 + 1)
    # allclose: a second block's running sum may differ from one long cumsum by an ulp.
    assert np.allclose(longer[: times.size], times, rtol=1e-12, atol=0)
    assert times.size == int(np.sum(longer < duration))


@given(rate=st.floats(0.01, 1000.0), duration=st.floats(0.0, 100.0))
@settings(max_examples=80, deadline=None)
def test_constant_duration_count(rate: float, duration: float) -> None:
    times = arrival_times_s(ConstantArrival(rate_per_s=rate), rng(), duration_s=duration)
    assert np.all(times < duration)
    expected = math.ceil(duration * rate) - 1 if duration * rate > 0 else 0
    assert abs(times.size - expected) <= 1  # float rounding at the boundary


def test_duration_mode_draws_extra_blocks_when_needed() -> None:
    """A very bursty process can overrun the first block; the result still covers the window."""
    config = GammaArrival(rate_per_s=1.0, burstiness=0.01)
    for seed in range(20):
        times = arrival_times_s(config, rng(seed), duration_s=50.0)
        assert np.all(times < 50.0)


def test_poisson_count_in_window_is_poisson() -> None:
    rate, duration = 5.0, 20.0
    counts = np.array(
        [
            arrival_times_s(PoissonArrival(rate_per_s=rate), rng(seed), duration_s=duration).size
            for seed in range(400)
        ]
    )
    assert abs(counts.mean() / (rate * duration) - 1) < 0.03
    assert abs(counts.var() / (rate * duration) - 1) < 0.25


# --- statistics ---------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.5, 3.0, 250.0])
@pytest.mark.parametrize("kind", ["poisson", "gamma", "constant"])
def test_mean_gap_is_one_over_rate(kind: str, rate: float) -> None:
    config = ARRIVAL.validate_python({"kind": kind, "rate_per_s": rate})
    gaps = np.diff(arrival_times_s(config, rng(), num_requests=200_000))
    assert abs(gaps.mean() * rate - 1) < 0.01


@pytest.mark.parametrize("burstiness", [0.1, 0.5, 1.0, 4.0])
def test_gamma_cv_is_one_over_sqrt_burstiness(burstiness: float) -> None:
    config = GammaArrival(rate_per_s=7.0, burstiness=burstiness)
    gaps = sample_gaps_s(config, rng(), 400_000)
    cv = gaps.std() / gaps.mean()
    assert abs(cv * math.sqrt(burstiness) - 1) < 0.03
    assert abs(gaps.mean() * 7.0 - 1) < 0.02


def test_poisson_gaps_have_cv_one() -> None:
    gaps = sample_gaps_s(PoissonArrival(rate_per_s=2.0), rng(), 200_000)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.01


def test_gamma_with_burstiness_one_matches_poisson_in_law() -> None:
    poisson = np.sort(sample_gaps_s(PoissonArrival(rate_per_s=2.0), rng(1), 50_000))
    gamma = np.sort(sample_gaps_s(GammaArrival(rate_per_s=2.0, burstiness=1.0), rng(2), 50_000))
    quantiles = [0.1, 0.5, 0.9]
    for q in quantiles:
        assert abs(np.quantile(poisson, q) / np.quantile(gamma, q) - 1) < 0.05


def test_constant_gaps_have_cv_zero() -> None:
    gaps = sample_gaps_s(ConstantArrival(rate_per_s=2.0), rng(), 100)
    assert gaps.std() == 0


# --- determinism and speed -------------------------------------------------------------


@pytest.mark.parametrize("config", RANDOM)
def test_same_seed_same_times(config: ArrivalConfig) -> None:
    assert np.array_equal(
        arrival_times_s(config, rng(11), num_requests=500),
        arrival_times_s(config, rng(11), num_requests=500),
    )
    assert np.array_equal(
        arrival_times_s(config, rng(11), duration_s=60.0),
        arrival_times_s(config, rng(11), duration_s=60.0),
    )


@pytest.mark.parametrize("config", RANDOM)
def test_different_seed_different_times(config: ArrivalConfig) -> None:
    assert not np.array_equal(
        arrival_times_s(config, rng(11), num_requests=500),
        arrival_times_s(config, rng(12), num_requests=500),
    )


@pytest.mark.parametrize("config", ALL)
def test_one_million_arrivals(config: ArrivalConfig) -> None:
    """A million at once (their speed: benchmarks/hot_paths.py)."""
    times = arrival_times_s(config, rng(), num_requests=1_000_000)
    assert times.size == 1_000_000 and np.all(np.diff(times) >= 0)
