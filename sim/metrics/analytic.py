"""Textbook single-queue formulas, to set simulated curves against for teaching.

All functions are pure: rates in requests per second, times in seconds. They
describe one FIFO queue in steady state with Poisson arrivals (the "M/"):

- M/M/1: exponential service;  W_q = rho * S / (1 - rho).
- M/D/1: deterministic service; W_q = rho * S / (2 (1 - rho)).
- M/G/1: any service distribution, Pollaczek–Khinchine:
  W_q = lambda * E[S^2] / (2 (1 - rho)), with rho = lambda * E[S].
- M/M/c: c exponential servers; W_q = C(c, a) / (c mu - lambda), where
  C is the Erlang C probability of waiting and a = lambda / mu.

Waiting time ``W_q`` is time in queue; sojourn time is ``W_q + E[S]``. At or
beyond saturation (rho >= 1) the queue grows without bound and the functions
return ``math.inf``.

When a simulated engine is such a queue: batch size 1 (``max_num_seqs: 1`` or
a static batch of 1), Poisson arrivals, tokenization that does not reorder
requests. Then a request's service time is its whole engine time (prefill and
every decode step) and ``TTFT = tokenize + W_q + prefill + detokenize``. With
batching the engine serves many requests at once and these formulas no longer
apply; that departure is what the comparison shows.
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


def mm1_wait_s(arrival_rate_per_s: float, service_s: float) -> float:
    """Mean time in queue of M/M/1 with mean service ``service_s``: rho S / (1 - rho)."""
    return mg1_wait_s(arrival_rate_per_s, service_s, 2.0 * service_s**2)


def mm1_sojourn_s(arrival_rate_per_s: float, service_s: float) -> float:
    """Mean time in system of M/M/1: S / (1 - rho)."""
    return mm1_wait_s(arrival_rate_per_s, service_s) + service_s


def md1_wait_s(arrival_rate_per_s: float, service_s: float) -> float:
    """Mean time in queue of M/D/1 with constant service ``service_s``: rho S / (2 (1 - rho))."""
    return mg1_wait_s(arrival_rate_per_s, service_s, service_s**2)


def md1_sojourn_s(arrival_rate_per_s: float, service_s: float) -> float:
    """Mean time in system of M/D/1."""
    return md1_wait_s(arrival_rate_per_s, service_s) + service_s


def md1_max_rate_per_s(service_s: float, max_wait_s: float) -> float:
    """The arrival rate at which the M/D/1 mean wait equals ``max_wait_s``.

    Solves lambda S^2 / (2 (1 - lambda S)) = w for lambda:
    lambda = 2 w / (S (S + 2 w)). Used to check capacity searches.
    """
    if not service_s > 0 or not max_wait_s >= 0:
        raise ValueError("service time must be > 0 and the wait >= 0")
    return 2.0 * max_wait_s / (service_s * (service_s + 2.0 * max_wait_s))


def erlang_c(num_servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in M/M/c (Erlang C).

    ``offered_load`` is a = lambda / mu in Erlangs; returns 1.0 when a >= c.
    Computed through the Erlang B recursion, stable for large ``num_servers``.
    """
    if num_servers < 1:
        raise ValueError(f"need at least one server, got {num_servers}")
    if not offered_load >= 0 or not math.isfinite(offered_load):
        raise ValueError(f"offered load must be finite and >= 0, got {offered_load}")
    if offered_load >= num_servers:
        return 1.0
    erlang_b = 1.0
    for k in range(1, num_servers + 1):
        erlang_b = offered_load * erlang_b / (k + offered_load * erlang_b)
    rho = offered_load / num_servers
    return erlang_b / (1.0 - rho + rho * erlang_b)


def mmc_wait_s(arrival_rate_per_s: float, service_s: float, num_servers: int) -> float:
    """Mean time in queue of M/M/c: C(c, a) / (c mu - lambda), ``inf`` if rho >= 1."""
    offered = utilisation(arrival_rate_per_s, service_s)
    if offered >= num_servers:
        return math.inf
    service_rate_per_s = 1.0 / service_s
    return erlang_c(num_servers, offered) / (num_servers * service_rate_per_s - arrival_rate_per_s)


def mmc_sojourn_s(arrival_rate_per_s: float, service_s: float, num_servers: int) -> float:
    """Mean time in system of M/M/c."""
    return mmc_wait_s(arrival_rate_per_s, service_s, num_servers) + service_s
