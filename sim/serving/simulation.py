"""Wire a workload, a policy and a cost model into a SimPy run.

Requests arrive (an open loop at given times, capped or not by
``max_concurrency``; a closed loop of users who think, send and wait), take the
server's way in, then queue at one replica or at a ``Cluster``
(``sim.serving.cluster``); the frontend (``sim.serving.frontend``) decides after
the run when the client sees every token. This is the reference executor, one
SimPy event per submission; the speed paths build on it from above
(``sim.api.build.simulation_for`` chooses) and nothing here knows of them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from sim.cost.base import CostModel
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore
from sim.serving.cluster import Cluster, build_layout
from sim.serving.disagg import Disaggregated
from sim.serving.lockstep import LockstepMember
from sim.serving.pool import Pool, ReplicaFactory
from sim.serving.progress import Progress
from sim.serving.raw_result import CoreOutput, RawResult, raw_result
from sim.serving.replica import Replica
from sim.serving.replica_config import ReplicaConfig
from sim.serving.submission import (
    ClosedLoop,
    OpenLoop,
    concurrency_limit,
    requests_in_order,
    submission_order,
)


class Simulation:
    """One workload fed to one replica, or to a cluster; ``run`` returns a ``RawResult``."""

    def __init__(
        self,
        replica_config: ReplicaConfig,
        cluster: Cluster | None = None,
        progress: bool = False,
        new_replica: ReplicaFactory = Replica,
    ) -> None:
        """``progress``: a bar over building a cluster's replicas (thousands of prefix
        caches take minutes). ``new_replica``: the executor of each engine core."""
        self.replica_config = replica_config
        self.env = simpy.Environment()
        self._waiters: dict[int, simpy.Event] = {}
        # A capped open loop: free slots, and the sender's wait for one (or None).
        self._free_slots = 0
        self._slot_freed: simpy.Event | None = None
        self.layout: Pool | Disaggregated | None = None
        if cluster is None:
            self.core = replica_config.core.new_core(0, self._on_done)
            self.replica: Replica | LockstepMember = new_replica(
                self.env, self.core, replica_config.cost
            )
            self.cores = [self.core]
            self._submit: Callable[[Request], None] = self.replica.submit
        else:
            built = [0]
            bar = Progress(cluster.config.total_replicas, progress, lambda: built[0], "replica")

            def counted_replica(
                env: simpy.Environment, core: EngineCore, cost: CostModel
            ) -> Replica:
                replica = new_replica(env, core, cost)
                built[0] += 1
                bar.tick()
                return replica

            try:
                self.layout = build_layout(
                    self.env, replica_config, cluster, self._on_done, counted_replica
                )
            finally:
                bar.close()
            self.cores = self.layout.cores
            self.core = self.cores[0]
            self.replica = self.layout.front_replicas[0]
            self._submit = self.layout.submit

    @property
    def num_done(self) -> int:
        if self.layout is None:
            return self.core.num_done
        return self.layout.num_done

    def _on_done(self, request: Request) -> None:
        waiter = self._waiters.pop(request.request_id, None)
        if waiter is not None:
            waiter.succeed()

    def _send(self, request: Request) -> None:
        """The way in (a delay: ``FrontendConfig.way_in_s``), then hand to the replica."""
        delay = self.replica_config.frontend.way_in_one_s(request.num_prompt_tokens)
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _: self._submit(request))
        else:
            self._submit(request)

    def _open_loop(self, work: OpenLoop) -> Generator[simpy.Event, Any, None]:
        """Submit requests in the order their way in ends (known up front: no event
        for the way in)."""
        env = self.env
        ready, order = submission_order(work, self.replica_config.frontend)
        submit = self._submit
        for ready_s, request in zip(ready.tolist(), requests_in_order(work, order), strict=True):
            if ready_s > env.now:
                yield env.timeout(ready_s - env.now)
            submit(request)

    def _user(self, work: ClosedLoop, ids: list[int]) -> Generator[simpy.Event, Any, None]:
        env = self.env
        detokenize_s = self._answer_s()
        while ids[0] < work.num_requests:
            yield env.timeout(work.next_think_s())
            if ids[0] >= work.num_requests:
                return
            request_id = ids[0]
            ids[0] += 1
            num_prompt, num_output = work.next_lengths()
            request = Request(request_id, env.now, num_prompt, num_output)
            prefix = work.next_prefix()
            if prefix is not None:
                request.prefix_group, request.num_shared_prefix_tokens = prefix
            done = env.event()
            self._waiters[request_id] = done
            self._send(request)
            yield done
            if detokenize_s > 0:
                yield env.timeout(detokenize_s)

    def _limited_open_loop(self, work: OpenLoop, limit: int) -> Generator[simpy.Event, Any, None]:
        """Send requests at their arrival times, at most ``limit`` in flight, as
        ``vllm bench serve --max-concurrency``: an arrival finding every slot taken
        waits for an answer and is sent (its ``arrival_s``) then."""
        env = self.env
        answer_s = self._answer_s()
        self._free_slots = limit

        def free_slot(_: object) -> None:
            self._free_slots += 1
            waiting = self._slot_freed
            if waiting is not None and not waiting.triggered:
                waiting.succeed()

        def answered(_: object) -> None:
            if answer_s > 0:
                env.timeout(answer_s).callbacks.append(free_slot)
            else:
                free_slot(None)

        in_arrival_order = np.arange(len(work.arrival_s), dtype=np.intp)
        for request in requests_in_order(work, in_arrival_order):
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            while self._free_slots == 0:
                self._slot_freed = env.event()
                yield self._slot_freed
                self._slot_freed = None
            self._free_slots -= 1
            if env.now > request.arrival_s:
                request.arrival_s = env.now  # sent when it got its slot
            done = env.event()
            done.callbacks.append(answered)
            self._waiters[request.request_id] = done
            self._send(request)

    def _answer_s(self) -> float:
        """When a client has its answer after the engine's finish: the frontend's
        no-queue time for one output (its queue is worked out after the run)."""
        frontend = self.replica_config.frontend
        return frontend.output_step_s + frontend.detokenize_s_per_token

    def run(self, work: OpenLoop | ClosedLoop, progress: bool = False) -> RawResult:
        """Simulate until every request has finished or been rejected."""
        total = work.num_requests if isinstance(work, ClosedLoop) else len(work.arrival_s)
        bar = Progress(total, progress, lambda: self.num_done)
        try:
            result = self.simulate(work, bar)
        finally:
            bar.close()
        result.num_sent = total
        return result

    def simulate(
        self, work: OpenLoop | ClosedLoop, bar: Progress, limit: int | None = None
    ) -> RawResult:
        """Run ``work`` to its end in this process and return its result (``limit``:
        an open loop's cap on requests in flight, by default its own)."""
        if isinstance(work, ClosedLoop):
            ids = [0]
            for _ in range(work.num_users):
                self.env.process(self._user(work, ids))
        elif limit is not None or (limit := concurrency_limit(work)) is not None:
            # Sends wait for answers.
            self.env.process(self._limited_open_loop(work, limit))
        else:
            self.env.process(self._open_loop(work))
        self.drive(bar.tick)
        return self.result()

    def drive(self, tick: Callable[[], None]) -> None:
        """Run the environment to its end, calling ``tick`` every 4,096 events."""
        step = self.env.step
        try:
            while True:
                for _ in range(4096):
                    step()
                tick()
        except simpy.core.EmptySchedule:
            pass

    def result(self) -> RawResult:
        """The run's result, from every core's outputs (the run is over)."""
        if self.layout is not None:
            self.layout.flush()
        for core in self.cores:
            core.flush_unfinished()
        layout = self.layout
        disaggregated = layout.requests_table if isinstance(layout, Disaggregated) else None
        outputs = [CoreOutput.of(core) for core in self.cores]
        result = raw_result(outputs, self.replica_config.frontend, disaggregated)
        if isinstance(layout, Pool):
            layout.add_pulled(result.records)
        return result
