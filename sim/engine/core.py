"""The engine core: queues, KV pool and the bookkeeping both executors share.

One scheduler, two executors: the SimPy replica and the real PyTorch engine
both call ``schedule`` for a plan, run it (in simulated or wall-clock time),
then call ``commit`` with the steps' end times. Everything that follows from
a step (token counters, emitted tokens, finished requests, freed blocks, the
step log) happens here, so the two executors cannot drift apart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import numpy.typing as npt

from sim.engine.cohort import Cohort
from sim.engine.columns import Columns
from sim.engine.kv_pool import BlockPool
from sim.engine.plan import StepPlan
from sim.engine.policies.base import Scheduler
from sim.engine.records import RECORD_COLUMNS, SERIES_COLUMNS
from sim.engine.request import Request
from sim.engine.step_commit import StepCommits
from sim.engine.steplog import StepLog

NAN = float("nan")
# RECORD_COLUMNS by dtype, in row order (``_done`` fills each group with one call).
_RECORD_TIMES = ("arrival_s", "ready_s", "first_scheduled_s", "first_token_s", "finish_s")
_RECORD_COUNTS = (
    "request_id",
    "num_prompt_tokens",
    "num_output_tokens",
    "num_generated_tokens",
    "num_preemptions",
    "num_swaps",
    "priority",
    "num_cached_tokens",
    "num_prefix_lookups",
    "num_prefix_query_tokens",
    "num_prefix_hit_tokens",
)


class CommitRecorder(Protocol):
    """Opt-in observer of every commit (``sim.engine.lifecycle``: ``servesim run --trace``)."""

    def on_commit(
        self, core: EngineCore, plan: StepPlan, start_s: float, ends_s: list[float]
    ) -> None: ...


def _ready_after(request: Request, time_s: float) -> bool:
    return request.ready_s is not None and request.ready_s > time_s


class EngineCore(StepCommits):
    """Waiting and running requests, the KV pool, and the logs of one replica."""

    def __init__(
        self,
        policy: Scheduler,
        kv: BlockPool,
        max_model_len_tokens: int,
        replica: int = 0,
        on_done: Callable[[Request], None] | None = None,
    ) -> None:
        self.policy = policy
        self.kv = kv
        self.max_model_len_tokens = max_model_len_tokens
        self.replica = replica
        self.on_done = on_done
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_steps = 0
        self.num_done = 0
        self._finished_in_step: list[Request] = []  # to take out of `running` at commit
        self.new_logs()
        self.rejections: dict[int, str] = {}
        # Async scheduling (vLLM's AsyncScheduler), switched on by the executor:
        # the plan of step N+1 is made while step N runs, so it cannot see
        # requests that arrived after step N started, and requests finishing in
        # step N still hold their slot and KV blocks while it is made. The
        # executor plans after committing step N and passes the start of step N
        # as ``schedule``'s ``visible_until_s``; finished requests' blocks are
        # freed once that plan is made (``held``).
        self.pipelined = False
        self.held: list[Request] = []
        self.num_deferred_at_plan = 0  # hidden arrivals (+ held, if any waited) at the last plan
        # Runs of tokens after the first, for requests whose tokens were
        # interrupted (preemption): request_id -> [(first token time, tokens before)].
        self.later_runs: dict[int, list[tuple[float, int]]] = {}
        # Gaps between tokens that do not follow their predecessor by one step,
        # and when each gap began (engine time of the token before it, s): the
        # frontend model maps both ends to client times.
        self.extra_itl_s: list[float] = []
        self.extra_itl_from_s: list[float] = []
        self.recorder: CommitRecorder | None = None  # None: normal runs pay one test per commit
        # Steady decoders advanced in aggregate (sim.engine.cohort); switched on
        # by the simulator's replica for plain continuous batching. None: every
        # running request is visited each step (the reference path).
        self.cohort: Cohort | None = None
        self.last_end_s = 0.0  # end of the last step committed, s
        self._deferred: list[Request] | None = None  # finishes put off, to order them

    # -- intake ------------------------------------------------------------
    def rejection_reason(self, request: Request) -> str | None:
        """Why ``request`` can never be served here, or ``None``."""
        total = request.num_prompt_tokens + request.num_output_tokens
        if total > self.max_model_len_tokens:
            return (
                f"prompt+output = {total} tokens exceeds max_model_len {self.max_model_len_tokens}"
            )
        blocks = self.kv.blocks_for(request.max_num_tokens)
        if blocks > self.kv.num_blocks:
            return f"needs {blocks} KV blocks but the cache holds {self.kv.num_blocks}"
        return None

    def add(self, request: Request, now_s: float) -> bool:
        """Queue a tokenized request; reject it at once if it can never fit."""
        request.ready_s = now_s
        request.replica = self.replica
        reason = self.rejection_reason(request)
        if reason is not None:
            request.rejection_reason = reason
            self._done(request)
            return False
        self.waiting.append(request)
        return True

    # -- the step cycle ----------------------------------------------------
    @property
    def num_held_seqs(self) -> int:
        """Finished requests whose slot the plan being made still counts (async scheduling)."""
        return len(self.held)

    def schedule(self, now_s: float, visible_until_s: float | None = None) -> StepPlan:
        """Ask the policy for the next step, and sample the queue state.

        ``visible_until_s`` (async scheduling): requests that became ready after
        it stay in the queue but out of the policy's sight for this plan.
        """
        hidden: list[Request] = []
        if visible_until_s is not None:
            waiting = self.waiting  # later arrivals are at the back, in ready order
            while waiting and _ready_after(waiting[-1], visible_until_s):
                hidden.append(waiting.pop())
        if self.recorder is not None and self.cohort is not None:
            self.cohort.dissolve(self.running, self.num_steps, self.last_end_s)
            self.cohort = None  # a recorder sees every request of every step
        plan = self.policy.schedule(self, now_s)
        # Held requests matter to the next plan only through the seats and blocks
        # they free: to someone still waiting. With nobody waiting, the plans that
        # follow are the same whether they are freed now or a step later, so a
        # run of decode steps may follow (half the events of a finish).
        self.num_deferred_at_plan = len(hidden) + (len(self.held) if self.waiting else 0)
        if hidden:
            self.waiting.extend(reversed(hidden))
        if self.held:
            for request in self.held:
                self.kv.free(request)
            self.held = []
        self._series_time(now_s)
        kv = self.kv
        self._series_counts(
            (len(self.waiting), len(self.running), kv.num_blocks - kv.num_free_blocks)
        )
        return plan

    def commit(self, plan: StepPlan, start_s: float, ends_s: list[float]) -> None:
        """Apply ``len(ends_s)`` steps of ``plan``, the j-th ending at ``ends_s[j]``.

        The first step is the plan's own; any further ones are the decode
        steps the plan allowed to follow it.
        """
        if self.recorder is not None:
            self.recorder.on_commit(self, plan, start_s, ends_s)
        if plan.committer is not None:  # a feature's own step (speculative decoding)
            plan.committer.commit_step(self, plan, start_s, ends_s[0])
        elif len(ends_s) == 1:
            self._commit_one(plan, start_s, ends_s[0])
        else:
            self._commit_run(plan, start_s, ends_s)
        self.last_end_s = ends_s[-1]
        if self._finished_in_step:
            self.remove_finished()
        if self.cohort is not None:
            self.cohort.join_steady(plan.scheduled, self.kv, self.num_steps)

    def remove_finished(self) -> None:
        """Take the requests finished since the last call out of ``running`` (commit
        calls it; an executor that finishes a request itself, e.g. on EOS, too)."""
        finished = self._finished_in_step
        if len(finished) <= 4:  # the usual case: remove in C, no rebuild
            running = self.running
            for request in finished:
                try:  # noqa: SIM105 (contextlib.suppress costs a context manager per finish)
                    running.remove(request)  # identity: requests compare by it
                except ValueError:  # ended while waiting (the online engine's abort)
                    pass
        else:
            self.running = [r for r in self.running if r.finish_s is None]
        finished.clear()

    def finish(self, request: Request, time_s: float) -> None:
        """``request`` emitted its last token at ``time_s``: free its blocks, record it."""
        if self._deferred is not None:
            self._deferred.append(request)
            return
        request.finish_s = time_s
        self._finished_in_step.append(request)
        if self.pipelined:
            self.held.append(request)  # freed after the plan already under way
        else:
            self.kv.free(request)
        self._done(request)

    def _done(self, request: Request) -> None:
        """Move a finished or rejected request into the columnar records."""
        if request.rejection_reason is not None:
            self.rejections[request.request_id] = request.rejection_reason
        self._record_times(
            (
                request.arrival_s,  # (conditionals inlined: this runs once per request)
                NAN if request.ready_s is None else request.ready_s,
                NAN if request.first_scheduled_s is None else request.first_scheduled_s,
                NAN if request.first_token_s is None else request.first_token_s,
                NAN if request.finish_s is None else request.finish_s,
            )
        )
        self._record_counts(
            (
                request.request_id,
                request.num_prompt_tokens,
                request.num_output_tokens,
                request.num_generated_tokens,
                request.num_preemptions,
                request.num_swaps,
                request.priority,
                request.num_cached_tokens,
                request.num_prefix_lookups,
                request.num_prefix_query_tokens,
                request.num_prefix_hit_tokens,
            )
        )
        self._record_replica(request.replica)
        self.num_done += 1
        if self.on_done is not None:
            self.on_done(request)

    def new_logs(self) -> None:
        """An empty step log, queue series and record table (a compiled run that
        gives up clears what it wrote: ``sim.serving.compiled``)."""
        self.steps = StepLog()
        self.series = Columns(SERIES_COLUMNS)
        # Direct references: sampling the state runs once per plan.
        self._series_time = self.series.group("f8", ("time_s",)).append
        self._series_counts = self.series.group(
            "i4", ("num_waiting", "num_running", "num_kv_blocks_used")
        ).extend
        self._new_records()

    def _new_records(self) -> None:
        """An empty record table, and direct references to its groups (a row per request)."""
        self.records = Columns(RECORD_COLUMNS)
        self._record_times = self.records.group("f8", _RECORD_TIMES).extend
        self._record_counts = self.records.group("i8", _RECORD_COUNTS).extend
        self._record_replica = self.records.group("i4", ("replica",)).append

    def take_records(self) -> dict[str, npt.NDArray[Any]]:
        """The records' columns (``records.views()``), handed over: the core keeps
        an empty table, so the views hold the only reference to the rows, and a
        result that copies them (in request order) frees the original (~130
        bytes a request) instead of holding both while the core lives."""
        views = self.records.views()
        self._new_records()
        return views

    def flush_unfinished(self) -> None:
        """Record requests still queued or running (finish time NaN) and clear them."""
        if self.cohort is not None:
            self.cohort.dissolve(self.running, self.num_steps, self.last_end_s)
        for request in self.held:
            self.kv.free(request)
        self.held = []
        for request in [*self.running, *self.waiting]:
            self.kv.free(request)
            self._done(request)
        self.running = []
        self.waiting.clear()

    def preempt(self, request: Request) -> None:
        """Recompute preemption: drop the KV cache, requeue at the front."""
        self.kv.free(request)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def swap_out(self, request: Request) -> None:
        """Swap preemption: free the GPU blocks but keep the computed tokens
        (their KV now lives in CPU memory, see ``sim.engine.swap``); requeue at the front."""
        self.kv.free(request)
        request.num_preemptions += 1
        request.num_swaps += 1
        self.waiting.appendleft(request)
