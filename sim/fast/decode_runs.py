"""Runs of decode steps: many identical steps as one event (the replica's skip-ahead).

After a step in which every scheduled request catches up with its tokens, the
steps that follow are often plain decodes of the same batch, until the first
request finishes, the KV pool runs short, or admission could change the batch.
``plan_run`` works out from the scheduler's public state how many such steps
follow and their shape; the executor prices them in one go and ``commit_run``
applies them in one pass, O(batch) rather than O(batch x steps). ``plan_run``
declines (None: one step) whenever it cannot be sure, which costs speed only.

``RunningReplica`` is the reference ``Replica`` with its step replaced by such a
run. An arrival that could change the batch interrupts it: the step in progress
finishes, the steps done are committed and it plans again; when the next arrival
is known (``horizon``: set by a feed, ``sim.fast.feed.FedReplica``) the run ends
at the step it lands in (one step later with async scheduling). So events grow
with requests, not tokens.

It knows the shipped policies by their exact classes (a subclass may admit by
other rules, so it runs step by step until it is added here).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy

from sim.cost.base import CostModel, StepShape
from sim.engine.kv_cache import BlockPool
from sim.engine.policies.dynamic import Dynamic
from sim.engine.policies.least_attained_service import LeastAttainedService
from sim.engine.policies.orca import Orca
from sim.engine.policies.prefill_first import PrefillFirst
from sim.engine.policies.priority import Priority
from sim.engine.policies.shortest_prompt_first import ShortestPromptFirst
from sim.engine.policies.static import Static
from sim.engine.request import Request
from sim.engine.scheduler import Continuous, EngineCore, Scheduled, Scheduler, SchedulerOutput
from sim.fast.run_ends import RunEnds
from sim.serving.replica import Replica

# A run is capped so that one SimPy timeout never covers more than this many
# steps' worth of numpy arrays (memory, not correctness).
MAX_RUN_STEPS = 4096


@dataclass(frozen=True, slots=True)
class DecodeRun:
    """``num_steps`` steps (> 1): the scheduled one, then plain decode steps whose
    second has the decode-only ``shape`` (each later one: every context one token
    longer). ``interruptible``: an arrival during the run could change the batch."""

    num_steps: int
    interruptible: bool
    shape: StepShape


def plan_run(core: EngineCore, output: SchedulerOutput) -> DecodeRun | None:
    """The decode steps that may follow ``output``'s step, just scheduled; None: one step."""
    if output.preempted or output.scheduled_spec_decode_tokens or not output.scheduled:
        return None
    policy, scheduled = core.policy, output.scheduled
    kind = type(policy)
    if isinstance(policy, Static) and kind in (Static, Dynamic):
        return _batch_run(core, scheduled)
    if not isinstance(policy, Continuous):
        return None
    if kind is Continuous or kind in ORDERED:
        return _continuous_run(core, policy, scheduled, overtaken=kind is not Continuous)
    if kind is Orca:  # no token budget: admission stops at a slot or the KV pool only
        return _continuous_run(core, policy, scheduled, overtaken=False, budget_blocks=False)
    if kind is PrefillFirst:
        if not all(num_new == 1 and r.num_generated_tokens for r, num_new in scheduled):
            return None  # a prefill step: the next one decodes the whole batch
        # A decode step: admission failed before it, at the sequence limit or the KV
        # pool (never the budget: nothing was scheduled ahead of the head).
        return _continuous_run(core, policy, scheduled, overtaken=False, budget_blocks=False)
    return None


# The continuous policies that reorder the queue before each step: a head blocked
# by the KV pool may be overtaken by an arrival that fits, so arrivals interrupt.
ORDERED = (Priority, ShortestPromptFirst, LeastAttainedService)


def _continuous_run(
    core: EngineCore,
    policy: Continuous,
    scheduled: Scheduled,
    overtaken: bool,
    budget_blocks: bool = True,
) -> DecodeRun | None:
    """A run of continuous batching: every running request is scheduled and emits a
    token after this step, and admission cannot succeed before the first finishes
    (the queue is empty, or what blocks its head, the sequence limit or the KV pool,
    only tightens while decoding; a budget block may lift, so no run then:
    ``budget_blocks``). ``overtaken``: an arrival may go ahead of a head the KV
    pool blocks, so arrivals interrupt the run then too."""
    running, waiting = core.running, core.waiting
    num_seqs = len(scheduled)
    if num_seqs != len(running):
        return None  # the budget ran out before some running request
    blocked_by_kv = False
    if waiting and num_seqs < policy.max_num_seqs:
        if budget_blocks:
            budget = policy.max_num_batched_tokens - sum(num_new for _, num_new in scheduled)
            # Without chunking, a reordering policy's head is its own pick: unknown here.
            if budget == 0 or (
                not policy.chunked_prefill
                and (overtaken or not _fits_whole(policy, waiting[0], budget))
            ):
                return None  # the budget may have stopped the head: it may lift next step
        blocked_by_kv = True
    # The newest admission is the one a cut chunk leaves prefilling: look at it
    # before walking the batch.
    request, num_new = scheduled[-1]
    if request.num_computed_tokens + num_new != request.num_tokens:
        return None  # still prefilling after this step
    fewest_left = MAX_RUN_STEPS
    context = longest = shortest = 0
    for request, num_new in scheduled:
        computed = request.num_computed_tokens + num_new
        generated = request.num_generated_tokens
        if computed != request.num_prompt_tokens + generated:
            return None  # still prefilling after this step
        left = request.num_output_tokens - generated - 1  # tokens after this step's
        if left < 1:
            return None  # it finishes in this step: the batch changes after it
        if left < fewest_left:
            fewest_left = left
        after = computed + 1  # its context in the next step
        context += after
        if after > longest:
            longest = after
        if not shortest or after < shortest:
            shortest = after
    num_steps = 1 + steps_within_pool(core.kv, scheduled, fewest_left)
    if num_steps == 1:
        return None
    interruptible = (
        (not waiting or (overtaken and blocked_by_kv))
        and num_seqs < policy.max_num_seqs
        and num_seqs < policy.max_num_batched_tokens
    )
    return DecodeRun(
        num_steps, interruptible, StepShape(0, 0, 0, 0, num_seqs, context, longest, shortest)
    )


def _fits_whole(policy: Continuous, head: Request, budget: int) -> bool:
    """Whether, without chunking, the queue's (FCFS) head was not stopped by the
    budget: the tokens it would compute (cut at the long-prefill threshold) fit in
    what this step left. Prefix-cache hits only lower that count, so a fit is sure;
    a miss may be the cache's to decide, and the run is declined."""
    wanted = head.num_prompt_tokens + head.num_generated_tokens - head.num_computed_tokens
    cap = policy.max_tokens_per_request
    if cap is not None and wanted > cap:
        wanted = cap
    return wanted <= budget


def _batch_run(core: EngineCore, scheduled: Scheduled) -> DecodeRun | None:
    """A running static (or dynamic) batch decodes until its first member finishes;
    nothing joins it, so arrivals cannot interrupt. Its KV blocks were reserved in
    full when it formed."""
    if not scheduled[0][0].num_generated_tokens:
        return None  # the batch's prefill step
    running = core.running
    num_steps = min(
        min(r.num_output_tokens - r.num_generated_tokens for r in running), MAX_RUN_STEPS
    )
    if num_steps < 2:
        return None
    padded = list(core.padding_contexts())
    # This step's contexts, every slot's (each computes one token); one more in the next.
    contexts = padded + [r.num_computed_tokens + 1 for r in running]
    num_slots = len(scheduled) + len(padded)
    context = sum(padded) + sum(r.num_computed_tokens + 1 for r in running) + num_slots
    shape = StepShape(0, 0, 0, 0, num_slots, context, max(contexts) + 1, min(contexts) + 1)
    return DecodeRun(num_steps, False, shape)


def max_num_seqs(policy: Scheduler) -> int:
    """The most sequences a step of ``policy``'s runs holds (0: it makes none)."""
    if isinstance(policy, Static):
        return policy.max_batch_size  # padding slots included
    return policy.max_num_seqs if isinstance(policy, Continuous) else 0


def steps_within_pool(kv: BlockPool, scheduled: Scheduled, num_steps: int) -> int:
    """Largest k <= ``num_steps`` such that k decode steps after this one fit in the pool.

    This step's blocks are reserved; each later step adds one token per request.
    """
    block_size = kv.block_size_tokens

    def missing(k: int) -> int:
        # Blocks short of holding computed + new + k tokens (ceil division inline: hot path).
        total = 0
        for r, num_new in scheduled:
            short = -(-(r.num_computed_tokens + num_new + k) // block_size) - r.num_blocks
            if short > 0:
                total += short
        return total

    free = kv.num_free_blocks
    # Cheap bound first (the common case): k more tokens need at most
    # k // block_size + 1 new blocks per request.
    if len(scheduled) * (num_steps // block_size + 1) <= free or missing(num_steps) <= free:
        return num_steps
    low, high = 0, num_steps  # missing(low) == 0 <= free < missing(high)
    while high - low > 1:
        mid = (low + high) // 2
        if missing(mid) <= free:
            low = mid
        else:
            high = mid
    return low


def commit_run(
    core: EngineCore,
    output: SchedulerOutput,
    first_shape: StepShape,
    start_s: float,
    ends_s: list[float],
) -> None:
    """``output``'s step (of shape ``first_shape``), then ``len(ends_s) - 1`` decode
    steps of the same batch (a run ``plan_run`` allowed), the j-th ending at
    ``ends_s[j]``, in one pass: what ``EngineCore.update`` step by step would leave,
    to the bit."""
    if core.recorder is not None:
        core.recorder.on_commit(core, output, start_s, ends_s)
    num_padding = len(core.padding_contexts())  # counted before any finishes
    num_steps = len(ends_s)
    first = core.num_steps
    last = first + num_steps - 1
    end_first, end_last = ends_s[0], ends_s[-1]
    num_itl = 0
    kv = core.kv
    block_size = kv.block_size_tokens
    finished: list[Request] = []
    for request, num_new in output.scheduled:
        generated = request.num_generated_tokens
        if request.last_token_step == first - 1:
            num_itl += 1
        else:
            core.break_run(request, end_first)
            if request.first_token_s is None:
                request.first_token_s = end_first
        computed = request.num_computed_tokens + num_new + num_steps - 1
        request.num_computed_tokens = computed
        request.num_generated_tokens = generated + num_steps
        request.last_token_step = last
        request.last_token_s = end_last
        short = -(-computed // block_size) - request.num_blocks
        if short > 0:  # grown by count: plan_run checked the pool suffices (BlockPool)
            kv.num_free_blocks -= short
            request.num_blocks += short
        if generated + num_steps == request.num_output_tokens:
            finished.append(request)
    # Free only once every request's blocks are counted, as step by step, where
    # the last step's blocks are all reserved before any request finishes (the
    # peak decides which cached prefix blocks get evicted).
    for request in finished:
        core.finish(request, end_last)
    num_seqs = len(output.scheduled)  # each emits a token in every step of the run
    steps = core.steps
    # The first step's prefill tokens and decode slots (padding included), as
    # scheduled_shape tallies them.
    steps.add_step(
        start_s,
        end_first,
        first_shape.num_prefill_tokens,
        first_shape.num_decode_seqs,
        num_itl,
        num_seqs,
    )
    steps.add_decode_run(end_first, ends_s[1:], num_seqs + num_padding, num_seqs)
    core.num_steps = last + 1
    core.last_end_s = end_last
    core.remove_finished()


class RunningReplica(Replica):
    """The reference ``Replica``, with plain decode steps run as one timeout
    (module docstring): the same steps, times and updates, to the bit."""

    def __init__(self, env: simpy.Environment, core: EngineCore, cost: CostModel) -> None:
        self._interruptible = False  # an arrival during the run under way may change it
        # Steps a run goes on past the step during which a request arrives.
        self._lag = 2 if core.async_scheduling else 1
        # When set, the earliest time a new request can reach this replica (s): a run
        # ends at the step it lands in instead of being interrupted (a feed sets it).
        self.horizon: Callable[[], float] | None = None
        self._run_ends = RunEnds(cost, max_num_seqs(core.policy))
        super().__init__(env, core, cost)

    def submit(self, request: Request) -> None:
        """Hand over a tokenized request; wake the replica if it is idle, or cut
        short a run the request could change."""
        busy = not self.is_idle
        super().submit(request)
        if busy and self._interruptible and request.rejection_reason is None:
            self._interruptible = False
            self.process.interrupt()

    def run_step(
        self, output: SchedulerOutput, now: float
    ) -> Generator[simpy.Event, Any, tuple[float, float | None]]:
        core, cost, env = self.core, self.cost, self.env
        # Deferred work (a hidden arrival, a held slot) may change the next plan,
        # so a run would promise too much: one step.
        deferred = self.async_scheduling and core.num_deferred_at_plan > 0
        run = None if deferred else plan_run(core, output)
        if run is None:
            return (yield from super().run_step(output, now))
        # ends[j] = ((now + d0) + d1) + ... + dj, summed in the same order
        # as step-by-step execution, so both modes agree exactly.
        first_shape = core.step_shape(output)
        first_s = cost.step_s(first_shape) + output.extra_s  # e.g. a swap copy
        next_s = float("inf")
        if run.interruptible and self.horizon is not None:
            # Stop at the end of the step running when the next request arrives
            # (the step after it with async scheduling: that one was planned),
            # instead of being interrupted.
            next_s = self.horizon()
        else:
            self._interruptible = run.interruptible
        lag = self._lag
        ends = self._run_ends.ends(now + first_s, run.shape, run.num_steps - 1, next_s, lag)
        try:
            yield env.timeout(ends[-1] - now)
        except simpy.Interrupt:
            # Steps whose end has passed are done; the one running finishes (and,
            # with async scheduling, the one already planned after it). A step
            # ending exactly now counts as running, as in step-by-step mode, where
            # the newcomer would join the step starting now.
            num_done = bisect_left(ends, env.now)
            ends = ends[: min(num_done + lag, len(ends))]
            if ends[-1] > env.now:
                yield env.timeout(ends[-1] - env.now)
        self._interruptible = False
        if len(ends) == 1:
            core.update(output, ends[0])
        else:
            commit_run(core, output, first_shape, now, ends)
        if not self.async_scheduling:
            return ends[-1], None
        return ends[-1], (ends[-2] if len(ends) > 1 else now)
