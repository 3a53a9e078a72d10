"""The engine's scheduler, told as one step runs: vLLM v1's ``scheduler.py``.

Top to bottom: the settings (``ContinuousSettings``, vLLM's flag names), one
step's ``SchedulerOutput`` and shape, the core/policy interface (``CoreView``,
``Scheduler``), ``EngineCore`` (``add``, ``schedule``, ``update``) and
``Continuous``, vLLM v1's policy. Every executor (``sim.serving.replica``,
``calibration/``, the speed paths) calls ``schedule``, runs the step, then
``update``s the core with its end, so they cannot drift apart.
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


# Limits of a policy built without a scenario: vLLM's defaults for a GPU under 70 GiB
# serving the OpenAI API (sim.engine.policies.vllm_defaults's table takes them from here).
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
        """The two limits, each ``FALLBACK_LIMITS``'s where no scenario filled it in."""
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
        """The policy, with its swap space (None: recompute) and async scheduling."""
        raise NotImplementedError  # each policy of the family builds its own

    @field_validator("max_num_partial_prefills")
    @classmethod
    def _v1_has_no_concurrent_partial_prefill(cls, value: int) -> int:
        # vLLM v1 rejects any other value (EngineArgs._check_feature_supported).
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
    """What the next step computes: vLLM v1's ``SchedulerOutput``, the fields the
    simulator needs.

    ``scheduled``: the requests and the tokens each computes, in batch order
    (``num_scheduled_tokens``). ``scheduled_spec_decode_tokens``: the drafts each
    speculative decode keeps beyond its one token (acceptance is drawn at
    scheduling, so only kept drafts are scheduled). ``undrafted``: decodes the
    n-gram proposer drafted nothing for, shaped as one-token chunks
    (``sim.engine.speculative``). ``preempted``: in preemption order
    (``preempted_req_ids``). ``extra_s``: seconds beyond the cost model's, e.g. a
    swap copy (``sim.engine.kv_cache``).
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
    """The cost-relevant shape of a step computing ``scheduled`` (read before it runs),
    plus discarded decode slots at ``padding_contexts`` (static batching's)."""
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
    def num_held_seqs(self) -> int: ...

    @property
    def kv(self) -> BlockPool: ...

    def preempt(self, request: Request) -> None: ...

    def swap_out(self, request: Request) -> None: ...


class Scheduler(Protocol):
    """A scheduling policy.

    ``schedule`` moves requests between the core's queues (admission, preemption),
    reserves the next step's KV blocks and returns its output; it never advances
    token counters (``EngineCore.update`` does) and reads no clock but ``now_s``.
    ``padding_contexts``: contexts of discarded slots the next step computes
    (static batching's finished members). ``wake_at_s``: after an empty output,
    when to schedule again even if nothing arrives, or None.
    """

    @property
    def async_scheduling(self) -> bool: ...

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput: ...

    def padding_contexts(self, core: CoreView) -> Sequence[int]: ...

    def wake_at_s(self, core: CoreView) -> float | None: ...


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
        """``output``'s step ran from ``start_s``, then ``len(ends_s) - 1`` plain decode
        steps of the same requests (a speed path's run), ending at ``ends_s``."""


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
        # Async scheduling (vLLM's AsyncScheduler): step N+1 is planned while step N
        # runs, blind to arrivals after step N's start (``visible_until_s``), with
        # step N's finished requests still holding slots and blocks (``held``).
        self.async_scheduling = policy.async_scheduling
        self.held: list[Request] = []
        self.num_deferred_at_plan = 0  # hidden arrivals (+ held, if any waited) at the last plan
        # Runs of tokens after the first, for requests whose tokens were
        # interrupted (preemption): request_id -> [(first token time, tokens before)].
        self.later_runs: dict[int, list[tuple[float, int]]] = {}
        # Gaps between tokens not one step apart, and when each began (s).
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
        """The policy's next step, starting at ``now_s``; samples the queues. Requests
        ready after ``visible_until_s`` (async scheduling) stay hidden from it."""
        hidden: list[Request] = []
        if visible_until_s is not None:
            waiting = self.waiting  # later arrivals are at the back, in ready order
            while (
                waiting and (ready := waiting[-1].ready_s) is not None and ready > visible_until_s
            ):
                hidden.append(waiting.pop())
        output = self.policy.schedule(self, now_s)
        self.scheduled_at_s = now_s
        # Held requests matter only to someone still waiting (their seats and blocks).
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
        """``output``'s step ran from its scheduling to ``end_s`` (s): advance the
        counters, emit a token (plus kept drafts) for each request that caught up,
        finish those done, log the step."""
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
                    # _emit inlined (hot path): a decode right after the last, not final.
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
        """Emit ``num_tokens`` tokens at once; 1 if they continue an unbroken run."""
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
        """``request``'s last token at ``time_s``: free its blocks, record it."""
        request.finish_s = time_s
        self._finished_in_step.append(request)
        if self.async_scheduling:
            self.held.append(request)  # freed after the plan already under way
        else:
            self.kv.free(request)
        self._done(request)

    def remove_finished(self) -> None:
        """Take the requests finished since the last call out of ``running``."""
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
        """Swap preemption: free the GPU blocks, keep the computed tokens, requeue."""
        self.kv.free(request, self._num_unhashed_tokens(request))
        request.num_preemptions += 1
        request.num_swaps += 1
        self.waiting.appendleft(request)

    def _num_unhashed_tokens(self, request: Request) -> int:
        """Of ``request``'s computed tokens, those vLLM has no block hash for when it
        preempts it: under async scheduling, the in-flight step's token if the step
        before sampled too (its input was a placeholder when planned; vLLM hashes up
        to ``num_computed_tokens - num_output_placeholders``)."""
        if not self.async_scheduling or request.last_token_step != self.num_steps - 1:
            return 0
        # Its last run of tokens (sim.engine.tokens) began at its first token, or at
        # the token after the last break; two or more: it sampled in the step before.
        runs = self.later_runs.get(request.request_id)
        num_before_run = runs[-1][1] if runs else 0
        return int(request.num_generated_tokens - num_before_run >= 2)

    # -- logs --------------------------------------------------------------
    def new_logs(self) -> None:
        """An empty step log, queue series and record table."""
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
        """The records' columns, handed over: the core keeps an empty table, so a
        result that copies them frees the original (~130 bytes a request)."""
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

    Each step: running requests first, in admission order, each taking what it
    wants of the token budget, preempting the newest running request while the KV
    pool is short; then, if nothing was preempted, waiting requests FCFS within
    the sequence limit, the budget and the pool (cut to fit with chunked prefill).
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
        self.swap = swap  # None: preempt by recompute
        self._extra_s = 0.0  # swap copy time of the step being planned, s
        self._preempted: list[Request] = []  # victims of the step being planned
        self.async_scheduling = async_scheduling

    def padding_contexts(self, core: CoreView) -> Sequence[int]:
        return NO_PADDING

    def wake_at_s(self, core: CoreView) -> float | None:
        return None

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
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
                # The request placed was its own victim with nothing before it:
                # vLLM's step is empty and it schedules again at once.
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
        """Admit waiting requests FCFS until one does not fit."""
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
            # sequence, not just this chunk.
            if not kv.can_allocate(
                request, request.num_tokens if self.reserve_full_sequence else target
            ):
                return
            waiting.popleft()
            kv.allocate(request, target)
            if kv.caches_prefixes and not request.num_computed_tokens:
                # vLLM's PrefixCacheStats: a lookup per admission that makes one.
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
