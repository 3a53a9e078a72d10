"""Dynamic batching: gather a batch, run it to completion; finished requests leave it.

A batch forms exactly as in static batching (:mod:`sim.engine.policies.static`):
when ``max_batch_size`` requests wait, or when the oldest has waited
``max_wait_s``; the members' KV blocks for their full length are reserved at
formation, their prompts are prefilled together in one step, and no request
joins until every member has finished (request-level batching, the Triton /
TF-Serving "dynamic batcher" applied to generation).

The one difference from ``static``: a member that has produced its last token
leaves the batch at once. Static batching keeps its slot as padding until the
longest member is done, computing a discarded token at a growing context every
step (``StepPlan.padding_seqs``); here the decode steps shrink to the members
still generating, so each step is cheaper and the longest member finishes
sooner. Its KV blocks are freed when it finishes under both policies, but the
freed blocks (and slot) stay unused until the whole batch is done, because
nothing joins a running batch. Continuous batching (``continuous``) would
admit a waiting request into the freed slot at the next step.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.engine.policies.static import MAX_RUN_STEPS, Static, StaticConfig
from sim.engine.scheduler import CoreView, StepPlan


class DynamicConfig(BaseModel):
    """Settings of dynamic batching (batches run to completion, no padding)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["dynamic"] = "dynamic"
    max_batch_size: int = Field(default=8, ge=1, description="requests per batch at most")
    max_wait_s: float = Field(
        default=0.0, ge=0.0, description="longest the oldest request waits for a full batch"
    )

    def build(self) -> Dynamic:
        return Dynamic(self)

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        """Most tokens one step can compute (sizes the activation reserve)."""
        return min(self.max_batch_size * max_model_len_tokens, 1 << 16)


class Dynamic(Static):
    """Static batching's batch formation; decode steps of the unfinished members only."""

    def __init__(self, config: DynamicConfig) -> None:
        super().__init__(
            StaticConfig(max_batch_size=config.max_batch_size, max_wait_s=config.max_wait_s)
        )

    def _continue_batch(self, core: CoreView) -> StepPlan:
        running = core.running  # the members still generating, after their prefill
        scheduled = [(r, 1) for r in running]
        # This step emits one token each; the first member finishes after this many steps.
        num_steps = min(r.num_output_tokens - r.num_generated_tokens for r in running)
        return StepPlan(
            scheduled,
            num_steps=min(num_steps, MAX_RUN_STEPS),
            interruptible=False,  # nothing joins a running batch
            run_num_seqs=len(running),
            # Step 2's context: each member's computed tokens plus this step's and the next's.
            run_context_tokens=sum(r.num_computed_tokens + 1 for r in running) + len(running),
        )
