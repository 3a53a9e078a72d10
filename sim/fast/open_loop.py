"""The fast executor: a run simulated faster, to the bit, or declined.

``FastSimulation`` is the reference ``Simulation`` with the speed paths in front
(the package docstring); ``run_fast`` answers an open-loop run's ``RawResult``, the
reference's to the bit, or None, the cores untouched. It tries, in order:

1. the compiled loop (``sim.fast.compiled``): one replica, or a fresh
   round-robin pool, under plain continuous batching and a roofline cost or
   kernel tables;
2. worker processes (``sim.fast.workers``): a fresh round-robin pool's
   replicas, dealt to forked processes;
3. feeds (``sim.fast.feed``): every replica pulls its requests when it plans.

A run with a load-aware router, a central queue, lockstep ranks or
disaggregation is declined: only the reference plays it; so is an open loop
whose ``max_concurrency`` can bind (its sends wait for answers).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

from sim.errors import ConfigError
from sim.fast.feed import FedReplica, Feed, feedable, pool_feeds, take_feeds
from sim.fast.forks import forking_supported
from sim.fast.workers import default_num_workers, run_in_workers
from sim.serving.cluster import Cluster
from sim.serving.pool import Pool
from sim.serving.progress import Progress
from sim.serving.raw_result import RawResult, raw_result
from sim.serving.replica_config import ReplicaConfig
from sim.serving.simulation import Simulation
from sim.serving.submission import ClosedLoop, OpenLoop, concurrency_limit

# Below this many requests one run does not pay for the compiled loop's start-up
# (numba's import and a cached compilation's load, ~0.4 s once a process); a
# caller that makes many runs asks for it at any size (a sweep's points);
# SERVESIM_COMPILED=never|always|python overrides (tests, benchmarks).
MIN_REQUESTS = 20_000
MODES = ("auto", "always", "never", "python")


class FastSimulation(Simulation):
    """The reference executor with the speed paths in front (the module docstring).

    ``workers``: processes for a round-robin pool's replicas (None: as many as pay;
    1, or not Linux: this one only; after workers ran, this process's cores hold
    only its share). ``compiled``: whether the compiled loop takes a run it can
    play (None: by its size, ``choose_loop``).
    """

    def __init__(
        self,
        replica_config: ReplicaConfig,
        cluster: Cluster | None = None,
        workers: int | None = None,
        compiled: bool | None = None,
        progress: bool = False,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers: expected a positive count, got {workers}")
        self.workers = workers
        self.compiled = compiled
        super().__init__(replica_config, cluster, progress, FedReplica)

    def simulate(
        self, work: OpenLoop | ClosedLoop, bar: Progress, limit: int | None = None
    ) -> RawResult:
        """An open loop's run by the speed paths (``run_fast``), or the reference's."""
        if limit is None and not isinstance(work, ClosedLoop):
            raw = self.run_fast(work, bar)
            if raw is not None:
                return raw
        return super().simulate(work, bar, limit)

    def run_fast(self, work: OpenLoop, progress: Progress) -> RawResult | None:
        """Simulate ``work`` faster than the reference (one replica, or a fresh
        round-robin ``Pool``), or decline: None, the cores untouched."""
        if concurrency_limit(work) is not None:
            return None  # sends wait for answers: not known in advance
        replicas = self.replica if self.layout is None else self.layout
        if isinstance(replicas, FedReplica):
            cores = [replicas.core]
        elif isinstance(replicas, Pool) and feedable(replicas):
            cores = replicas.cores
        else:
            return None
        replica_config = self.replica_config
        frontend = replica_config.frontend
        loop = choose_loop(len(work.arrival_s), self.compiled)
        if loop is not None:
            # Imported here: the compiled loop's modules (numba) load only for a run that
            # takes that path (tests/test_cli_startup.py).
            from sim.fast.compiled import path

            cost = replica_config.cost
            if path.why_not(cores, cost, replica_config.skip_ahead, work) is None:
                played = cast("path.PlayedCost", cost)  # why_not checked its kind
                if path.run_compiled(cores, played, work, frontend, loop, progress.tick):
                    raw = self.result()  # the cores hold the run's logs
                    raw.accelerator = "compiled loop"
                    return raw
        if isinstance(replicas, FedReplica):
            # One replica takes its requests when it plans, and ends its runs at the next one.
            (feed,) = Feed.split(work, frontend, [replicas.core.add])
            replicas.core.on_done = None  # nobody waits for an answer in an open loop
            replicas.take_from(feed)
        else:
            # Round robin: each replica takes its own turns, so they may be
            # simulated in several processes at once.
            feeds = pool_feeds(replicas, work, frontend)
            num_workers = _num_workers(replicas, len(work.arrival_s), self.workers)
            if num_workers > 1:
                outputs = run_in_workers(replicas, feeds, num_workers, self.drive, progress)
                return raw_result(outputs, frontend)
            take_feeds(replicas, feeds)
        self.drive(progress.tick)
        return self.result()


def choose_loop(num_requests: int, wanted: bool | None = None) -> Callable[..., int] | None:
    """The compiled loop's function (uncompiled with ``SERVESIM_COMPILED=python``),
    or None. ``wanted``: None from ``MIN_REQUESTS`` requests, True at any size,
    False never; ``SERVESIM_COMPILED`` other than ``auto`` decides instead. Its
    modules (~15 ms) and numba are imported only when it is chosen."""
    mode = os.environ.get("SERVESIM_COMPILED", "auto")
    if mode not in MODES:
        raise ConfigError(f"SERVESIM_COMPILED={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "never" or (mode == "auto" and wanted is False):
        return None
    if mode == "auto" and wanted is None and num_requests < MIN_REQUESTS:
        return None
    from sim.fast.compiled import path

    # "python": the same function uncompiled: slow, for tests without numba.
    return path.loop.run if mode == "python" else path.compiled()


def _num_workers(pool: Pool, num_requests: int, wanted: int | None) -> int:
    """Processes for a round-robin pool (1 while a recorder watches the cores)."""
    if any(core.recorder is not None for core in pool.cores):
        return 1
    if wanted is not None:
        return min(wanted, len(pool.replicas)) if forking_supported() else 1
    return default_num_workers(len(pool.replicas), num_requests)
