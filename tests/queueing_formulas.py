"""Textbook queueing formulas the tests check the simulator against (M/M/1, M/D/1, M/M/c).

Special cases of ``sim.metrics.analytic.mg1_wait_s`` (M/G/1) and Erlang C for
several servers; rates in requests per second, times in seconds, ``math.inf``
at or beyond saturation:

- M/M/1: exponential service;  W_q = rho * S / (1 - rho).
- M/D/1: deterministic service; W_q = rho * S / (2 (1 - rho)).
- M/M/c: c exponential servers; W_q = C(c, a) / (c mu - lambda), where
  C is the Erlang C probability of waiting and a = lambda / mu.

Sojourn time is ``W_q + E[S]``.
"""

from __future__ import annotations

import math

from sim.metrics.analytic import mg1_wait_s, utilisation


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
