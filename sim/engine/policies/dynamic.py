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
step (``Static.padding_contexts``); here the decode steps shrink to the members
still generating, so each step is cheaper and the longest member finishes
sooner. Its KV blocks are freed when it finishes under both policies, but the
freed blocks (and slot) stay unused until the whole batch is done, because
nothing joins a running batch. Continuous batching (``continuous``) would
admit a waiting request into the freed slot at the next step.
"""

from __future__ import annotations

from typing import Literal

from sim.engine.policies.static import BatchSettings, Static


class DynamicConfig(BatchSettings):
    """Settings of dynamic batching (batches run to completion, no padding)."""

    kind: Literal["dynamic"] = "dynamic"

    def build(self) -> Dynamic:
        return Dynamic(self)


class Dynamic(Static):
    """Static batching's batch formation; decode steps of the unfinished members only."""

    pads_finished = False
