"""The continuous policy's step when most of the running batch is a decode cohort.

``sim.engine.cohort`` keeps steady decoders in aggregate. The running loop of
``Continuous.schedule`` would give each member one token and, to those crossing
into a new block, one more block, counted. So only the running requests outside
the cohort (still prefilling, or just caught up) are walked here, in running
order, exactly as the loop walks them. That is equivalent only while nobody is
cut short: the budget and the free blocks must suffice for every running
request, or the loop would preempt or stop early, and that depends on where in
the running order each member stands. Then ``plan_with_cohort`` answers
``None``, before changing anything, and the policy dissolves the cohort and
plans as the reference does.
"""

from __future__ import annotations

from typing import Protocol

from sim.engine.cohort import Cohort
from sim.engine.kv_pool import BlockPool
from sim.engine.plan import StepPlan
from sim.engine.policies.base import CoreView
from sim.engine.request import Request


class CohortPolicy(Protocol):
    """What of ``Continuous`` this module uses (named here: it imports this module)."""

    max_num_batched_tokens: int
    max_tokens_per_request: int | None
    _extra_s: float

    def _admit(
        self, core: CoreView, scheduled: list[tuple[Request, int]], budget: int, now_s: float
    ) -> str: ...

    def _finish_plan(
        self,
        plan: StepPlan,
        kv: BlockPool,
        may_run: bool,
        interruptible: bool,
        cohort: Cohort | None = None,
        step: int = 0,
    ) -> None: ...


def plan_with_cohort(
    policy: CohortPolicy, core: CoreView, cohort: Cohort, now_s: float
) -> StepPlan | None:
    """The plan ``policy``'s running loop and admission would make, or ``None``.

    ``None`` when a request would be cut short (the KV pool runs out, or the
    budget before the last running request).
    """
    step = core.num_steps
    kv = core.kv
    block_size = kv.block_size_tokens
    running = core.running
    num_members = cohort.num_members
    budget = policy.max_num_batched_tokens - num_members
    free = kv.num_free_blocks - cohort.num_crossing(step)
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
            if request.cohort_step is not None:
                break
        else:
            # The usual order: every member before every listed request (those
            # joined the batch last), so the members crossing come first, counted.
            walked = tail
            num_crossing = cohort.num_crossing(step)
        for request in walked:
            joined = request.cohort_step
            if joined is not None:
                if (request.num_computed_tokens - joined + step) % block_size == 0:
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
        num_crossing = cohort.num_crossing(step)
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
    plan = StepPlan(scheduled, num_cohort=num_members)
    blocked_by = policy._admit(core, scheduled, budget, now_s)
    policy._finish_plan(
        plan,
        kv,
        may_run=blocked_by != "budget",
        interruptible=blocked_by == "empty",
        cohort=cohort,
        step=step,
    )
    plan.extra_s = policy._extra_s
    return plan
