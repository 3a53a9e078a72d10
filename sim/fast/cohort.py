"""The decode cohort: steady decoders advanced in aggregate, not one by one.

A request that has caught up with its tokens, emitted one in the last step and
grows its KV blocks by counts only (``BlockPool.grows_by_count``) changes in
the same way every step: one more computed and generated token, and a new
block every ``block_size_tokens`` steps. So the continuous policy and the
commit need not visit it each step. The cohort keeps such requests with
aggregates instead:

- their number and the sum of ``computed - step`` over them, so the summed
  context at any step is one multiplication away;
- how many are at each block phase (``computed - step`` modulo the block
  size): the requests that cross into a new block at step ``t`` are those of
  phase ``-t`` modulo the block size;
- the step at which each emits its last token, in a heap;
- the longest and shortest ``computed - step`` (the batch's spread of
  contexts, for a kernel cost's skew term): a count per offset and two heaps
  whose stale tops (offsets no member has any more) are dropped when read.

A member's counters (``num_computed_tokens``, ``num_generated_tokens``,
``num_blocks``, ``last_token_step``, ``last_token_s``) are left as they were
when it joined, at the step ``Cohort._joined`` holds for it, and are brought up to
date (``catch_up``) when it leaves: it finishes, or the policy needs every
request as itself (a preemption, a budget that runs short; ``dissolve``).
Plans and commits therefore cost O(requests that change), not O(batch).

``CohortCore`` is the engine core that runs this: an ``EngineCore`` whose
plans and commits give exactly what the reference's (``sim.engine.scheduler``)
would, or that declines and lets the reference methods run. The replica asks
for it (``faster_core``, below) only for plain continuous batching in
skip-ahead mode; ``tests/properties/test_cohort_equivalence.py`` requires
byte-identical results with it and without.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from sim.cost.base import StepShape
from sim.engine.kv_cache import BlockPool
from sim.engine.request import Request
from sim.engine.scheduler import (
    MAX_RUN_STEPS,
    Continuous,
    EngineCore,
    Scheduler,
    StepPlan,
    steps_within_pool,
)


class Cohort:
    """Steady decoders of one engine core (see the module's docstring)."""

    __slots__ = (
        "_by_phase",
        "_finish_steps",
        "_finishing",
        "_high_offsets",
        "_joined",
        "_low_offsets",
        "_offset_counts",
        "block_size_tokens",
        "num_members",
        "offset_sum",
    )

    def __init__(self, block_size_tokens: int) -> None:
        self.block_size_tokens = block_size_tokens
        self.num_members = 0
        # Sum over members of (computed tokens - step): the summed context at step
        # t is offset_sum + num_members * t.
        self.offset_sum = 0
        self._by_phase = [0] * block_size_tokens  # members by (computed - step) mod block size
        self._finishing: dict[int, list[Request]] = {}  # step of the last token -> members
        self._finish_steps: list[int] = []  # heap of the keys of _finishing
        # Member -> the step its counters were last brought up to date.
        self._joined: dict[Request, int] = {}
        # Members by offset (computed - step), and a min-heap of the offsets and a
        # max-heap of their negatives, each holding an offset at least once while
        # some member has it (a stale top is popped when read: O(log n) amortised).
        self._offset_counts: dict[int, int] = {}
        self._low_offsets: list[int] = []
        self._high_offsets: list[int] = []

    # -- membership ---------------------------------------------------------
    def join(self, request: Request, step: int) -> None:
        """Take in ``request``, whose counters are up to date before ``step``."""
        self._joined[request] = step
        offset = request.num_computed_tokens - step
        self.num_members += 1
        self.offset_sum += offset
        self._by_phase[offset % self.block_size_tokens] += 1
        count = self._offset_counts.get(offset, 0)
        self._offset_counts[offset] = count + 1
        if not count:  # a new offset: on the heaps (a stale copy there does no harm)
            low, counts = self._low_offsets, self._offset_counts
            if len(low) > 2 * len(counts) + 64:  # mostly stale: rebuild (amortised O(1))
                low[:] = sorted(counts)
                self._high_offsets[:] = sorted(-o for o in counts)
            else:
                heapq.heappush(low, offset)
                heapq.heappush(self._high_offsets, -offset)
        last = step + request.num_output_tokens - request.num_generated_tokens - 1
        finishing = self._finishing.get(last)
        if finishing is None:
            self._finishing[last] = [request]
            heapq.heappush(self._finish_steps, last)
        else:
            finishing.append(request)

    def catch_up(self, request: Request, step: int, last_end_s: float) -> None:
        """Bring a member's counters up to date before ``step`` (the previous step
        ended at ``last_end_s``) and let it go; the caller removes it from the
        finishing table (``leave_finishing``) or clears the cohort (``dissolve``)."""
        joined = self._joined.pop(request)
        offset = request.num_computed_tokens - joined
        self.num_members -= 1
        self.offset_sum -= offset
        self._by_phase[offset % self.block_size_tokens] -= 1
        counts = self._offset_counts
        left = counts[offset] - 1
        if left:
            counts[offset] = left
        else:
            del counts[offset]
        done = step - joined
        if done:
            computed = request.num_computed_tokens + done
            request.num_computed_tokens = computed
            request.num_generated_tokens += done
            request.num_blocks = -(-computed // self.block_size_tokens)
            request.last_token_step = step - 1
            request.last_token_s = last_end_s

    def join_steady(self, scheduled: list[tuple[Request, int]], kv: BlockPool, step: int) -> None:
        """Take in the steady decoders among a committed step's listed requests;
        ``step`` is the next step, the one they would decode in."""
        last = step - 1
        block_size = self.block_size_tokens
        for request, _ in scheduled:
            computed = request.num_computed_tokens
            if (
                request.last_token_step == last
                and request.finish_s is None
                and computed + 1 == request.num_prompt_tokens + request.num_generated_tokens
                and request.num_blocks == -(-computed // block_size)
                and kv.grows_by_count(request)
            ):
                self.join(request, step)

    def leave_finishing(self, step: int, running: list[Request], end_s: float) -> list[Request]:
        """Members that emit their last token in ``step`` (ending at ``end_s``), in
        running order, let go with their counters brought up to date."""
        heap = self._finish_steps
        if not heap or heap[0] != step:
            return []
        heapq.heappop(heap)
        members = self._finishing.pop(step)
        if len(members) > 1:
            members.sort(key=running.index)  # rare: two finish in one step
        for request in members:
            self.catch_up(request, step + 1, end_s)
        return members

    def dissolve(self, running: list[Request], step: int, last_end_s: float) -> None:
        """Let every member go, counters up to date before ``step``."""
        joined = self._joined
        for request in running:
            if request in joined:
                self.catch_up(request, step, last_end_s)
        assert self.num_members == 0, "a member was not running"
        self._finishing.clear()
        self._finish_steps.clear()
        self._low_offsets.clear()
        self._high_offsets.clear()

    # -- aggregates ------------------------------------------------------------
    def context_tokens(self, step: int) -> int:
        """Members' summed computed tokens before ``step``."""
        return self.offset_sum + self.num_members * step

    def max_context_tokens(self, step: int) -> int:
        """The longest member's computed tokens before ``step`` (0 with no member)."""
        if not self.num_members:
            return 0
        heap, counts = self._high_offsets, self._offset_counts
        while -heap[0] not in counts:
            heapq.heappop(heap)
        return step - heap[0]

    def min_context_tokens(self, step: int) -> int:
        """The shortest member's computed tokens before ``step`` (0 with no member)."""
        if not self.num_members:
            return 0
        heap, counts = self._low_offsets, self._offset_counts
        while heap[0] not in counts:
            heapq.heappop(heap)
        return heap[0] + step

    def num_crossing(self, step: int) -> int:
        """Members that need a new KV block for the token they compute in ``step``."""
        return self._by_phase[-step % self.block_size_tokens]

    def num_crossing_between(self, first: int, num_steps: int) -> int:
        """New KV blocks members need over ``num_steps`` steps from ``first`` on."""
        size = self.block_size_tokens
        total = (num_steps // size) * self.num_members
        left = num_steps % size
        if left:
            # Steps first .. first + left - 1 visit phases -first, -first - 1, ...
            # (mod size): one cyclic slice of _by_phase, summed in C.
            by_phase = self._by_phase
            high = -first % size  # the first step's phase, the slice's top
            low = high - left + 1
            if low >= 0:
                total += sum(by_phase[low : high + 1])
            else:
                total += sum(by_phase[: high + 1]) + sum(by_phase[low:])
        return total

    def first_finish_step(self) -> int | None:
        """The earliest step in which a member emits its last token."""
        return self._finish_steps[0] if self._finish_steps else None


@dataclass(slots=True)
class CohortPlan(StepPlan):
    """A plan whose step also decodes ``num_cohort`` cohort members, one token each,
    beside ``scheduled``: every running request is then either listed or a member.
    It always carries its shape (``known_shape``)."""

    num_cohort: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.num_cohort


class CohortCore(EngineCore):
    """An engine core under plain continuous batching whose steady decoders form a
    cohort. Plans and commits with members give what the reference core's would;
    a plan the cohort cannot make as the reference would dissolves it first."""

    def __init__(
        self,
        policy: Continuous,
        kv: BlockPool,
        max_model_len_tokens: int,
        replica: int = 0,
        on_done: Callable[[Request], None] | None = None,
    ) -> None:
        super().__init__(policy, kv, max_model_len_tokens, replica, on_done)
        self.continuous = policy
        # None once a recorder is attached (it sees every request of every step).
        self.cohort: Cohort | None = Cohort(kv.block_size_tokens)
        self._deferred: list[Request] | None = None  # finishes put off, to order them

    # -- schedule ------------------------------------------------------------
    def _plan(self, now_s: float) -> StepPlan:
        cohort = self.cohort
        if cohort is None:
            return super()._plan(now_s)
        if self.recorder is not None:
            cohort.dissolve(self.running, self.num_steps, self.last_end_s)
            self.cohort = None  # a recorder sees every request of every step
        elif cohort.num_members:
            self.continuous._extra_s = 0.0
            plan = self._plan_with_cohort(cohort, now_s)
            if plan is not None:
                return plan
            # Every request must be seen as itself (a preemption, a budget that
            # runs short): the members leave the cohort, and rejoin after the step.
            cohort.dissolve(self.running, self.num_steps, self.last_end_s)
        return super()._plan(now_s)

    def _plan_with_cohort(self, cohort: Cohort, now_s: float) -> CohortPlan | None:
        """The plan the continuous policy's running loop and admission would make,
        or ``None`` when a request would be cut short (the KV pool runs out, or the
        budget before the last running request), before changing anything.

        The running loop would give each member one token and, to those crossing
        into a new block, one more block, counted. So only the running requests
        outside the cohort (still prefilling, or just caught up) are walked here, in
        running order, exactly as the loop walks them. That is equivalent only while
        nobody is cut short, which depends on where in the running order each
        member stands.
        """
        policy = self.continuous
        step = self.num_steps
        kv = self.kv
        block_size = kv.block_size_tokens
        running = self.running
        num_members = cohort.num_members
        joined = cohort._joined
        budget = policy.max_num_batched_tokens - num_members
        num_crossing_now = cohort.num_crossing(step)  # members needing a block in this step
        free = kv.num_free_blocks - num_crossing_now
        scheduled: list[tuple[Request, int]] = []
        # Members crossing into a new block before each listed request, in running
        # order: the loop grows them first, and a listed request's allocation may
        # take blocks from the free queue, so the same blocks go to the same requests.
        crossing_before: list[int] = []
        num_crossing = 0
        num_listed = len(running) - num_members
        if num_listed:
            cap = policy.max_tokens_per_request
            walked: list[Request] = running
            tail = running[-num_listed:]
            for request in tail:
                if request in joined:
                    break
            else:
                # The usual order: every member before every listed request (those
                # joined the batch last), so the members crossing come first, counted.
                walked = tail
                num_crossing = num_crossing_now
            for request in walked:
                joined_at = joined.get(request)
                if joined_at is not None:
                    if (request.num_computed_tokens - joined_at + step) % block_size == 0:
                        num_crossing += 1
                    continue
                computed = request.num_computed_tokens
                caught_up = request.num_prompt_tokens + request.num_generated_tokens
                wanted = caught_up - computed
                if cap is not None and wanted > cap:
                    wanted = cap
                budget -= wanted
                if budget < 0:
                    if request is not running[-1]:
                        return None  # the loop would stop before some member
                    # The last running request takes what is left (a chunk), as in the loop.
                    wanted += budget
                    budget = 0
                    if wanted == 0:
                        return None  # the loop stops before it: not every request runs
                short = -(-(computed + wanted) // block_size) - request.num_blocks
                if short > 0:
                    free -= short
                scheduled.append((request, wanted))
                crossing_before.append(num_crossing)
                num_crossing = 0
        if budget < 0 or free < 0:
            return None
        # What the running loop does, members in aggregate, the others one by one.
        if not scheduled:
            num_crossing = num_crossing_now
        for (request, num_new), num_grown in zip(scheduled, crossing_before, strict=True):
            kv.num_free_blocks -= num_grown  # members before it grow by counts (try_grow)
            computed = request.num_computed_tokens
            target = computed + num_new
            if target > request.num_blocks * block_size:
                if not kv.try_grow(request, target):  # pragma: no cover - counted above
                    raise RuntimeError(f"request {request.request_id}: KV blocks counted wrong")
            elif target // block_size > computed // block_size:
                kv.cache_full_blocks(request, target)
        kv.num_free_blocks -= num_crossing  # the members after the last listed request
        plan = CohortPlan(scheduled, num_cohort=num_members)
        # Continuous._admit returns at once on an empty queue (most plans): no call.
        blocked_by = policy._admit(self, scheduled, budget, now_s) if self.waiting else "empty"
        self._finish_plan(
            plan, may_run=blocked_by != "budget", interruptible=blocked_by == "empty", step=step
        )
        plan.extra_s = policy._extra_s
        return plan

    def _finish_plan(self, plan: CohortPlan, may_run: bool, interruptible: bool, step: int) -> None:
        """``Continuous._finish_plan`` for a plan with members (each decodes one
        token: computed + 1 in this step)."""
        assert self.cohort is not None
        policy, cohort, scheduled = self.continuous, self.cohort, plan.scheduled
        num_members = plan.num_cohort
        context = cohort.context_tokens(step)
        # The members' longest and shortest context in this step (one token each).
        longest = cohort.max_context_tokens(step) + 1
        shortest = cohort.min_context_tokens(step) + 1
        if scheduled:
            plan.known_shape, all_emit, min_left, run = policy._tally(
                scheduled, num_members, context + num_members, longest, shortest
            )
            run_context, run_longest, run_shortest = run
        else:  # the members alone (half the plans): what _tally gives for no request
            plan.known_shape = StepShape(
                0, 0, 0, 0, num_members, context + num_members, longest, shortest
            )
            all_emit, min_left = True, MAX_RUN_STEPS
            run_context = run_longest = run_shortest = 0
        run_context += context + 2 * num_members
        num_seqs = len(scheduled) + num_members
        first_finish = cohort.first_finish_step()
        assert first_finish is not None
        if first_finish - step < min_left:
            min_left = first_finish - step
        if not (may_run and all_emit and num_seqs and min_left >= 1):
            return
        plan.run_num_seqs = num_seqs
        plan.run_context_tokens = run_context
        # In the next step every member's context is one longer.
        plan.run_max_context_tokens = max(run_longest, longest + 1)
        plan.run_min_context_tokens = (
            min(run_shortest, shortest + 1) if run_shortest else shortest + 1
        )
        plan.num_steps = 1 + steps_within_pool(
            self.kv,
            scheduled,
            min_left,
            num_members,
            lambda k: cohort.num_crossing_between(step + 1, k),  # the members' new blocks
        )
        plan.interruptible = (
            interruptible
            and num_seqs < policy.max_num_seqs
            and num_seqs < policy.max_num_batched_tokens
        )

    # -- commit ----------------------------------------------------------------
    def commit(self, plan: StepPlan, start_s: float, ends_s: list[float]) -> None:
        super().commit(plan, start_s, ends_s)
        if self.cohort is not None and plan.scheduled:
            self.cohort.join_steady(plan.scheduled, self.kv, self.num_steps)

    def _commit_one(self, plan: StepPlan, start_s: float, end_s: float) -> None:
        """The reference's, for a plan whose members each decode one token too."""
        if type(plan) is not CohortPlan:
            super()._commit_one(plan, start_s, end_s)
            return
        assert self.cohort is not None
        num_members = plan.num_cohort  # each decodes one token, continuing its run
        members = self.cohort.leave_finishing(self.num_steps, self.running, end_s)
        if members:
            self._deferred = []  # listed requests' finishes wait to be put in order
        num_prefill, num_decode, num_itl, num_fresh = self._advance_one(plan.scheduled, end_s)
        if members:
            listed, self._deferred = self._deferred, None
            self._finish_in_order(members, listed or [], end_s)
        num_decode += num_members
        num_itl += num_members
        self.steps.add_step(
            start_s,
            end_s,
            num_prefill,
            num_decode + plan.padding_seqs,
            num_itl,
            num_itl + num_fresh,
        )
        self.num_steps += 1

    def _commit_run(self, plan: StepPlan, start_s: float, ends_s: list[float]) -> None:
        """The reference's, for a plan whose members decode in every step too."""
        if type(plan) is not CohortPlan:
            super()._commit_run(plan, start_s, ends_s)
            return
        cohort = self.cohort
        assert cohort is not None
        num_members = plan.num_cohort
        first = self.num_steps
        last = first + len(ends_s) - 1
        end_first, end_last = ends_s[0], ends_s[-1]
        # The members' blocks for the steps after the first, by count.
        self.kv.num_free_blocks -= cohort.num_crossing_between(first + 1, len(ends_s) - 1)
        if plan.scheduled:
            finished, num_prefill, num_decode, num_itl = self._advance_run(plan.scheduled, ends_s)
        else:  # the members alone (half the runs)
            finished, num_prefill, num_decode, num_itl = [], 0, 0, 0
        # Free only once every request's blocks are counted (as the reference's run).
        members = cohort.leave_finishing(last, self.running, end_last)
        if members or finished:
            self._finish_in_order(members, finished, end_last)
        steps = self.steps
        num_seqs = len(plan.scheduled) + num_members  # each emits a token in every step
        steps.add_step(
            start_s,
            end_first,
            num_prefill,
            num_members + num_decode + plan.padding_seqs,
            num_members + num_itl,
            num_seqs,
        )
        steps.add_decode_run(end_first, ends_s[1:], plan.run_num_seqs, num_seqs)
        self.num_steps = last + 1

    def _finish_in_order(self, members: list[Request], listed: list[Request], end_s: float) -> None:
        """Finish cohort members and listed requests whose last token ended at ``end_s``,
        in running order, as the per-request commit would (it frees their blocks)."""
        finishing = members + listed
        if members and listed:  # rare: the cohort does not keep its members' order
            finishing.sort(key=self.running.index)
        for request in finishing:
            self.finish(request, end_s)

    def finish(self, request: Request, time_s: float) -> None:
        if self._deferred is not None:
            self._deferred.append(request)
            return
        super().finish(request, time_s)

    def flush_unfinished(self) -> None:
        if self.cohort is not None:
            self.cohort.dissolve(self.running, self.num_steps, self.last_end_s)
        super().flush_unfinished()


def faster_core(
    policy: Scheduler,
    kv: BlockPool,
    max_model_len_tokens: int,
    replica: int = 0,
    on_done: Callable[[Request], None] | None = None,
) -> EngineCore | None:
    """An engine core that advances steady decoders in aggregate (a ``CohortCore``),
    for plain continuous batching only (a subclass plans its own way); ``None``
    otherwise. The caller drives it in skip-ahead mode, as the simulator's replica."""
    if type(policy) is not Continuous:
        return None
    return CohortCore(policy, kv, max_model_len_tokens, replica, on_done)
