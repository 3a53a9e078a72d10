"""A pool of replicas behind one router, or fed by one central queue.

Replicas are numbered globally (pools share one numbering). The pool keeps each
replica's load (requests and tokens sent, not yet done) for the router, updated
at send and at done, so routing never depends on a skip-ahead run's progress.

Central queue: one FCFS queue; a replica holds at most ``central_slots``
requests and pulls the next whenever one of its own finishes (one slot, one
sequence: the M/M/c queue). A pulled request keeps its central ``ready_s``;
``pulled_s`` (records column) is when it reached its replica (NaN: never).
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


# (env, core, cost) -> the executor of one replica's engine core: ``Replica``, or
# the fast executor's subclass.
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
        # Central queue: each request sent and when (s), 16 bytes a request.
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
        return sum(core.num_done for core in self.cores)

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
        """Give a central-queue run's ``records`` their ``pulled_s`` column."""
        if self.queue is not None:
            column = np.full(len(records), np.nan)
            rows, found = records.find(np.frombuffer(self._pulled_ids, np.int64))
            column[rows[found]] = np.frombuffer(self._pulled_s, np.float64)[found]
            records["pulled_s"] = column

    def flush(self) -> None:
        """After the run: the central queue to replica 0's core, recorded unfinished."""
        if self.queue:
            core = self.cores[0]
            for request in self.queue:
                request.replica = core.replica
            core.waiting.extend(self.queue)
            self.queue.clear()
