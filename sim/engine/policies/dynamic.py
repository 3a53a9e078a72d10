"""Dynamic batching: gather a batch, run it to completion; finished requests leave it.

A batch forms and runs as in static batching (:mod:`sim.engine.policies.static`,
the Triton / TF-Serving "dynamic batcher" applied to generation), but a member
that has produced its last token leaves at once instead of padding the batch:
decode steps shrink to the members still generating. Its freed slot and blocks
still stay unused until the whole batch is done (nothing joins a running batch).
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
