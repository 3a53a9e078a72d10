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

import functools
import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import pandas as pd
import simpy

from sim.engine.core import EngineCore
from sim.engine.request import Request
from sim.engine.step_runs import StepTable
from sim.serving.cluster import Cluster, build_layout
from sim.serving.disagg import Disaggregated
from sim.serving.engine_config import Engine, Frontend
from sim.serving.feed import Feed, OpenLoop, requests_in_order, submission_order
from sim.serving.frontend import Delivery, deliver
from sim.serving.lockstep import LockstepMember
from sim.serving.pool import Pool, series_frame, step_table
from sim.serving.replica import Replica

_BAR_DELAY_S = 2.0  # wall seconds before a run shows its progress bar


@runtime_checkable
class ClosedLoop(Protocol):
    """Users who think, send a request, and wait for its answer."""

    num_users: int
    num_requests: int

    def next_lengths(self) -> tuple[int, int]: ...

    def next_think_s(self) -> float: ...


@dataclass
class RawResult:
    """What a run produced, before metrics: see ``sim.results``.

    ``requests``' ``first_token_s`` and ``finish_s`` are client times (after
    the frontend); ``engine_first_token_s`` and ``engine_finish_s`` the ends of
    the engine steps that produced those tokens. ``step_table`` is the step log
    with each step's ``delivered_s``, compact; ``steps`` expands it to one row per
    step on first use. ``extra_itl_s`` holds the client-side gaps the step
    log's weights do not cover (tokens after a break in a request's run).
    """

    requests: pd.DataFrame
    step_table: StepTable
    timeseries: pd.DataFrame
    extra_itl_s: npt.NDArray[np.float64]
    later_runs: dict[int, list[tuple[float, int]]]
    rejections: dict[int, str]
    frontend: Frontend
    num_replicas: int = 1

    @functools.cached_property
    def steps(self) -> pd.DataFrame:
        """The step log, one row per step (``StepTable.frame``: tens of millions of
        rows for a long run, so built only when asked)."""
        return self.step_table.frame()


class Simulation:
    """One workload fed to one replica, or to a cluster; ``run`` returns a ``RawResult``."""

    def __init__(self, engine: Engine, cluster: Cluster | None = None, feed: bool = True) -> None:
        """``feed=False`` hands every open-loop request over at an event of its own,
        as a cluster of other routers does (the reference the feeds are tested against)."""
        self.engine = engine
        self.feed = feed
        self.env = simpy.Environment()
        self._waiters: dict[int, simpy.Event] = {}
        self._next_ready_s = 0.0
        # Open loop: every submission's time (inf last) and the index of the next.
        self._ready_s: list[float] = [float("inf")]
        self._next_index = 0
        self.layout: Pool | Disaggregated | None = None
        if cluster is None:
            self.core = EngineCore(
                engine.make_policy(),
                engine.new_block_pool(),
                engine.max_model_len_tokens,
                on_done=self._on_done,
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
        if isinstance(work, ClosedLoop):
            total = work.num_requests
            ids = [0]
            for _ in range(work.num_users):
                self.env.process(self._user(work, ids))
        else:
            total = len(work.arrival_s)
            tokenize_s = self.engine.frontend.tokenize_s_per_token
            if self.layout is None and isinstance(self.replica, Replica) and self.feed:
                # One replica takes its requests when it plans (sim.serving.feed),
                # and ends its runs at the next one.
                (feed,) = Feed.split(work, tokenize_s, 1)
                self.core.on_done = None  # nobody waits for an answer in an open loop
                self.replica.feed = feed
                self.replica.horizon = feed.next_due_s
            elif isinstance(self.layout, Pool) and self.layout.feedable and self.feed:
                # Round robin: each replica takes its own turns (Pool.take_feeds).
                self.layout.take_feeds(Feed.split(work, tokenize_s, len(self.layout.replicas)))
            else:
                # A single replica or a pool of one ends its runs at the next
                # arrival; several are interrupted by the arrivals routed to them
                # (Pool.set_horizon).
                if self.layout is None:
                    self.replica.horizon = self._horizon
                else:
                    self.layout.set_horizon(self._horizon, self._lookahead)
                self.env.process(self._open_loop(work))
        self._drive(total, progress)
        return self._result()

    def _horizon(self) -> float:
        return self._next_ready_s

    def _lookahead(self, num_after: int) -> float:
        """When the submission ``num_after`` places after the next one comes, s."""
        ready_s = self._ready_s
        return ready_s[min(self._next_index + num_after, len(ready_s) - 1)]

    def _drive(self, total: int, progress: bool) -> None:
        """env.run(), with a progress bar once 2 s of wall time have passed
        (tqdm is imported then: a small run does not pay for it)."""
        step = self.env.step
        bar: Any = None
        show_at_s = time.monotonic() + _BAR_DELAY_S if progress else math.inf
        try:
            while True:
                for _ in range(4096):
                    step()
                if bar is not None:
                    bar.update(self.num_done - bar.n)
                elif time.monotonic() >= show_at_s:
                    from tqdm import tqdm

                    bar = tqdm(total=total, unit="req", initial=self.num_done)
        except simpy.core.EmptySchedule:
            if bar is not None:
                bar.update(self.num_done - bar.n)
        finally:
            if bar is not None:
                bar.close()

    def _result(self) -> RawResult:
        if self.layout is not None:
            return self._cluster_result(self.layout)
        core = self.core
        core.flush_unfinished()
        requests = core.records.frame().sort_values("request_id", ignore_index=True)
        requests["rejection_reason"] = requests["request_id"].map(core.rejections)
        series = core.series.frame()
        series["kv_cache_usage"] = series["num_kv_blocks_used"] / core.kv.num_blocks
        series["replica"] = np.zeros(len(series), dtype=np.int32)
        steps = StepTable((core.steps.runs(0),))
        return self._client_view(requests, steps, series, [core], core.later_runs, core.rejections)

    def _cluster_result(self, layout: Pool | Disaggregated) -> RawResult:
        """Every replica's records, step log and series, concatenated with ``replica``."""
        if isinstance(layout, Pool):
            layout.flush_queue()
        else:
            layout.flush()
        cores = self.cores
        for core in cores:
            core.flush_unfinished()
        records = pd.concat([core.records.frame() for core in cores], ignore_index=True)
        if isinstance(layout, Disaggregated):
            records = layout.requests_frame(records)
        requests = records.sort_values("request_id", ignore_index=True)
        rejections: dict[int, str] = {}
        later_runs: dict[int, list[tuple[float, int]]] = {}
        for core in cores:
            rejections.update(core.rejections)
            later_runs.update(core.later_runs)
        requests["rejection_reason"] = requests["request_id"].map(rejections)
        return self._client_view(
            requests, step_table(cores), series_frame(cores), cores, later_runs, rejections
        )

    def _client_view(
        self,
        requests: pd.DataFrame,
        steps: StepTable,
        series: pd.DataFrame,
        cores: list[EngineCore],
        later_runs: dict[int, list[tuple[float, int]]],
        rejections: dict[int, str],
    ) -> RawResult:
        """The run as the client sees it: token times through the frontend."""
        frontend = self.engine.frontend
        steps = deliver(steps, frontend.output_step_s, frontend.detokenize_s_per_token)
        delivery = Delivery(steps)
        first_on = requests["replica"].to_numpy()
        if "prefill_replica" in requests.columns:  # disaggregated: first token from there
            prefill = requests["prefill_replica"].to_numpy(dtype=np.float64)
            first_on = np.where(np.isnan(prefill), first_on, np.nan_to_num(prefill)).astype(int)
        requests["engine_first_token_s"] = requests["first_token_s"]
        requests["engine_finish_s"] = requests["finish_s"]
        requests["first_token_s"] = delivery.client_s(requests["first_token_s"], first_on)
        requests["finish_s"] = delivery.client_s(requests["finish_s"], requests["replica"])
        gaps = []
        for core in cores:
            gap = np.asarray(core.extra_itl_s, dtype=np.float64)
            start = np.asarray(core.extra_itl_from_s, dtype=np.float64)
            owner = np.full(gap.shape, core.replica)
            client_gap = delivery.client_s(start + gap, owner) - delivery.client_s(start, owner)
            gaps.append(client_gap[client_gap > 0])  # 0: both tokens left in one chunk
        return RawResult(
            requests=requests,
            step_table=steps,
            timeseries=series,
            extra_itl_s=np.concatenate(gaps),
            later_runs=later_runs,
            rejections=rejections,
            frontend=frontend,
            num_replicas=len(cores),
        )
