"""Prefill-first batching in the style of vLLM v0's default scheduler (no mixing).

Each step is either a **prefill step**, whenever a waiting request can be
admitted (whole prompts FCFS within ``max_num_seqs``, the token budget and the
KV pool; running requests wait, so long prompts show as inter-token stalls), or
a **decode step** of every running request, preempting the newest by recompute
while the pool is short. The first prompt of a step is taken whole even beyond
the budget (vLLM v0 refuses it), so no request waits forever.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sim.config import Frozen
from sim.engine.request import Request
from sim.engine.scheduler import Continuous, ContinuousConfig, CoreView, Scheduled, SchedulerOutput


class PrefillFirstConfig(Frozen):
    """Settings of vLLM v0-style prefill-first scheduling (names as vLLM's flags)."""

    kind: Literal["prefill_first"] = "prefill_first"
    max_num_seqs: int = Field(default=256, ge=1, description="running requests at most")
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, description="prompt tokens per prefill step at most"
    )

    @model_validator(mode="after")
    def _check_budget(self) -> PrefillFirstConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            # As vLLM: a decode step of max_num_seqs requests must fit the budget.
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs")
        return self

    def build(self) -> PrefillFirst:
        return PrefillFirst(self)

    def step_seq_bound(self) -> int:
        return self.max_num_seqs

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        return max(self.max_num_batched_tokens, max_model_len_tokens)


class PrefillFirst(Continuous):
    """Prefill-only steps while admission succeeds, else decode steps of the whole batch."""

    def __init__(self, config: PrefillFirstConfig) -> None:
        super().__init__(
            ContinuousConfig(
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens,
                chunked_prefill=False,
            )
        )

    def _schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        kv = core.kv
        scheduled: Scheduled = []
        self._admit(core, scheduled, self.max_num_batched_tokens, now_s)
        if scheduled:
            return SchedulerOutput(scheduled)  # a prefill step
        running = core.running
        block_size = kv.block_size_tokens
        i = 0
        while i < len(running):
            request = running[i]
            target = request.num_computed_tokens + 1  # every running request decodes
            if target > request.num_blocks * block_size:
                while not kv.can_allocate(request, target):
                    self._preempt(core, running.pop())
                    if i >= len(running):
                        break  # the request itself was preempted (never the only one)
                else:
                    kv.allocate(request, target)
            i += 1
        return SchedulerOutput([(r, 1) for r in running])

    def _admit(self, core: CoreView, scheduled: Scheduled, budget: int, now_s: float) -> None:
        """Admit whole prompts FCFS while they fit."""
        kv, waiting, running = core.kv, core.waiting, core.running
        while waiting:
            if len(running) >= self.max_num_seqs:
                return
            request = waiting[0]
            wanted = request.num_wanted_tokens  # the prompt, or prompt + output to recompute
            if wanted > budget and scheduled:
                return
            target = self._reserve_tokens(request)
            if not kv.can_allocate(request, target):
                return
            waiting.popleft()
            kv.allocate(request, target)
            running.append(request)
            scheduled.append((request, wanted))
            budget -= wanted
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now_s

    def _reserve_tokens(self, request: Request) -> int:
        """The tokens an admitted request's KV blocks hold: those it computes now."""
        return request.num_computed_tokens + request.num_wanted_tokens
