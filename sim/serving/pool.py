"""A pool of replicas behind one router, or fed by one central queue.

Each replica has its own engine core, KV pool and step log (``replica`` =
its global index, so that several pools can share one numbering). The pool
keeps each replica's load (requests and tokens sent to it and not yet done)
for the router, updated when a request is sent and when its engine core
reports it done, so routing never depends on the progress of a skip-ahead run.

Central queue: requests wait in one FCFS queue; a replica holds at most
``central_slots`` requests (queued there or running) and pulls the next one
from the queue whenever one of its own finishes. With ``max_num_seqs: 1`` and
one slot, c replicas and exponential service times this is the M/M/c queue.
A pulled request keeps the time it entered the central queue as ``ready_s``,
so ``first_scheduled_s - ready_s`` is its whole wait; ``pulled_s`` (a records
column of a central-queue run only) is when it reached its replica, where its
engine's queue samples start counting it (NaN: still queued at the end).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import simpy

from sim.engine.records import RequestTable
from sim.engine.request import Request
from sim.serving.lockstep import LockstepGroup, LockstepMember
from sim.serving.replica import Replica
from sim.serving.router import ReplicaLoad, Router

if TYPE_CHECKING:
    from sim.cost.base import CostModel
    from sim.engine.scheduler import EngineCore
    from sim.serving.replica_config import ReplicaConfig


# Builds the executor that drives one replica's engine core: (env, core, cost) ->
# replica. The reference's is ``Replica`` itself, one event per step; the fast
# executor (``sim.api.build.simulation_for`` chooses) gives its own subclass.
ReplicaFactory = Callable[[simpy.Environment, "EngineCore", "CostModel"], Replica]


class Pool:
    """The replicas numbered ``numbers`` (a range); ``submit`` routes a request."""

    def __init__(
        self,
        env: simpy.Environment,
        replica_config: ReplicaConfig,
        new_replica: ReplicaFactory,
        numbers: range,
        router: Router,
        on_done: Callable[[Request], None],
        central_slots: int | None = None,
        lockstep: bool = False,
    ) -> None:
        self.env = env
        self.first_replica = numbers.start
        self.router = router
        self.on_done = on_done
        self.central_slots = central_slots or 0
        self.queue: deque[Request] | None = deque() if central_slots is not None else None
        # Central queue: each request sent to a replica and when (s), as 16 bytes a
        # request (a dict takes ~100: a capacity search sends millions).
        self._pulled_ids, self._pulled_s = array("q"), array("d")
        self.cores = [replica_config.core.new_core(i, self._done) for i in numbers]
        self.replicas: list[Replica] | list[LockstepMember]
        if lockstep:  # data-parallel ranks of an MoE model: one process steps them all
            self.replicas = LockstepGroup(env, self.cores, replica_config.cost).members
        else:
            self.replicas = [new_replica(env, core, replica_config.cost) for core in self.cores]
        self.front_replicas = self.replicas  # the replicas arrivals reach
        self.loads = [ReplicaLoad() for _ in numbers]

    @property
    def num_done(self) -> int:
        """Requests finished or rejected by this pool's engine cores."""
        return sum(core.num_done for core in self.cores)

    def set_horizon(self, horizon: Callable[[], float] | None) -> None:
        """The earliest time any new request can reach this pool (see ``Replica.horizon``).

        A pool of one replica ends its runs at the next arrival. With several, an
        arrival goes to the replica the router picks when it comes, so each
        replica is interrupted by its own arrivals instead (no horizon): ending
        every replica's runs at every arrival would make the cost of a run grow
        with the number of replicas.
        """
        if len(self.replicas) == 1:
            self.replicas[0].horizon = horizon

    def count_sent(self, index: int, request: Request) -> None:
        """Add ``request`` to replica ``index``'s load (``_done`` takes it off)."""
        load = self.loads[index]
        load.num_requests += 1
        load.num_tokens += request.num_prompt_tokens + request.num_output_tokens

    def submit(self, request: Request) -> None:
        """Send ``request`` to a replica now, or queue it centrally."""
        if self.queue is None:
            self._send(self.router.choose(request, self.loads), request)
            return
        if self.cores[0].rejection_reason(request) is not None:
            self._send(0, request)  # rejected at once: never queued
            return
        if not self.queue:
            slots = self.central_slots
            room = [i for i, load in enumerate(self.loads) if load.num_requests < slots]
            if room:
                choice = self.router.choose(request, [self.loads[i] for i in room])
                self._send(room[choice], request)
                return
        request.ready_s = self.env.now
        self.queue.append(request)

    def _send(self, index: int, request: Request, keep_ready: bool = False) -> None:
        self.count_sent(index, request)
        if self.queue is not None:
            self._pulled_ids.append(request.request_id)
            self._pulled_s.append(self.env.now)
        ready_s = request.ready_s
        self.replicas[index].submit(request)  # sets ready_s: now
        if keep_ready:
            request.ready_s = ready_s

    def _done(self, request: Request) -> None:
        """A request left replica ``request.replica``: update its load, let it pull."""
        index = request.replica - self.first_replica
        load = self.loads[index]
        load.num_requests -= 1
        load.num_tokens -= request.num_prompt_tokens + request.num_output_tokens
        queue = self.queue
        if queue and request.finish_s is not None:
            while queue and load.num_requests < self.central_slots:
                self._send(index, queue.popleft(), keep_ready=True)
        self.on_done(request)

    def add_pulled(self, records: RequestTable) -> None:
        """Give a central-queue run's ``records`` their ``pulled_s`` column (module
        docstring); a routed run's ``ready_s`` already is when they reached a replica."""
        if self.queue is not None:
            column = np.full(len(records), np.nan)
            rows, found = records.find(np.frombuffer(self._pulled_ids, np.int64))
            column[rows[found]] = np.frombuffer(self._pulled_s, np.float64)[found]
            records["pulled_s"] = column

    def flush(self) -> None:
        """Hand requests still in the central queue to replica 0's core, to be recorded unfinished.

        Call after the run, before ``EngineCore.flush_unfinished``.
        """
        if self.queue:
            core = self.cores[0]
            for request in self.queue:
                request.replica = core.replica
            core.waiting.extend(self.queue)
            self.queue.clear()
