"""Arrivals as ``vllm bench serve`` sends them (``get_request``): hand-traced cases,
the interval law, infinite rate and burstiness, and the scenario's keys."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.errors import ConfigError
from sim.workload.arrivals import (
    ConstantArrival,
    GammaArrival,
    PoissonArrival,
    arrival_times_s,
    sample_gaps_s,
)
from sim.workload.generate import SyntheticWorkload, generate_open_loop

INF = float("inf")


class FixedGaps:
    """A stand-in generator whose draws are given gaps, recording the arguments asked for."""

    def __init__(self, gaps: list[float]) -> None:
        self.gaps = np.asarray(gaps, dtype=np.float64)
        self.calls: list[tuple[str, float, float, int]] = []

    def exponential(self, scale: float, size: int) -> np.ndarray:
        self.calls.append(("exponential", 1.0, scale, size))
        return self.gaps[:size].copy()

    def gamma(self, shape: float, scale: float, size: int) -> np.ndarray:
        self.calls.append(("gamma", shape, scale, size))
        return self.gaps[:size].copy()


def fixed(gaps: list[float]) -> np.random.Generator:
    return cast(np.random.Generator, FixedGaps(gaps))


# --- hand-traced get_request ------------------------------------------------------


def test_three_poisson_requests_by_hand() -> None:
    """Gaps 1, 2, 1 at 1 req/s: delays 1, 3, 4, rescaled by (3 / 1) / 4 to 0.75, 2.25, 3."""
    times = arrival_times_s(PoissonArrival(rate_per_s=1.0), fixed([1, 2, 1]), num_requests=3)
    assert times.tolist() == [0.75, 2.25, 3.0]


def test_renewal_keeps_the_same_draws_unscaled() -> None:
    config = PoissonArrival(rate_per_s=1.0, spacing="renewal")
    assert arrival_times_s(config, fixed([1, 2, 1]), num_requests=3).tolist() == [1, 3, 4]


def test_gamma_is_drawn_with_vllms_shape_and_scale() -> None:
    """np.random.gamma(shape=burstiness, scale=1 / (rate * burstiness))."""
    rng = FixedGaps([0.5, 0.5, 1.0, 2.0])
    times = arrival_times_s(
        GammaArrival(rate_per_s=2.0, burstiness=0.25),
        cast(np.random.Generator, rng),
        num_requests=4,
    )
    assert rng.calls == [("gamma", 0.25, 1.0 / (2.0 * 0.25), 4)]
    # Delays 0.5, 1, 2, 4 -> times (4 / 2) / 4 = 0.5: 0.25, 0.5, 1, 2.
    assert times.tolist() == [0.25, 0.5, 1.0, 2.0]


def test_poisson_is_drawn_with_mean_one_over_rate() -> None:
    rng = FixedGaps([1.0, 1.0])
    arrival_times_s(PoissonArrival(rate_per_s=4.0), cast(np.random.Generator, rng), num_requests=2)
    assert rng.calls == [("exponential", 1.0, 0.25, 2)]


def test_one_request_goes_at_one_over_rate_not_at_zero() -> None:
    """N = 1: the only delay is rescaled to 1 / rate (vllm bench serve sends it then)."""
    for seed in range(5):
        (only,) = arrival_times_s(PoissonArrival(rate_per_s=4.0), rng(seed), num_requests=1)
        assert only == pytest.approx(0.25, rel=1e-12)


def test_zero_requests_draw_nothing() -> None:
    assert arrival_times_s(PoissonArrival(rate_per_s=1.0), fixed([]), num_requests=0).size == 0


# --- infinite rate and burstiness ------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        PoissonArrival(rate_per_s=INF),
        GammaArrival(rate_per_s=INF, burstiness=0.5),
        ConstantArrival(rate_per_s=INF),
        PoissonArrival(rate_per_s=INF, spacing="renewal"),
    ],
)
def test_infinite_rate_sends_everything_at_zero(config: Any) -> None:
    """--request-rate inf (vllm bench serve's default): every delay is 0."""
    assert arrival_times_s(config, rng(), num_requests=5).tolist() == [0.0] * 5


def test_infinite_rate_needs_a_request_count() -> None:
    with pytest.raises(ConfigError, match=r"rate_per_s: \.inf needs num_requests"):
        arrival_times_s(PoissonArrival(rate_per_s=INF), rng(), duration_s=10.0)


def test_infinite_burstiness_is_constant_spacing() -> None:
    """burstiness -> inf: the delay is 1 / rate, as get_request special-cases."""
    gamma = GammaArrival(rate_per_s=5.0, burstiness=INF)
    constant = ConstantArrival(rate_per_s=5.0)
    assert np.array_equal(
        arrival_times_s(gamma, rng(1), num_requests=20),
        arrival_times_s(constant, rng(2), num_requests=20),
    )
    assert np.array_equal(
        arrival_times_s(gamma, rng(1), duration_s=3.0),
        arrival_times_s(constant, rng(2), duration_s=3.0),
    )
    assert np.all(sample_gaps_s(gamma, rng(), 4) == 0.2)


def test_constant_is_unchanged_by_the_rescaling() -> None:
    """k / rate already ends at N / rate: the vLLM factor is 1."""
    times = arrival_times_s(ConstantArrival(rate_per_s=4.0), rng(), num_requests=8)
    assert times.tolist() == [k / 4.0 for k in range(1, 9)]


# --- the interval law ---------------------------------------------------------------


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def intervals_s(times: np.ndarray) -> np.ndarray:
    """The N gaps vllm bench serve waits: from 0 to the first request, then between requests."""
    return np.diff(times, prepend=0.0)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_rescaled_intervals_have_mean_one_over_rate_and_cv_one_over_sqrt_b(
    burstiness: float,
) -> None:
    rate, num = 8.0, 200_000
    times = arrival_times_s(
        GammaArrival(rate_per_s=rate, burstiness=burstiness), rng(3), num_requests=num
    )
    gaps = intervals_s(times)
    # The rescaling makes the mean exact; the law of each gap is (N / R) Beta(B, (N - 1) B),
    # whose CV^2 is (N - 1) / (N B + 1) -> 1 / B.
    assert gaps.mean() == pytest.approx(1 / rate, rel=1e-9)
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.02)
    assert cv**2 == pytest.approx((num - 1) / (num * burstiness + 1), rel=0.04)


def test_poisson_and_gamma_one_are_the_same_process() -> None:
    """burstiness 1 is Poisson: the same quantiles within sampling error."""
    num = 100_000
    poisson = np.sort(
        intervals_s(arrival_times_s(PoissonArrival(rate_per_s=3.0), rng(1), num_requests=num))
    )
    gamma = np.sort(
        intervals_s(arrival_times_s(GammaArrival(rate_per_s=3.0), rng(2), num_requests=num))
    )
    for q in (0.1, 0.5, 0.9, 0.99):
        assert np.quantile(poisson, q) == pytest.approx(np.quantile(gamma, q), rel=0.05)


@given(
    rate=st.floats(0.01, 1e4),
    burstiness=st.floats(0.05, 50.0),
    num=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_rescaled_arrivals_end_at_n_over_rate_and_never_decrease(
    rate: float, burstiness: float, num: int, seed: int
) -> None:
    config = GammaArrival(rate_per_s=rate, burstiness=burstiness)
    times = arrival_times_s(config, rng(seed), num_requests=num)
    assert times.shape == (num,)
    assert np.all(np.diff(times) >= 0)
    assert times[0] >= 0
    assert times[-1] == pytest.approx(num / rate, rel=1e-9)
    # The same draws, unscaled, are the renewal spacing: the shape agrees.
    renewal = arrival_times_s(
        config.model_copy(update={"spacing": "renewal"}), rng(seed), num_requests=num
    )
    assert np.allclose(times, renewal * (num / rate) / renewal[-1], rtol=1e-9)


# --- determinism ---------------------------------------------------------------


@pytest.mark.parametrize("spacing", ["vllm_bench", "renewal"])
def test_a_seeded_generator_gives_the_same_arrivals(spacing: str) -> None:
    config = GammaArrival(rate_per_s=2.0, burstiness=0.3, spacing=spacing)  # type: ignore[arg-type]
    first = arrival_times_s(config, rng(7), num_requests=1000)
    assert np.array_equal(first, arrival_times_s(config, rng(7), num_requests=1000))
    assert not np.array_equal(first, arrival_times_s(config, rng(8), num_requests=1000))


# --- scenario keys ---------------------------------------------------------------


def workload(**arrival: Any) -> dict[str, Any]:
    return {
        "kind": "synthetic",
        "arrival": arrival,
        "prompt_tokens": {"kind": "fixed", "tokens": 8},
        "output_tokens": {"kind": "fixed", "tokens": 8},
        "num_requests": 10,
    }


def test_old_scenario_keys_still_load_and_default_to_vllm_spacing() -> None:
    config = SyntheticWorkload.model_validate(workload(kind="gamma", rate_per_s=2, burstiness=0.5))
    assert isinstance(config.arrival, GammaArrival)
    assert config.arrival.spacing == "vllm_bench"
    poisson = SyntheticWorkload.model_validate(workload(kind="poisson", rate_per_s=2))
    assert isinstance(poisson.arrival, PoissonArrival) and poisson.arrival.spacing == "vllm_bench"


def test_infinite_rate_loads_from_yaml_and_refuses_a_duration() -> None:
    rate = yaml.safe_load("rate_per_s: .inf")["rate_per_s"]  # YAML's infinity
    config = SyntheticWorkload.model_validate(workload(kind="poisson", rate_per_s=rate))
    assert math.isinf(config.arrival.rate_per_s)
    doc = {**workload(kind="poisson", rate_per_s=INF), "num_requests": None, "duration_s": 5.0}
    with pytest.raises(
        ValidationError, match=r"rate_per_s .inf \(all at once\) needs num_requests"
    ):
        SyntheticWorkload.model_validate(doc)


def test_a_scenario_workload_ends_at_n_over_rate_and_renewal_does_not() -> None:
    """Through generate_open_loop (the arrival stream is the first of rng.spawn(3))."""
    config = SyntheticWorkload.model_validate(workload(kind="gamma", rate_per_s=4, burstiness=2))
    arrays = generate_open_loop(config, rng(9))
    assert arrays.arrival_s[-1] == pytest.approx(10 / 4, rel=1e-12)
    (arrival_rng, _, _) = rng(9).spawn(3)
    assert np.array_equal(
        arrays.arrival_s, arrival_times_s(config.arrival, arrival_rng, num_requests=10)
    )
    renewal = SyntheticWorkload.model_validate(
        workload(kind="gamma", rate_per_s=4, burstiness=2, spacing="renewal")
    )
    unscaled = generate_open_loop(renewal, rng(9)).arrival_s
    assert np.allclose(arrays.arrival_s, unscaled * (10 / 4) / unscaled[-1], rtol=1e-12)
    # The lengths do not depend on the spacing (their own streams).
    assert np.array_equal(
        arrays.num_prompt_tokens, generate_open_loop(renewal, rng(9)).num_prompt_tokens
    )
