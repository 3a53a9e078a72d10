"""Wire a workload, a policy and a cost model into a SimPy run.

Requests arrive (open loop: at given times; closed loop: users who think,
send, and wait for the answer), take the server's way in (the API server's
per-request work, IPC to the engine core, tokenization), then queue at the
replica. The frontend (``sim.serving.frontend``) turns each step's outputs
into streamed chunks after the engine; its queue decides when the client sees
every token.
With a ``Cluster`` the requests go to a router in front of several replicas,
or to disaggregated prefill and decode pools (``sim.serving.cluster``); without one,
to a single replica.

An open loop capped at ``max_concurrency`` requests in flight (when the cap
can bind) runs as a closed loop does, each send waiting for a slot
(``_limited_open_loop``).

This is the reference executor: one SimPy event per submission, every core an
``EngineCore``. The speed paths build on it from above and give the same result
to the bit; the face that builds a run (``sim.api.build.simulation_for``)
chooses between the two, once. Nothing here knows of them.
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
        """Every open-loop request is handed over at an event of its own; with
        ``engine.skip_ahead: false`` every step is one too (docs/architecture.md,
        the path of one request).

        ``progress``: a bar over building a cluster's replicas, once that takes a
        while (thousands of prefix caches: minutes; ``sim.workload.size``).
        ``new_replica`` builds the executor of each replica's engine core (by
        default the reference ``Replica``, a step per event).
        """
        self.replica_config = replica_config
        self.env = simpy.Environment()
        self._waiters: dict[int, simpy.Event] = {}
        # A capped open loop: free slots, and the sender's wait for one (or None).
        self._free_slots = 0
        self._slot_freed: simpy.Event | None = None
        self._next_ready_s = 0.0
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
        """Requests finished or rejected so far."""
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
        """Submit requests in the order their way in ends.

        All arrival times are known, so the way in needs no event of its
        own, and replicas can read the next submission time from
        ``_next_ready_s`` instead of being interrupted by it.
        """
        env = self.env
        ready, order = submission_order(work, self.replica_config.frontend)
        ready_s = ready.tolist()
        ready_s.append(float("inf"))
        submit = self._submit
        for i, request in enumerate(requests_in_order(work, order)):
            if ready_s[i] > env.now:
                yield env.timeout(ready_s[i] - env.now)
            self._next_ready_s = ready_s[i + 1]
            submit(request)

    def _user(self, work: ClosedLoop, ids: list[int]) -> Generator[simpy.Event, Any, None]:
        env = self.env
        # A user sees the answer once the frontend has sent the last token; the
        # frontend's queue is computed after the run, so users wait its
        # no-queue time for one output (docs/vllm-fidelity.md).
        frontend = self.replica_config.frontend
        detokenize_s = frontend.output_step_s + frontend.detokenize_s_per_token
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
        """Send requests at their arrival times, at most ``limit`` in flight.

        As ``vllm bench serve --max-concurrency`` (an asyncio semaphore around
        each request): an arrival that finds every slot taken waits, in arrival
        order, until an answer is in; it is sent then, and its ``arrival_s``
        (from which TTFT counts, as the client's clock starts when it sends)
        becomes that time. An answer is in when the frontend has sent the
        last token: the engine's finish plus the frontend's no-queue time for
        one output, as closed-loop users wait (docs/vllm-fidelity.md).
        """
        env = self.env
        frontend = self.replica_config.frontend
        answer_s = frontend.output_step_s + frontend.detokenize_s_per_token
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
        """Run ``work`` to its end in this process, one SimPy event per submission
        (``limit``: an open loop's cap on requests in flight, by default its own
        when it can bind), and return its result (``bar`` ticks meanwhile)."""
        if isinstance(work, ClosedLoop):
            ids = [0]
            for _ in range(work.num_users):
                self.env.process(self._user(work, ids))
        elif limit is not None or (limit := concurrency_limit(work)) is not None:
            # Sends wait for answers, so they are not known in advance: replicas
            # are interrupted by them, as by a closed loop's (no horizon).
            self.env.process(self._limited_open_loop(work, limit))
        else:
            # A single replica or a pool of one ends its runs at the next
            # arrival; several are interrupted by the arrivals routed to them
            # (Pool.set_horizon).
            if self.layout is None:
                self.replica.horizon = self._horizon
            else:
                self.layout.set_horizon(self._horizon)
            self.env.process(self._open_loop(work))
        self.drive(bar.tick)
        return self.result()

    def _horizon(self) -> float:
        return self._next_ready_s

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
