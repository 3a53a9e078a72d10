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

from sim.cost.base import StepShape
from sim.engine.cohort import Cohort
from sim.engine.plan import StepPlan
from sim.engine.policies.base import CoreView
from sim.engine.policies.cohort_plan import plan_with_cohort
from sim.engine.policies.continuous_settings import ContinuousSettings
from sim.engine.policies.run_length import steps_within_pool
from sim.engine.request import Request
from sim.engine.swap import SwapSpace

__all__ = ["MAX_RUN_STEPS", "Continuous", "ContinuousConfig", "ContinuousSettings"]

if TYPE_CHECKING:
    from sim.engine.kv_pool import BlockPool

# A skip-ahead run is capped so that one SimPy timeout never covers more than
# this many steps' worth of numpy arrays (memory, not correctness).
MAX_RUN_STEPS = 4096


class ContinuousConfig(ContinuousSettings):
    """Settings of vLLM-style continuous batching."""

    kind: Literal["continuous"] = "continuous"

    def build(self) -> Continuous:
        return Continuous(self)


class Continuous:
    """The policy object; holds no state between steps besides its settings."""

    def __init__(self, config: ContinuousSettings) -> None:
        self.max_num_seqs = config.num_seqs_limit
        self.max_num_batched_tokens = config.batched_tokens_limit
        self.chunked_prefill = config.chunked_prefill
        # vLLM's long_prefill_token_threshold: 0 is off, so never caps.
        self.max_tokens_per_request = config.long_prefill_token_threshold or None
        # Preemption by swap: set by the policy factory (sim.engine.policies.features)
        # when ``preemption`` is ``swap``; None preempts by recompute.
        self.swap: SwapSpace | None = None
        self._extra_s = 0.0  # swap copy time of the step being planned, s
        # vLLM's async scheduling: the executor (sim.serving.replica) plans each
        # step while the previous one runs. Set by the policy factory.
        self.async_scheduling = False

    def schedule(self, core: CoreView, now_s: float) -> StepPlan:
        self._extra_s = 0.0
        cohort = core.cohort
        if cohort is not None and cohort.num_members:
            cohort_plan = plan_with_cohort(self, core, cohort, now_s)
            if cohort_plan is not None:
                return cohort_plan
            # Every request must be seen as itself (a preemption, a budget that
            # runs short): the members leave the cohort, and rejoin after the step.
            cohort.dissolve(core.running, core.num_steps, core.last_end_s)
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
        plan = StepPlan(scheduled)
        if preempted:
            extra_s = self._extra_s
            if not scheduled:
                # The request being placed was itself the victim and nothing ran
                # before it (priority victims need not be the last): vLLM's step
                # is empty and it schedules again at once, with the pool freed.
                plan = self.schedule(core, now_s)
            plan.extra_s += extra_s
            return plan
        stable = len(scheduled) == len(running)
        blocked_by = self._admit(core, scheduled, budget, now_s)
        # A run of decode steps may follow this step only if admission cannot
        # succeed during it: the queue is empty, or what blocked admission (the
        # sequence limit, the KV pool) can only tighten while decoding. A budget
        # block may lift once this step's prefill is done.
        self._finish_plan(
            plan, kv, may_run=stable and blocked_by != "budget", interruptible=blocked_by == "empty"
        )
        plan.extra_s = self._extra_s
        return plan

    def _victim_index(self, running: list[Request]) -> int:
        """Which running request to preempt when the pool runs out: the newest (vLLM FCFS)."""
        return len(running) - 1

    def _preempt(self, core: CoreView, victim: Request) -> None:
        """Preempt by swap if configured and the swap space has room, else by recompute."""
        if self.swap is not None:
            seconds = self.swap.swap_out(victim, core.kv.blocks_for(victim.num_computed_tokens))
            if seconds is not None:
                core.swap_out(victim)
                self._extra_s += seconds
                return
        core.preempt(victim)

    def _admit(
        self,
        core: CoreView,
        scheduled: list[tuple[Request, int]],
        budget: int,
        now_s: float,
    ) -> str:
        """Admit waiting requests FCFS; return what stopped admission.

        One of ``empty`` (queue drained), ``seqs``, ``budget`` or ``kv``.
        """
        kv, waiting, running = core.kv, core.waiting, core.running
        max_running = self.max_num_seqs - core.num_held_seqs  # held: async scheduling
        while waiting:
            if len(running) >= max_running:
                return "seqs"
            request = waiting[0]
            # Prefix caching: the cached head of the prompt is not computed again.
            num_cached = kv.num_cached_tokens(request)
            wanted = request.num_wanted_tokens - num_cached
            cap = self.max_tokens_per_request
            if cap is not None and wanted > cap:
                wanted = cap
            if budget == 0 or (wanted > budget and not self.chunked_prefill):
                return "budget"
            num_new = min(wanted, budget)
            target = request.num_computed_tokens + num_cached + num_new
            if not kv.can_allocate(request, target):
                return "kv"
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
        return "empty"

    def _finish_plan(
        self,
        plan: StepPlan,
        kv: BlockPool,
        may_run: bool,
        interruptible: bool,
        cohort: Cohort | None = None,
        step: int = 0,
    ) -> None:
        """Fill in the step's shape, and let decode steps follow if they can.

        After this step each scheduled request that has computed all its known
        tokens samples one more; if all do and none has finished, the next
        steps are plain decodes of the same batch until the first finishes.
        One pass over the batch for both (this runs once per event).
        """
        scheduled = plan.scheduled
        num_prefill_seqs = num_prefill_tokens = pairs = kv_read = 0
        num_decode_seqs = decode_context = 0
        min_left = MAX_RUN_STEPS
        run_context = 0
        all_emit = True
        for r, num_new in scheduled:
            cached = r.num_computed_tokens
            generated = r.num_generated_tokens
            computed = cached + num_new
            if num_new == 1 and generated > 0:
                num_decode_seqs += 1
                decode_context += computed
            else:
                num_prefill_seqs += 1
                num_prefill_tokens += num_new
                pairs += num_new * cached + num_new * (num_new + 1) // 2
                kv_read += computed
            if computed != r.num_prompt_tokens + generated:
                all_emit = False  # still prefilling after this step
            else:
                left = r.num_output_tokens - generated - 1
                if left < min_left:
                    min_left = left
                run_context += computed + 1
        num_seqs = len(scheduled)
        num_members = plan.num_cohort
        if num_members:  # each decodes one token: computed + 1 in this step
            assert cohort is not None
            context = cohort.context_tokens(step)
            num_decode_seqs += num_members
            decode_context += context + num_members
            run_context += context + 2 * num_members
            num_seqs += num_members
            first_finish = cohort.first_finish_step()
            assert first_finish is not None
            if first_finish - step < min_left:
                min_left = first_finish - step
        plan.known_shape = StepShape(
            num_prefill_seqs, num_prefill_tokens, pairs, kv_read, num_decode_seqs, decode_context
        )
        if not (may_run and all_emit and num_seqs and min_left >= 1):
            return
        plan.run_num_seqs = num_seqs
        plan.run_context_tokens = run_context
        plan.num_steps = 1 + steps_within_pool(kv, scheduled, min_left, cohort, step)
        plan.interruptible = (
            interruptible
            and num_seqs < self.max_num_seqs
            and num_seqs < self.max_num_batched_tokens
        )
