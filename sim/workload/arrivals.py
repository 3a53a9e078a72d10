"""Open-loop arrival processes: when requests arrive, in seconds.

Three processes, chosen by ``kind``: ``poisson`` (exponential gaps),
``gamma`` (gamma gaps, as ``vllm bench serve --burstiness``: shape =
``burstiness``, scale = ``1 / (rate_per_s * burstiness)``; burstiness 1 is
Poisson, ``.inf`` constant) and ``constant`` (gaps of exactly ``1 / rate_per_s``).
``rate_per_s: .inf`` sends every request at 0; it needs ``num_requests``.

``num_requests`` arrivals follow ``vllm bench serve``'s ``get_request``
(docs/vllm-fidelity.md, "Arrivals as ``vllm bench serve`` sends them"): running
sums of the gaps rescaled so that arrival k is ``S_k * (N / R) / S_N`` and the
last goes at exactly N / R.
``spacing: renewal`` keeps the sums unscaled (a stationary renewal process,
exactly Poisson for ``poisson``, as queueing theory assumes); ``duration_s``
(every arrival before it) always draws the renewal process.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sim.config import FloatArray, Frozen
from sim.errors import ConfigError

MAX_GENERATED_REQUESTS = 100_000_000
"""Refuse a ``duration_s`` that would need more arrivals than this (memory)."""

MAX_CLOCK_S = 2.0**32
"""The latest time a run's clock may reach, s (~136 years): below it float64 times are
at most 2**-21 s (0.48 us) apart, so latencies keep the 0.01 ms they are printed to.
Every simulated time is absolute, so far beyond it a step of a few ms is rounded away
(at 1e-15 req/s every latency came out 0); moving the origin would only move the
problem to the next arrival. The limit leaves room for a capacity search's lowest
probe (its start rate / 2**20) of 2,000 requests at 1 req/s (2e9 s)."""


# A rate may be .inf (every request at 0, as vllm bench serve's default), never 0 or NaN.
RatePerS = Annotated[float, Field(gt=0, allow_inf_nan=True)]
Spacing = Literal["vllm_bench", "renewal"]
"""How ``num_requests`` arrivals are placed: rescaled as ``vllm bench serve`` does, or not."""


class PoissonArrival(Frozen):
    """Poisson process: independent exponential gaps with mean ``1 / rate_per_s``."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: RatePerS
    spacing: Spacing = "vllm_bench"


class GammaArrival(Frozen):
    """Gamma gaps with mean ``1 / rate_per_s`` and shape ``burstiness`` (``.inf``: constant)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: RatePerS
    burstiness: float = Field(default=1.0, gt=0, allow_inf_nan=True)
    spacing: Spacing = "vllm_bench"


class ConstantArrival(Frozen):
    """Evenly spaced arrivals, ``rate_per_s`` per second (burstiness ``.inf``)."""

    kind: Literal["constant"] = "constant"
    rate_per_s: RatePerS


ArrivalConfig = Annotated[
    PoissonArrival | GammaArrival | ConstantArrival, Field(discriminator="kind")
]
"""Any arrival process, chosen by its ``kind``."""


def _is_constant(config: ArrivalConfig) -> bool:
    """Whether the gaps are all ``1 / rate_per_s`` (constant, or gamma of infinite shape)."""
    return isinstance(config, ConstantArrival) or (
        isinstance(config, GammaArrival) and math.isinf(config.burstiness)
    )


def sample_gaps_s(config: ArrivalConfig, rng: np.random.Generator, size: int) -> FloatArray:
    """``size`` inter-arrival gaps in seconds, float64, each >= 0 (0 at an infinite rate)."""
    mean_s = 1.0 / config.rate_per_s  # 0.0 at rate .inf
    if _is_constant(config) or mean_s == 0.0:
        return np.full(size, mean_s, dtype=np.float64)
    if isinstance(config, PoissonArrival):
        return rng.exponential(mean_s, size=size)
    assert isinstance(config, GammaArrival)
    # vllm bench serve: np.random.gamma(shape=burstiness, scale=1 / (rate * burstiness)).
    return rng.gamma(config.burstiness, mean_s / config.burstiness, size=size)


def arrival_times_s(
    config: ArrivalConfig,
    rng: np.random.Generator,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> FloatArray:
    """Arrival times in seconds (float64, non-decreasing, first one > 0 unless a gap is 0).

    Give exactly one of ``num_requests`` (that many arrivals) or
    ``duration_s`` (every arrival strictly before it, possibly none).
    """
    if (num_requests is None) == (duration_s is None):
        raise ValueError("give exactly one of num_requests and duration_s")
    if num_requests is not None:
        if num_requests < 0:
            raise ValueError("num_requests must be >= 0")
        return _first_n(config, rng, num_requests)
    assert duration_s is not None
    if duration_s < 0:
        raise ValueError("duration_s must be >= 0")
    if math.isinf(config.rate_per_s):
        raise ConfigError("arrival.rate_per_s: .inf needs num_requests, not duration_s")
    return _arrivals_before(config, rng, duration_s)


def _first_n(config: ArrivalConfig, rng: np.random.Generator, num: int) -> FloatArray:
    """``num`` arrivals, rescaled as ``vllm bench serve`` does unless the spacing is renewal."""
    if _is_constant(config):
        # k / rate rather than a running sum: no rounding drift. vllm bench serve's
        # rescaling leaves these unchanged (the last is already num / rate).
        return np.arange(1, num + 1, dtype=np.float64) / config.rate_per_s
    times = np.cumsum(sample_gaps_s(config, rng, num))
    assert not isinstance(config, ConstantArrival)
    if config.spacing == "renewal" or num == 0 or times[-1] == 0.0:
        return times  # an infinite rate: every request at 0, as in vllm bench serve
    # get_request: delay_ts[i] *= (total_requests / request_rate) / delay_ts[-1].
    factor = (num / config.rate_per_s) / float(times[-1])
    return times * factor


def _arrivals_before(
    config: ArrivalConfig, rng: np.random.Generator, duration_s: float
) -> FloatArray:
    """All arrivals in ``[0, duration_s)``, drawing gaps in a few large blocks."""
    expected = config.rate_per_s * duration_s
    if duration_s == 0:
        return np.zeros(0, dtype=np.float64)
    if expected > MAX_GENERATED_REQUESTS:
        raise ConfigError(
            f"arrival: rate_per_s * duration_s = {expected:.3g} requests, "
            f"more than the limit of {MAX_GENERATED_REQUESTS}"
        )
    if _is_constant(config):
        count = math.ceil(expected) + 1
        times = np.arange(1, count + 1, dtype=np.float64) / config.rate_per_s
        return times[times < duration_s]
    # Block size: the mean count plus six standard deviations of it (the
    # count's variance is about mean * CV^2 for a renewal process), so one
    # block nearly always suffices. Sizes depend only on the config, which
    # keeps the draws deterministic for a given seed.
    cv_squared = 1.0 / config.burstiness if isinstance(config, GammaArrival) else 1.0
    block = int(expected + 6.0 * math.sqrt(expected * cv_squared) + 16)
    blocks: list[FloatArray] = []
    last_s = 0.0
    while last_s < duration_s:
        times = last_s + np.cumsum(sample_gaps_s(config, rng, block))
        blocks.append(times)
        last_s = float(times[-1])
    times = np.concatenate(blocks)
    return times[: int(np.searchsorted(times, duration_s, side="left"))]


def check_clock(latest_s: float, field: str) -> None:
    """Refuse a run whose clock would reach ``latest_s`` (its last arrival, s) at or
    beyond ``MAX_CLOCK_S``, where its times can no longer resolve a latency;
    ``field`` names the setting that put it there."""
    if latest_s >= MAX_CLOCK_S:
        raise ConfigError(
            f"{field}: the run's clock would reach {latest_s:.3g} s, where float64 times "
            f"are {math.ulp(latest_s):.2g} s apart and latencies lose their precision; "
            f"keep the last arrival before {MAX_CLOCK_S:.3g} s (about 136 years)"
        )
