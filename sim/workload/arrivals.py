"""Open-loop arrival processes: when requests arrive, in seconds.

Three processes, chosen by ``kind``: ``poisson`` (exponential gaps),
``gamma`` (gamma gaps, as ``vllm bench serve --burstiness``: shape =
``burstiness``, scale = ``1 / (rate_per_s * burstiness)``, so the mean gap is
``1 / rate_per_s`` and its coefficient of variation ``1 / sqrt(burstiness)``;
burstiness 1 is Poisson, below 1 burstier, above 1 smoother) and
``constant`` (a gap of exactly ``1 / rate_per_s``).

Convention: the clock starts at 0 and the *first arrival comes one gap
later*; arrival ``k`` is the sum of the first ``k`` gaps. For ``poisson``
this makes the arrivals in ``[0, duration_s)`` exactly a Poisson process.
(``vllm bench serve`` instead sends its first request at 0.)
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from sim.errors import ConfigError

FloatArray = npt.NDArray[np.float64]

MAX_GENERATED_REQUESTS = 100_000_000
"""Refuse a ``duration_s`` that would need more arrivals than this (memory)."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoissonArrival(_Config):
    """Poisson process: independent exponential gaps with mean ``1 / rate_per_s``."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0, allow_inf_nan=False)


class GammaArrival(_Config):
    """Gamma gaps with mean ``1 / rate_per_s`` and shape ``burstiness``."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = Field(gt=0, allow_inf_nan=False)
    burstiness: float = Field(default=1.0, gt=0, allow_inf_nan=False)


class ConstantArrival(_Config):
    """Evenly spaced arrivals, ``rate_per_s`` per second."""

    kind: Literal["constant"] = "constant"
    rate_per_s: float = Field(gt=0, allow_inf_nan=False)


ArrivalConfig = Annotated[
    PoissonArrival | GammaArrival | ConstantArrival, Field(discriminator="kind")
]
"""Any arrival process, chosen by its ``kind``."""


def sample_gaps_s(config: ArrivalConfig, rng: np.random.Generator, size: int) -> FloatArray:
    """``size`` inter-arrival gaps in seconds, float64, each >= 0."""
    if isinstance(config, PoissonArrival):
        return rng.exponential(1.0 / config.rate_per_s, size=size)
    if isinstance(config, GammaArrival):
        scale_s = 1.0 / (config.rate_per_s * config.burstiness)
        return rng.gamma(config.burstiness, scale_s, size=size)
    return np.full(size, 1.0 / config.rate_per_s, dtype=np.float64)


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
        if isinstance(config, ConstantArrival):
            # k / rate rather than a running sum: no rounding drift.
            return np.arange(1, num_requests + 1, dtype=np.float64) / config.rate_per_s
        return np.cumsum(sample_gaps_s(config, rng, num_requests))
    assert duration_s is not None
    if duration_s < 0:
        raise ValueError("duration_s must be >= 0")
    return _arrivals_before(config, rng, duration_s)


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
    if isinstance(config, ConstantArrival):
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
