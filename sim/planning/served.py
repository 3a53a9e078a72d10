"""Whether a run's server keeps up with the load offered to it.

An SLO on a tail statistic alone does not bound capacity: with a finite
request count the backlog of an overloaded server stops growing when the
arrivals stop, so a loose limit (``ttft_p99_ms=20000``) holds at any rate,
even when every request arrives at once. A load is *served* when completed
throughput keeps up with the offered rate, i.e. the number of requests in
the system does not grow.

The served ratio counts, over the second half of the arrivals (from the
median arrival time ``t_mid`` to the last one ``t_end``), completions per
arrival::

    served_ratio = #{finish in (t_mid, t_end]} / #{arrival in (t_mid, t_end]}
                 = 1 - (growth of the number in system over the window) / #arrivals

A stable server is stationary there, so the ratio is ~1; an overloaded one
completes requests at its own rate mu < lambda and the ratio is mu / lambda.
The first half is left out as warm-up (the server starts empty), and the
drain after the last arrival is never counted, which is why this is not
``completed / duration`` (that conflates the drain with overload). A run too
short to reach steady state (window shorter than a few latencies) reads low:
more requests per run fix that.

The ratio only means something where the load is the workload's own: a client
that waits for answers before it sends (a closed loop, or an open loop whose
``max_concurrency`` binds: an arrival past the cap is sent when a slot frees,
and its recorded arrival is that send time) always "keeps up" by
construction. Such a run has no served ratio (``served_ratio_of``: None); its
load is the number of clients, and its rate what they send
(:func:`sim.planning.sweep_exec.offered_rate_per_s`).
"""

from __future__ import annotations

import numpy as np

from sim.workload.generate import WorkloadConfig

SERVED_MIN_RATIO = 0.95
"""A load is served when its mean served ratio is at least this.

Why not 1: a stable run measures the ratio with a few percent of noise
(2000 chat requests at 20 req/s: 0.97-1.02 over seeds), and a queue growing
at 5 % of the arrival rate is a slow drift rather than overload.
"""


def served_ratio(arrival_s: np.ndarray, finish_s: np.ndarray) -> float:
    """Completions per arrival over the second half of the arrivals (module docstring).

    Only completed requests count (``finish_s`` NaN or inf: rejected or
    unfinished); none completed scores 0. When the window is empty because
    the arrivals are simultaneous, one request is served (1) and a batch of
    several is not (0: an infinite rate).
    """
    done = np.isfinite(np.asarray(finish_s, dtype=float))
    arrivals = np.asarray(arrival_s, dtype=float)[done]
    finishes = np.asarray(finish_s, dtype=float)[done]
    if arrivals.size == 0:
        return 0.0
    mid_s, end_s = float(np.median(arrivals)), float(arrivals.max())
    num_arrived = int(np.count_nonzero((arrivals > mid_s) & (arrivals <= end_s)))
    if num_arrived == 0:
        return 1.0 if arrivals.size == 1 else 0.0
    num_finished = int(np.count_nonzero((finishes > mid_s) & (finishes <= end_s)))
    return num_finished / num_arrived


def load_set_by_clients(workload: WorkloadConfig, num_requests: int) -> bool:
    """Whether the run's sends wait on the server's answers (module docstring): a
    closed loop, or an open loop whose ``max_concurrency`` is below its number of
    requests (``sim.serving.submission.concurrency_limit``'s rule for a binding cap)."""
    if workload.kind == "closed_loop":
        return True
    limit = workload.max_concurrency
    return limit is not None and limit < num_requests


def served_ratio_of(
    workload: WorkloadConfig, arrival_s: np.ndarray, finish_s: np.ndarray
) -> float | None:
    """A run's served ratio, or None where its clients set its load (module docstring)."""
    if load_set_by_clients(workload, np.asarray(arrival_s).size):
        return None
    return served_ratio(arrival_s, finish_s)
