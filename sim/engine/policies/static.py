"""Static batching: gather a batch, run it to completion, then gather the next.

A batch starts when ``max_batch_size`` requests wait, or when the oldest has
waited ``max_wait_s``, with KV reserved for every member's full length. Its
prompts prefill together in one step, then it decodes until its longest
request is done; finished members keep their slot as padding, computing a
discarded token each step at a growing context (the waste continuous batching
avoids).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.config import Frozen
from sim.engine.request import Request
from sim.engine.scheduler import CoreView, Scheduled, SchedulerOutput


class BatchSettings(Frozen):
    """How a batch forms, shared by static and dynamic batching."""

    max_batch_size: int = Field(default=8, ge=1, description="requests per batch at most")
    # Finite: a batch short of max_batch_size would wait forever, the run never ending.
    max_wait_s: float = Field(
        default=0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="longest the oldest request waits for a full batch",
    )

    def step_seq_bound(self) -> int:
        return self.max_batch_size

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        return min(self.max_batch_size * max_model_len_tokens, 1 << 16)


class StaticConfig(BatchSettings):
    """Settings of static (request-level) batching."""

    kind: Literal["static"] = "static"

    def build(self) -> Static:
        return Static(self)


class Static:
    """The policy; remembers the members of the batch in flight."""

    async_scheduling = False  # a static batch is planned when the last one ends
    # Whether finished members keep their slot as padding (dynamic batching: no).
    pads_finished = True

    def __init__(self, config: BatchSettings) -> None:
        self.max_batch_size = config.max_batch_size
        self.max_wait_s = config.max_wait_s
        self._members: list[Request] = []  # the batch's, when finished ones pad it

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        if not core.running:
            self._members = []
            output = self._form_batch(core, now_s)
            return SchedulerOutput() if output is None else output
        # The batch decodes on: every member still running computes one token.
        return SchedulerOutput([(r, 1) for r in core.running])

    def wake_at_s(self, core: CoreView) -> float | None:
        """No batch running: when the oldest waiting request has waited ``max_wait_s``."""
        if core.running or not core.waiting:
            return None
        oldest = core.waiting[0].ready_s
        assert oldest is not None
        return oldest + self.max_wait_s

    def padding_contexts(self, core: CoreView) -> list[int]:
        """The contexts of the finished members' slots in the next step."""
        return [
            r.max_num_tokens + core.num_steps - (r.last_token_step or 0)
            for r in self._members
            if r.finish_s is not None
        ]

    def _form_batch(self, core: CoreView, now_s: float) -> SchedulerOutput | None:
        waiting, kv = core.waiting, core.kv
        oldest = waiting[0].ready_s if waiting else None
        full = len(waiting) >= self.max_batch_size
        # The wake-up timer lands on oldest + max_wait_s up to float rounding.
        due = oldest is not None and now_s >= oldest + self.max_wait_s - 1e-12
        if oldest is None or not (full or due):
            return None
        scheduled: Scheduled = []
        while waiting and len(scheduled) < self.max_batch_size:
            request = waiting[0]
            if not kv.can_allocate(request, request.max_num_tokens):
                break
            waiting.popleft()
            kv.allocate(request, request.max_num_tokens)
            request.first_scheduled_s = now_s
            core.running.append(request)
            scheduled.append((request, request.num_wanted_tokens))
        if self.pads_finished:
            self._members = [r for r, _ in scheduled]
        return SchedulerOutput(scheduled)
