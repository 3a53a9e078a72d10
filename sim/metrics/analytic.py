"""Textbook single-queue formulas, to set simulated curves against for teaching.

One FIFO queue in steady state with Poisson arrivals, M/G/1 (any service
distribution; Pollaczek–Khinchine): W_q = lambda * E[S^2] / (2 (1 - rho)),
with rho = lambda * E[S]. M/M/1 is the case E[S^2] = 2 E[S]^2, M/D/1 the case
E[S^2] = E[S]^2. Rates in requests per second, times in seconds; at or beyond
saturation (rho >= 1) the queue grows without bound and the wait is ``math.inf``.

A simulated engine is such a queue at batch size 1 (``max_num_seqs: 1`` or a
static batch of 1) with Poisson arrivals: a request's service time is its whole
engine time and ``TTFT = tokenize + W_q + prefill + detokenize``. With batching
the formulas no longer apply; that departure is what the comparison shows.
"""

from __future__ import annotations

import math


def utilisation(arrival_rate_per_s: float, mean_service_s: float) -> float:
    """rho = lambda * E[S]: the fraction of time one server is busy (if < 1); checks both."""
    if not arrival_rate_per_s >= 0 or not math.isfinite(arrival_rate_per_s):
        raise ValueError(f"arrival rate must be finite and >= 0, got {arrival_rate_per_s}")
    if not mean_service_s > 0 or not math.isfinite(mean_service_s):
        raise ValueError(f"mean service time must be finite and > 0, got {mean_service_s}")
    return arrival_rate_per_s * mean_service_s


def mg1_wait_s(
    arrival_rate_per_s: float, mean_service_s: float, second_moment_service_s2: float
) -> float:
    """Mean time in queue of M/G/1 (Pollaczek–Khinchine), ``inf`` if rho >= 1.

    ``second_moment_service_s2`` is E[S^2] in s^2 (= Var[S] + E[S]^2 >= E[S]^2).
    """
    rho = utilisation(arrival_rate_per_s, mean_service_s)
    if second_moment_service_s2 < mean_service_s**2 * (1 - 1e-12):
        raise ValueError(
            f"E[S^2] = {second_moment_service_s2} is below E[S]^2 = {mean_service_s**2}"
        )
    if rho >= 1:
        return math.inf
    return arrival_rate_per_s * second_moment_service_s2 / (2.0 * (1.0 - rho))
