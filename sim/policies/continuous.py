"""Continuous batching in the style of vLLM v1.

Each step: running requests first (decodes and unfinished prefill chunks), in
the order they were admitted, each taking what it wants of the token budget;
when the KV pool cannot hold a running request's next tokens, the newest
running request is preempted by recompute until it can. Then, if nothing was
preempted, waiting requests are admitted first-come first-served while the
sequence limit, the token budget and the KV pool allow. With chunked prefill a
prompt may be cut to fit the remaining budget; without it a prompt is
scheduled whole or waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.plan import StepPlan
from sim.request import Request

if TYPE_CHECKING:
    from sim.core import EngineCore
    from sim.kv_cache import BlockPool

# A skip-ahead run is capped so that one SimPy timeout never covers more than
# this many steps' worth of numpy arrays (memory, not correctness).
MAX_RUN_STEPS = 4096


class ContinuousConfig(BaseModel):
    """Settings of vLLM-style continuous batching (names as vLLM's flags)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["continuous"] = "continuous"
    max_num_seqs: int = Field(default=256, ge=1, description="running requests at most")
    max_num_batched_tokens: int = Field(
        default=2048, ge=1, description="tokens computed per step at most"
    )
    chunked_prefill: bool = Field(default=True, description="cut prompts to fit the budget")

    def build(self) -> Continuous:
        return Continuous(self)


class Continuous:
    """The policy object; holds no state between steps besides its settings."""

    def __init__(self, config: ContinuousConfig) -> None:
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.chunked_prefill = config.chunked_prefill

    def schedule(self, core: EngineCore, now_s: float) -> StepPlan:
        kv = core.kv
        running = core.running
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted = False
        i = 0
        block_size = kv.block_size_tokens
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.num_computed_tokens
            wanted = request.num_prompt_tokens + request.num_generated_tokens - computed
            num_new = min(budget, wanted)
            target = computed + num_new
            if target <= request.num_blocks * block_size:
                # Fast path (most decode steps): the blocks held already suffice.
                scheduled.append((request, num_new))
                budget -= num_new
                i += 1
                continue
            while not kv.can_allocate(request, target):
                victim = running.pop()
                core.preempt(victim)
                preempted = True
                if victim is request:
                    break
            else:
                kv.allocate(request, target)
                scheduled.append((request, num_new))
                budget -= num_new
                i += 1
        all_running = len(scheduled) == len(running)
        admitted = False
        if not preempted:
            admitted = self._admit(core, scheduled, budget, now_s)
        plan = StepPlan(scheduled)
        if all_running and not preempted and not admitted:
            self._plan_run(plan, core, budget)
        return plan

    def _admit(
        self,
        core: EngineCore,
        scheduled: list[tuple[Request, int]],
        budget: int,
        now_s: float,
    ) -> bool:
        """Admit waiting requests FCFS; return whether any was admitted."""
        kv, waiting, running = core.kv, core.waiting, core.running
        admitted = False
        while waiting and budget > 0 and len(running) < self.max_num_seqs:
            request = waiting[0]
            wanted = request.num_wanted_tokens
            if wanted > budget and not self.chunked_prefill:
                break
            num_new = min(wanted, budget)
            target = request.num_computed_tokens + num_new
            if not kv.can_allocate(request, target):
                break
            waiting.popleft()
            kv.allocate(request, target)
            running.append(request)
            scheduled.append((request, num_new))
            budget -= num_new
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now_s
            admitted = True
        return admitted

    def _plan_run(self, plan: StepPlan, core: EngineCore, budget: int) -> None:
        """Mark how many identical decode steps may follow, if the batch is stable."""
        scheduled = plan.scheduled
        num_steps = MAX_RUN_STEPS
        context = 0
        for r, _ in scheduled:  # one pass: this runs once per event
            generated = r.num_generated_tokens
            if generated == 0 or r.num_prompt_tokens + generated - r.num_computed_tokens != 1:
                return  # not every request is decoding
            left = r.num_output_tokens - generated
            if left < num_steps:
                num_steps = left
            context += r.num_computed_tokens + 1
        plan.decode_context_tokens = context
        if num_steps > 1:
            num_steps = _steps_within_pool(core.kv, scheduled, num_steps)
        plan.num_steps = num_steps
        # Admission failed with the waiting queue non-empty, and the resources
        # that blocked it only shrink during a decode run, so a newcomer (which
        # queues behind) cannot change the plan. With an empty queue it can.
        plan.interruptible = (
            not core.waiting and len(core.running) < self.max_num_seqs and budget > 0
        )


def _steps_within_pool(
    kv: BlockPool, scheduled: list[tuple[Request, int]], num_steps: int
) -> int:
    """Largest k ≤ ``num_steps`` such that k decode steps fit in the free blocks.

    Step 0's blocks are already reserved; step j adds one token to each request.
    """

    block_size = kv.block_size_tokens

    def missing(k: int) -> int:
        # Blocks short of holding computed + k tokens, summed (ceil division inline: hot path).
        total = 0
        for r, _ in scheduled:
            short = -(-(r.num_computed_tokens + k) // block_size) - r.num_blocks
            if short > 0:
                total += short
        return total

    free = kv.num_free_blocks
    if missing(num_steps) <= free:
        return num_steps
    low, high = 1, num_steps  # missing(low) == 0 <= free < missing(high)
    while high - low > 1:
        mid = (low + high) // 2
        if missing(mid) <= free:
            low = mid
        else:
            high = mid
    return low
