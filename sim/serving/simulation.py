"""Wire a workload, a policy and a cost model into a SimPy run.

Requests arrive (open loop: at given times; closed loop: users who think,
send, and wait for the answer), spend CPU time being tokenized, then queue at
the replica. The frontend (``sim.serving.frontend``) turns each step's outputs
into streamed chunks after the engine; its queue decides when the client sees
every token.
With a ``Cluster`` the requests go to a router in front of several replicas,
or to disaggregated prefill and decode pools (``sim.serving.cluster``); without one,
a single replica is fed directly (the fast path).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol, runtime_checkable

import simpy

from sim.engine.request import Request
from sim.serving.cluster import Cluster, build_layout
from sim.serving.core_output import CoreOutput
from sim.serving.disagg import Disaggregated
from sim.serving.engine_config import Engine
from sim.serving.feed import Feed, OpenLoop, requests_in_order, submission_order
from sim.serving.forks import forking_supported
from sim.serving.lockstep import LockstepMember
from sim.serving.pool import Pool
from sim.serving.progress import Progress
from sim.serving.raw_result import RawResult, raw_result
from sim.serving.replica import Replica, replica_core
from sim.serving.workers import default_num_workers, run_in_workers


@runtime_checkable
class ClosedLoop(Protocol):
    """Users who think, send a request, and wait for its answer."""

    num_users: int
    num_requests: int

    def next_lengths(self) -> tuple[int, int]: ...

    def next_think_s(self) -> float: ...


class Simulation:
    """One workload fed to one replica, or to a cluster; ``run`` returns a ``RawResult``."""

    def __init__(
        self,
        engine: Engine,
        cluster: Cluster | None = None,
        feed: bool = True,
        workers: int | None = None,
        compiled: bool | None = None,
    ) -> None:
        """``feed=False`` hands every open-loop request over at an event of its own,
        as a cluster of other routers does (the reference the feeds are tested against).

        ``workers``: processes to simulate a round-robin pool's replicas in
        (``sim.serving.workers``; the result is the same whatever the number).
        None: as many as pay, up to one per usable CPU; 1: this process only
        (and on other systems than Linux, whatever is asked). When workers ran,
        this process's cores hold only its own share of the run.

        ``compiled``: whether a run the compiled loop can play takes it
        (``sim.serving.compiled.path.choose_loop``): None by its size, True at
        any size, False never.
        """
        if workers is not None and workers < 1:
            raise ValueError(f"workers: expected a positive count, got {workers}")
        self.engine = engine
        self.feed = feed
        self.workers = workers
        self.compiled = compiled
        self.played_compiled = False  # whether the compiled loop simulated the run
        self.env = simpy.Environment()
        self._waiters: dict[int, simpy.Event] = {}
        self._next_ready_s = 0.0
        # Open loop: every submission's time (inf last) and the index of the next.
        self._ready_s: list[float] = [float("inf")]
        self._next_index = 0
        self.layout: Pool | Disaggregated | None = None
        if cluster is None:
            self.core = replica_core(
                engine.make_policy(),
                engine.new_block_pool(),
                engine.max_model_len_tokens,
                on_done=self._on_done,
                skip_ahead=engine.skip_ahead,
            )
            self.replica: Replica | LockstepMember = Replica(
                self.env, self.core, engine.cost, engine.skip_ahead
            )
            self.cores = [self.core]
            self._submit: Callable[[Request], None] = self.replica.submit
        else:
            self.layout = build_layout(self.env, engine, cluster, self._on_done)
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
        """Tokenize (a delay), then hand to the replica."""
        delay = self.engine.frontend.tokenize_s_per_token * request.num_prompt_tokens
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _: self._submit(request))
        else:
            self._submit(request)

    def _open_loop(self, work: OpenLoop) -> Generator[simpy.Event, Any, None]:
        """Submit requests to a cluster in the order their tokenization ends.

        All arrival times are known, so tokenization needs no event of its
        own, and replicas can read the next submission time from
        ``_next_ready_s`` instead of being interrupted by it. (A single
        replica takes its requests from a ``Feed`` instead: ``sim.serving.feed``.)
        """
        env = self.env
        ready, order = submission_order(work, self.engine.frontend.tokenize_s_per_token)
        ready_s = ready.tolist()
        ready_s.append(float("inf"))
        self._ready_s = ready_s
        submit = self._submit
        for i, request in enumerate(requests_in_order(work, order)):
            if ready_s[i] > env.now:
                yield env.timeout(ready_s[i] - env.now)
            self._next_ready_s = ready_s[i + 1]
            self._next_index = i + 1
            submit(request)

    def _user(self, work: ClosedLoop, ids: list[int]) -> Generator[simpy.Event, Any, None]:
        env = self.env
        # A user sees the answer once the frontend has sent the last token; the
        # frontend's queue is computed after the run, so users wait its
        # no-queue time for one output (docs/vllm-fidelity.md).
        frontend = self.engine.frontend
        detokenize_s = frontend.output_step_s + frontend.detokenize_s_per_token
        while ids[0] < work.num_requests:
            yield env.timeout(work.next_think_s())
            if ids[0] >= work.num_requests:
                return
            request_id = ids[0]
            ids[0] += 1
            num_prompt, num_output = work.next_lengths()
            done = env.event()
            self._waiters[request_id] = done
            self._send(Request(request_id, env.now, num_prompt, num_output))
            yield done
            if detokenize_s > 0:
                yield env.timeout(detokenize_s)

    def run(self, work: OpenLoop | ClosedLoop, progress: bool = False) -> RawResult:
        """Simulate until every request has finished or been rejected."""
        total = work.num_requests if isinstance(work, ClosedLoop) else len(work.arrival_s)
        bar = Progress(total, progress, lambda: self.num_done)
        try:
            outputs = self._simulate(work, bar)
        finally:
            bar.close()
        raw = self._merge(outputs) if outputs is not None else self._result()
        raw.compiled = self.played_compiled
        return raw

    def _simulate(self, work: OpenLoop | ClosedLoop, bar: Progress) -> list[CoreOutput] | None:
        """Run ``work``; the cores' outputs when worker processes simulated them
        (None: they are in this process's cores)."""
        if isinstance(work, ClosedLoop):
            ids = [0]
            for _ in range(work.num_users):
                self.env.process(self._user(work, ids))
        else:
            total = len(work.arrival_s)
            tokenize_s = self.engine.frontend.tokenize_s_per_token
            if self.layout is None and isinstance(self.replica, Replica) and self.feed:
                if self._run_compiled(work, tokenize_s, bar):
                    return None  # the core holds the run's logs (sim.serving.compiled)
                # One replica takes its requests when it plans (sim.serving.feed),
                # and ends its runs at the next one.
                (feed,) = Feed.split(work, tokenize_s, 1)
                self.core.on_done = None  # nobody waits for an answer in an open loop
                self.replica.feed = feed
                self.replica.horizon = feed.next_due_s
            elif isinstance(self.layout, Pool) and self.layout.feedable and self.feed:
                # Round robin: each replica takes its own turns (Pool.take_feeds),
                # so they may be simulated in several processes at once, or compiled.
                if self._run_compiled(work, tokenize_s, bar):
                    return None
                pool = self.layout
                feeds = Feed.split(work, tokenize_s, len(pool.replicas))
                num_workers = self._num_workers(len(pool.replicas), total)
                if num_workers > 1:
                    return run_in_workers(pool, feeds, num_workers, self._drive, bar)
                pool.take_feeds(feeds)
            else:
                # A single replica or a pool of one ends its runs at the next
                # arrival; several are interrupted by the arrivals routed to them
                # (Pool.set_horizon).
                if self.layout is None:
                    self.replica.horizon = self._horizon
                else:
                    self.layout.set_horizon(self._horizon, self._lookahead)
                self.env.process(self._open_loop(work))
        self._drive(bar.tick)
        return None

    def _run_compiled(self, work: OpenLoop, tokenize_s: float, bar: Progress) -> bool:
        """Simulate ``work`` in the compiled loop if it can (sim.serving.compiled)."""
        from sim.serving.compiled.choice import loop_kind

        kind = loop_kind(len(work.arrival_s), self.compiled)
        if kind is None:
            return False  # the loop's modules stay unimported (~15 ms)
        from sim.serving.compiled import path as fast_path

        run = fast_path.loop_of(kind)
        cost = self.engine.cost
        if run is None or fast_path.why_not(self.cores, cost, self.engine.skip_ahead, work):
            return False
        assert isinstance(cost, fast_path.RooflineCost)
        self.played_compiled = fast_path.run_compiled(
            self.cores, cost, work, tokenize_s, run, bar.tick
        )
        return self.played_compiled

    def _num_workers(self, num_replicas: int, num_requests: int) -> int:
        """Processes for a round-robin pool (1 while a recorder watches the cores)."""
        if any(core.recorder is not None for core in self.cores):
            return 1
        if self.workers is not None:
            return min(self.workers, num_replicas) if forking_supported() else 1
        return default_num_workers(num_replicas, num_requests)

    def _horizon(self) -> float:
        return self._next_ready_s

    def _lookahead(self, num_after: int) -> float:
        """When the submission ``num_after`` places after the next one comes, s."""
        ready_s = self._ready_s
        return ready_s[min(self._next_index + num_after, len(ready_s) - 1)]

    def _drive(self, tick: Callable[[], None]) -> None:
        """Run the environment to its end, calling ``tick`` every 4,096 events."""
        step = self.env.step
        try:
            while True:
                for _ in range(4096):
                    step()
                tick()
        except simpy.core.EmptySchedule:
            pass

    def _result(self) -> RawResult:
        """The run's result, from every core's outputs (the run is over)."""
        if isinstance(self.layout, Pool):
            self.layout.flush_queue()
        elif self.layout is not None:
            self.layout.flush()
        for core in self.cores:
            core.flush_unfinished()
        return self._merge([CoreOutput.of(core) for core in self.cores])

    def _merge(self, outputs: list[CoreOutput]) -> RawResult:
        """The result from every replica's outputs, in replica order."""
        layout = self.layout
        disaggregated = layout.requests_frame if isinstance(layout, Disaggregated) else None
        return raw_result(outputs, self.engine.frontend, disaggregated)
