"""Whether a run's server keeps up with the load offered to it.

docs/capacity.md ("Served, not only within SLO") tells why an SLO alone does not
bound capacity. The served ratio counts completions per arrival over the second half
of the arrivals (from the median arrival ``t_mid`` to the last ``t_end``)::

    served_ratio = #{finish in (t_mid, t_end]} / #{arrival in (t_mid, t_end]}
                 = 1 - (growth of the number in system over the window) / #arrivals

~1 for a stable server, mu / lambda for an overloaded one. The first half is warm-up
(the server starts empty) and the drain after the last arrival is never counted (so
this is not ``completed / duration``). Where clients wait for answers before they send
(a closed loop, or a binding ``max_concurrency``) the load is theirs and a run always
keeps up: it has no served ratio (``served_ratio_of``: None).
"""

from __future__ import annotations

import numpy as np

from sim.workload.generate import WorkloadConfig

SERVED_MIN_RATIO = 0.95
"""A load is served when its mean served ratio is at least this; not 1, since a stable
run measures it with a few percent of noise (2000 chat requests at 20 req/s: 0.97-1.02
over seeds), and a queue growing at 5 % of the arrival rate is a drift, not overload."""


def served_ratio(arrival_s: np.ndarray, finish_s: np.ndarray) -> float:
    """Completions per arrival over the second half of the arrivals (module docstring),
    of completed requests only (none: 0); simultaneous arrivals leave the window empty:
    one request is served (1), several are not (0: an infinite rate)."""
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
