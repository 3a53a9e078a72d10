"""The engine's scheduler, told as one step runs: vLLM v1's ``scheduler.py``.

Read top to bottom: continuous batching's settings (``ContinuousSettings``,
vLLM's flag names) and what one step computes (``SchedulerOutput``, vLLM's
class of that name, and its cost-relevant shape); the interface between the
core and its policy (``CoreView``, ``Scheduler``); ``EngineCore``, the queues
and KV pool of one replica (``add``, ``schedule``, then ``update`` with the
step's end: token counters, finishes, the logs); and ``Continuous``, vLLM v1's
policy: running requests first, then waiting ones, within the sequence limit,
the token budget and the KV pool, preempting the newest running request when
the pool runs short.

One scheduler, several executors: the SimPy replica (``sim.serving.replica``),
the real PyTorch engine (``calibration/``) and the speed paths
call ``schedule`` for a step, run it (in simulated or wall-clock time), then
``update`` the core with its end, so they cannot drift apart. Other policies
(``sim.engine.policies``) plug in through ``Scheduler``; those of the
continuous family subclass ``Continuous``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

import numpy.typing as npt
from pydantic import Field, field_validator

from sim.config import Frozen
from sim.cost.base import StepShape
from sim.engine.columns import Columns
from sim.engine.kv_cache import BlockPool, SwapSpace
from sim.engine.records import RECORD_COLUMNS, SERIES_COLUMNS
from sim.engine.request import Request
from sim.engine.step_runs import StepLog

# -- settings ------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchLimits:
    """The scheduler's two batch limits after defaults are filled in."""

    max_num_batched_tokens: int
    max_num_seqs: int


# Limits of a policy built without a scenario (no hardware to look up): vLLM's
# defaults for a GPU under 70 GiB serving the OpenAI API, the one place they are
# written (sim.engine.policies.vllm_defaults's table takes them from here). A
# scenario fills in its hardware's defaults instead.
FALLBACK_LIMITS = BatchLimits(max_num_batched_tokens=2048, max_num_seqs=256)


class ContinuousSettings(Frozen):
    """Continuous batching's settings (names as vLLM's flags), shared by the
    policies built on it (``priority``, ``shortest_prompt_first``)."""

    max_num_seqs: int | None = Field(
        default=None, ge=1, description="running requests at most (None: vLLM's default)"
    )
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="tokens computed per step at most (None: vLLM's default)"
    )
    chunked_prefill: bool = Field(default=True, description="cut prompts to fit the budget")
    long_prefill_token_threshold: int = Field(
        default=0,
        ge=0,
        description="0: off; else a request computes at most this many tokens a step",
    )
    max_num_partial_prefills: int = Field(
        default=1,
        ge=1,
        description="vLLM v1 supports only 1 (no limit on concurrent partial prefills)",
    )
    scheduler_reserve_full_isl: bool | None = Field(
        default=None,
        description=(
            "admit a waiting request only if the KV pool holds its whole sequence, not"
            " just its first chunk (vLLM >= 0.19's default); None: the vllm_version's"
            " default (a policy built without a scenario: the chunk alone)"
        ),
    )
    preemption: Literal["recompute", "swap"] = Field(
        default="recompute",
        description=(
            "swap: victims' KV goes to CPU memory (engine.swap_space_bytes), "
            "see sim.engine.kv_cache"
        ),
    )

    @property
    def limits(self) -> BatchLimits:
        """``max_num_batched_tokens`` and ``max_num_seqs``, each the fallback's where the
        scenario has not filled it in (a policy built without one)."""
        tokens, seqs = self.max_num_batched_tokens, self.max_num_seqs
        return BatchLimits(
            max_num_batched_tokens=FALLBACK_LIMITS.max_num_batched_tokens
            if tokens is None
            else tokens,
            max_num_seqs=FALLBACK_LIMITS.max_num_seqs if seqs is None else seqs,
        )

    def step_seq_bound(self) -> int:
        """Most sequences one step holds (``max_num_seqs``, filled in)."""
        return self.limits.max_num_seqs

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        """Most tokens one step can compute (sizes the activation reserve)."""
        return self.limits.max_num_batched_tokens

    def build(self, swap: SwapSpace | None = None, async_scheduling: bool = False) -> Continuous:
        """The policy these settings describe, with its swap space (``preemption:
        swap``; None preempts by recompute) and whether its executor plans each
        step while the previous one runs (vLLM's async scheduling)."""
        raise NotImplementedError  # each policy of the family builds its own

    @field_validator("max_num_partial_prefills")
    @classmethod
    def _v1_has_no_concurrent_partial_prefill(cls, value: int) -> int:
        # vLLM v1 rejects any other value (EngineArgs._check_feature_supported:
        # "Concurrent Partial Prefill is not supported"); its V1 scheduler never
        # reads the field.
        if value != 1:
            raise ValueError(
                f"must be 1: vLLM v1 does not support concurrent partial prefill (got {value})"
            )
        return value


class ContinuousConfig(ContinuousSettings):
    """Settings of vLLM-style continuous batching."""

    kind: Literal["continuous"] = "continuous"

    def build(self, swap: SwapSpace | None = None, async_scheduling: bool = False) -> Continuous:
        return Continuous(self, swap, async_scheduling)


# -- the output of a step -------------------------------------------------------

# A step's requests, each with the tokens it computes this step (vLLM's
# num_scheduled_tokens), in scheduling order.
Scheduled: TypeAlias = list[tuple[Request, int]]


@dataclass(slots=True)
class SchedulerOutput:
    """What the next step computes: vLLM v1's ``SchedulerOutput``
    (``vllm/v1/core/sched/output.py``), the fields the simulator needs.

    ``scheduled``: the requests the step advances and how many tokens each
    computes, in batch order (vLLM's ``num_scheduled_tokens``).
    ``scheduled_spec_decode_tokens``: speculative decoding only
    (``sim.engine.speculative``): the draft tokens each speculative decode keeps,
    beyond its one scheduled token. The simulator draws acceptance when it
    schedules, so it schedules (and gives KV blocks to) only the accepted drafts:
    vLLM's field less what its sampler rejects. Absent: plain decoding.
    ``undrafted``: speculative decoding only: the decoding requests the proposer
    drafted nothing for (an n-gram proposer that found no match), which verify
    their one token in the step's forward pass (in its shape a one-token chunk
    beside the others' verifications, not a decode a speculative cost turns into
    a ``k + 1``-token verification).
    ``preempted``: the requests this step's planning preempted (vLLM's
    ``preempted_req_ids``), in preemption order.
    ``extra_s``: seconds the step takes beyond the cost model's compute time,
    e.g. copying swapped KV blocks between CPU and GPU memory (``sim.engine.kv_cache``).
    """

    scheduled: Scheduled = field(default_factory=list)
    scheduled_spec_decode_tokens: dict[Request, int] = field(default_factory=dict)
    undrafted: set[Request] = field(default_factory=set)
    preempted: list[Request] = field(default_factory=list)
    extra_s: float = 0.0

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


NO_PADDING: tuple[int, ...] = ()  # a policy whose steps compute no discarded slot


def scheduled_shape(
    scheduled: Scheduled,
    padding_contexts: Sequence[int] = NO_PADDING,
    undrafted: set[Request] | frozenset[Request] = frozenset(),
) -> StepShape:
    """The cost-relevant shape of a step that computes ``scheduled`` (before it
    runs: each request's counters are the step's inputs), plus decode slots
    that compute a discarded token at the contexts ``padding_contexts``
    (static batching's finished members); ``undrafted`` decodes are one-token
    chunks (``SchedulerOutput``)."""
    num_prefill_seqs = num_prefill_tokens = pairs = kv_read = 0
    num_decode_seqs = len(padding_contexts)
    context = sum(padding_contexts)
    longest = max(padding_contexts, default=0)
    shortest = min(padding_contexts, default=0)
    for request, num_new in scheduled:
        cached = request.num_computed_tokens
        if num_new == 1 and request.num_generated_tokens > 0 and request not in undrafted:
            this = cached + 1
            if not num_decode_seqs or this < shortest:
                shortest = this
            if this > longest:
                longest = this
            num_decode_seqs += 1
            context += this
        else:
            num_prefill_seqs += 1
            num_prefill_tokens += num_new
            pairs += num_new * cached + num_new * (num_new + 1) // 2
            kv_read += num_new + cached
    return StepShape(
        num_prefill_seqs=num_prefill_seqs,
        num_prefill_tokens=num_prefill_tokens,
        prefill_attention_pairs=pairs,
        prefill_kv_read_tokens=kv_read,
        num_decode_seqs=num_decode_seqs,
        num_decode_context_tokens=context,
        max_decode_context_tokens=longest,
        min_decode_context_tokens=shortest,
    )


# -- the policy interface -------------------------------------------------------


class CoreView(Protocol):
    """What a policy may read and do on the engine core of one replica."""

    waiting: deque[Request]  # queued, front first
    running: list[Request]  # admitted, in admission order
    num_steps: int  # steps updated so far

    @property
    def num_held_seqs(self) -> int:
        """Finished requests still holding a slot for this plan (async scheduling)."""
        ...

    @property
    def kv(self) -> BlockPool: ...

    def preempt(self, request: Request) -> None:
        """Recompute preemption: drop ``request``'s KV cache, requeue it at the front."""
        ...

    def swap_out(self, request: Request) -> None:
        """Swap preemption: free its GPU blocks, keep its computed tokens, requeue it."""
        ...


class Scheduler(Protocol):
    """A scheduling policy.

    ``schedule`` reads the core's ``waiting`` and ``running`` queues and KV
    pool, moves requests between them (admission, preemption via
    ``core.preempt``), reserves the KV blocks of the next step, and returns
    its output. It must not advance token counters: ``EngineCore.update`` does
    that after the executor has run the step. The same object serves the
    simulator and the real engine, so it may not look at any clock but
    ``now_s``.
    """

    @property
    def async_scheduling(self) -> bool:
        """Whether the executor plans each step while the previous one runs (vLLM's
        async scheduling); the core reads it once (``EngineCore.async_scheduling``)."""
        ...

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        """The next step at time ``now_s`` (seconds)."""
        ...

    def padding_contexts(self, core: CoreView) -> Sequence[int]:
        """Contexts (tokens) of the slots the next step computes besides its scheduled
        requests, each a discarded token: a real cost of the policy (static
        batching's finished members), priced and logged as decode slots."""
        ...

    def wake_at_s(self, core: CoreView) -> float | None:
        """After an empty output: when to schedule again even if nothing arrives
        (a static batch's longest wait), or None."""
        ...


# -- the engine core ----------------------------------------------------------------

NAN = float("nan")
# RECORD_COLUMNS by dtype, in row order (``_done`` fills each group with one call).
RECORD_TIMES = ("arrival_s", "ready_s", "first_scheduled_s", "first_token_s", "finish_s")
RECORD_COUNTS = (
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
    """Opt-in observer of every update (``sim.engine.lifecycle``: ``servesim run --trace``)."""

    def on_commit(
        self, core: EngineCore, output: SchedulerOutput, start_s: float, ends_s: list[float]
    ) -> None:
        """``output``'s step ran from ``start_s``, and ``len(ends_s) - 1`` plain decode
        steps of the same requests after it (a speed path's run), ending at ``ends_s``."""
        ...


class EngineCore:
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
        # Async scheduling (vLLM's AsyncScheduler), as the policy asks: the plan
        # of step N+1 is made while step N runs, so it cannot see requests that
        # arrived after step N started, and requests finishing in step N still
        # hold their slot and KV blocks while it is made. The executor plans
        # after committing step N and passes the start of step N as
        # ``schedule``'s ``visible_until_s``; finished requests' blocks are
        # freed once that plan is made (``held``).
        self.async_scheduling = policy.async_scheduling
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
        self.last_end_s = 0.0  # end of the last step updated, s
        self.scheduled_at_s = 0.0  # when the step being run was scheduled: its start, s

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

    # -- schedule ----------------------------------------------------------
    @property
    def num_held_seqs(self) -> int:
        """Finished requests whose slot the plan being made still counts (async scheduling)."""
        return len(self.held)

    def schedule(self, now_s: float, visible_until_s: float | None = None) -> SchedulerOutput:
        """Ask the policy for the next step, which starts at ``now_s``, and sample
        the queue state.

        ``visible_until_s`` (async scheduling): requests that became ready after
        it stay in the queue but out of the policy's sight for this step.
        """
        hidden: list[Request] = []
        if visible_until_s is not None:
            waiting = self.waiting  # later arrivals are at the back, in ready order
            while (
                waiting and (ready := waiting[-1].ready_s) is not None and ready > visible_until_s
            ):
                hidden.append(waiting.pop())
        output = self.policy.schedule(self, now_s)
        self.scheduled_at_s = now_s
        # Held requests matter to the next plan only through the seats and blocks
        # they free: to someone still waiting. With nobody waiting, the plans that
        # follow are the same whether they are freed now or a step later.
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
        return output

    def padding_contexts(self) -> Sequence[int]:
        """The contexts of the discarded slots the next step computes (the policy's)."""
        return self.policy.padding_contexts(self)

    def step_shape(self, output: SchedulerOutput) -> StepShape:
        """What ``output``'s step computes, as a cost model prices it (before ``update``)."""
        return scheduled_shape(
            output.scheduled, self.policy.padding_contexts(self), output.undrafted
        )

    def wake_at_s(self) -> float | None:
        """After an empty output: the policy's wake-up time (s), or None."""
        return self.policy.wake_at_s(self)

    # -- update: the step's output ------------------------------------------
    def update(self, output: SchedulerOutput, end_s: float) -> None:
        """The step of ``output`` ran from its scheduling to ``end_s`` (s): advance the
        computed tokens, then sample a token for each request that caught up (and
        its kept draft tokens, with speculative decoding), finishing those that are
        done; log the step."""
        start_s = self.scheduled_at_s
        if self.recorder is not None:
            self.recorder.on_commit(self, output, start_s, [end_s])
        step = self.num_steps
        previous = step - 1
        spec = output.scheduled_spec_decode_tokens
        num_padding = len(self.policy.padding_contexts(self))  # counted before any finishes
        num_itl = num_decode = num_prefill = num_fresh = 0
        for request, num_new in output.scheduled:
            generated = request.num_generated_tokens
            if num_new == 1 and generated > 0:
                num_decode += 1
            else:
                num_prefill += num_new
            accepted = spec.get(request, 0) if spec else 0
            computed = request.num_computed_tokens + num_new + accepted
            request.num_computed_tokens = computed
            if computed == request.num_prompt_tokens + generated + accepted:
                if (
                    not accepted
                    and request.last_token_step == previous
                    and generated + 1 < request.num_output_tokens
                ):
                    # Inline _emit for the common case (hot path): a decode
                    # token right after the previous one, not the last.
                    request.num_generated_tokens = generated + 1
                    request.last_token_step = step
                    request.last_token_s = end_s
                    num_itl += 1
                else:
                    continuing = self._emit(request, step, end_s, 1 + accepted)
                    num_itl += continuing
                    num_fresh += 1 - continuing  # a first token, or one after a break
        self.steps.add_step(
            start_s, end_s, num_prefill, num_decode + num_padding, num_itl, num_itl + num_fresh
        )
        self.num_steps = step + 1
        self.last_end_s = end_s
        if self._finished_in_step:
            self.remove_finished()

    def break_run(self, request: Request, time_s: float) -> None:
        """A token that does not follow its predecessor by one step."""
        if request.last_token_s is not None:
            self.extra_itl_s.append(time_s - request.last_token_s)
            self.extra_itl_from_s.append(request.last_token_s)
            self.later_runs.setdefault(request.request_id, []).append(
                (time_s, request.num_generated_tokens)
            )

    def _emit(self, request: Request, step: int, time_s: float, num_tokens: int) -> int:
        """Sample ``num_tokens`` output tokens at once; return 1 if they continue an
        unbroken run (one inter-token gap: they reach the client together)."""
        continuing = request.last_token_step == step - 1
        if not continuing:
            self.break_run(request, time_s)
        if request.first_token_s is None:
            request.first_token_s = time_s
        request.num_generated_tokens += num_tokens
        request.last_token_step = step
        request.last_token_s = time_s
        if request.num_generated_tokens == request.num_output_tokens:
            self.finish(request, time_s)
        return int(continuing)

    # -- finishes ----------------------------------------------------------
    def finish(self, request: Request, time_s: float) -> None:
        """``request`` emitted its last token at ``time_s``: free its blocks, record it."""
        request.finish_s = time_s
        self._finished_in_step.append(request)
        if self.async_scheduling:
            self.held.append(request)  # freed after the plan already under way
        else:
            self.kv.free(request)
        self._done(request)

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

    # -- preemption --------------------------------------------------------
    def preempt(self, request: Request) -> None:
        """Recompute preemption: drop the KV cache, requeue at the front."""
        self.kv.free(request, self._num_unhashed_tokens(request))
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def swap_out(self, request: Request) -> None:
        """Swap preemption: free the GPU blocks but keep the computed tokens
        (their KV now lives in CPU memory, see ``sim.engine.kv_cache``); requeue at the front."""
        self.kv.free(request, self._num_unhashed_tokens(request))
        request.num_preemptions += 1
        request.num_swaps += 1
        self.waiting.appendleft(request)

    def _num_unhashed_tokens(self, request: Request) -> int:
        """Of ``request``'s computed tokens, those vLLM has no block hash for when it
        preempts it in the plan being made: under async scheduling, the token the
        step in flight (servesim's last step) computed, if the step before sampled it.

        vLLM (0.24, as every release with async scheduling) caches a request's full
        blocks in ``KVCacheManager.allocate_slots`` up to ``min(num_computed_tokens +
        num_new_tokens, request.num_tokens)``, the token ids it knows, and in
        ``AsyncScheduler._update_request_with_output`` up to ``num_computed_tokens -
        num_output_placeholders``; a preemption comes before the victim's own
        ``allocate_slots``. So with ``c`` tokens computed after the step in flight, a
        request that sampled in that step and the one before (a decode: its input
        token was a placeholder when the step was planned) has ``c - 1`` tokens
        hashed, one that did not sample in the step before (a prefill's last chunk:
        prompt ids are known) or in the step in flight (a chunk) all ``c``."""
        if not self.async_scheduling or request.last_token_step != self.num_steps - 1:
            return 0
        # Its last run of tokens (sim.engine.tokens) began at its first token, or at
        # the token after the last break; two or more: it sampled in the step before.
        runs = self.later_runs.get(request.request_id)
        num_before_run = runs[-1][1] if runs else 0
        return int(request.num_generated_tokens - num_before_run >= 2)

    # -- logs --------------------------------------------------------------
    def new_logs(self) -> None:
        """An empty step log, queue series and record table (an accelerator that
        gives up part way clears what it wrote)."""
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
        self._record_times = self.records.group("f8", RECORD_TIMES).extend
        self._record_counts = self.records.group("i8", RECORD_COUNTS).extend
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
        for request in self.held:
            self.kv.free(request)
        self.held = []
        for request in [*self.running, *self.waiting]:
            self.kv.free(request)
            self._done(request)
        self.running = []
        self.waiting.clear()


# -- continuous batching ---------------------------------------------------------


class Continuous:
    """Continuous batching in the style of vLLM v1.

    Each step: running requests first (decodes and unfinished prefill chunks), in
    the order they were admitted, each taking what it wants of the token budget;
    when the KV pool cannot hold a running request's next tokens, the newest
    running request is preempted (by recompute, or by swap when configured) until
    it can. Then, if nothing was preempted, waiting requests are admitted
    first-come first-served while the sequence limit, the token budget and the KV
    pool allow. With chunked prefill a prompt may be cut to fit the remaining
    budget; without it a prompt is scheduled whole or waits. The policy holds no
    state between steps besides its settings.
    """

    def __init__(
        self,
        config: ContinuousSettings,
        swap: SwapSpace | None = None,
        async_scheduling: bool = False,
    ) -> None:
        limits = config.limits
        self.max_num_seqs = limits.max_num_seqs
        self.max_num_batched_tokens = limits.max_num_batched_tokens
        self.chunked_prefill = config.chunked_prefill
        # vLLM's long_prefill_token_threshold: 0 is off, so never caps.
        self.max_tokens_per_request = config.long_prefill_token_threshold or None
        self.reserve_full_sequence = bool(config.scheduler_reserve_full_isl)
        # Preemption by swap (``preemption: swap``): the CPU swap space; None
        # preempts by recompute.
        self.swap = swap
        self._extra_s = 0.0  # swap copy time of the step being planned, s
        self._preempted: list[Request] = []  # victims of the step being planned
        # vLLM's async scheduling: the executor (sim.serving.replica) plans each
        # step while the previous one runs.
        self.async_scheduling = async_scheduling

    def padding_contexts(self, core: CoreView) -> Sequence[int]:
        """None: every slot of a step is a scheduled request."""
        return NO_PADDING

    def wake_at_s(self, core: CoreView) -> float | None:
        """None: an idle engine waits for an arrival."""
        return None

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        """The next step: the running requests (preempting when the pool runs
        short), then, if nobody was preempted, the waiting ones (``_admit``)."""
        self._extra_s = 0.0
        self._preempted = []
        output = self._schedule(core, now_s)
        output.extra_s = self._extra_s
        output.preempted = self._preempted
        return output

    def _schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        kv = core.kv
        running = core.running
        budget = self.max_num_batched_tokens
        block_size = kv.block_size_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted = False
        cap = self.max_tokens_per_request
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.num_computed_tokens
            wanted = request.num_prompt_tokens + request.num_generated_tokens - computed
            if cap is not None and wanted > cap:
                wanted = cap  # a long prompt's chunk, as vLLM caps it
            num_new = wanted if wanted < budget else budget  # min() is slower (hot path)
            target = computed + num_new
            if target > request.num_blocks * block_size:
                if not kv.try_grow(request, target):
                    # The pool is short: preempt until it suffices (or the request goes).
                    while not kv.can_allocate(request, target):
                        j = self._victim_index(running)
                        victim = running.pop(j)
                        if j < i:  # scheduled earlier in this step: take its tokens back
                            budget += scheduled.pop(j)[1]
                            i -= 1
                        self._preempt(core, victim)
                        preempted = True
                        if victim is request:
                            break
                    else:
                        kv.allocate(request, target)
                    if preempted and (i >= len(running) or running[i] is not request):
                        break  # the request itself was preempted
            elif target // block_size > computed // block_size:
                # The step fills a block it already holds: cached now, as vLLM's
                # allocate_slots does, so a request admitted below can hit it.
                kv.cache_full_blocks(request, target)
            scheduled.append((request, num_new))
            budget -= num_new
            i += 1
        if preempted:
            if not scheduled:
                # The request being placed was itself the victim and nothing ran
                # before it (priority victims need not be the last): vLLM's step
                # is empty and it schedules again at once, with the pool freed.
                extra_s, self._extra_s = self._extra_s, 0.0
                output = self._schedule(core, now_s)
                self._extra_s += extra_s  # (summed in this order: the seconds to the bit)
                return output
            return SchedulerOutput(scheduled)
        self._admit(core, scheduled, budget, now_s)
        return SchedulerOutput(scheduled)

    def _victim_index(self, running: list[Request]) -> int:
        """Which running request to preempt when the pool runs out: the newest (vLLM FCFS)."""
        return len(running) - 1

    def _preempt(self, core: CoreView, victim: Request) -> None:
        """Preempt by swap if configured and the swap space has room, else by recompute."""
        self._preempted.append(victim)
        if self.swap is not None:
            seconds = self.swap.swap_out(victim, core.kv.blocks_for(victim.num_computed_tokens))
            if seconds is not None:
                core.swap_out(victim)
                self._extra_s += seconds
                return
        core.preempt(victim)

    def _admit(self, core: CoreView, scheduled: Scheduled, budget: int, now_s: float) -> None:
        """Admit waiting requests FCFS until the queue drains or its head does not
        fit: the sequence limit, the token budget or the KV pool."""
        kv, waiting, running = core.kv, core.waiting, core.running
        max_running = self.max_num_seqs - core.num_held_seqs  # held: async scheduling
        while waiting:
            if len(running) >= max_running:
                return
            request = waiting[0]
            # Prefix caching: the cached head of the prompt is not computed again.
            num_cached = kv.num_cached_tokens(request)
            wanted = request.num_wanted_tokens - num_cached
            cap = self.max_tokens_per_request
            if cap is not None and wanted > cap:
                wanted = cap
            if budget == 0 or (wanted > budget and not self.chunked_prefill):
                return
            num_new = min(wanted, budget)
            target = request.num_computed_tokens + num_cached + num_new
            # vLLM >= 0.19 (scheduler_reserve_full_isl): the pool must hold the whole
            # sequence (prompt, and output so far for a preemption victim) after its
            # prefix-cache hits, not just this chunk; which also covers the chunk.
            if not kv.can_allocate(
                request, request.num_tokens if self.reserve_full_sequence else target
            ):
                return
            waiting.popleft()
            kv.allocate(request, target)
            if kv.caches_prefixes and not request.num_computed_tokens:
                # vLLM's PrefixCacheStats: a lookup on every admission that makes one
                # (get_computed_blocks: fresh, or back from a recompute preemption).
                request.num_prefix_lookups += 1
                request.num_prefix_query_tokens += request.num_tokens
                request.num_prefix_hit_tokens += num_cached
            if num_cached:
                request.num_computed_tokens += num_cached
                if request.first_scheduled_s is None:
                    request.num_cached_tokens = num_cached
            if self.swap is not None:  # copy a swapped-out request's KV back in
                self._extra_s += self.swap.swap_in(request)
            running.append(request)
            scheduled.append((request, num_new))
            budget -= num_new
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now_s
