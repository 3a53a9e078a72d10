"""Shortest-prompt-first admission on continuous batching.

The waiting queue is served in increasing prompt length (stable), lowering mean
TTFT under load at the price of long prompts' waits (they can starve): the
implementable cousin of shortest-job-first, as a prompt's length is known at
arrival. Everything else is the continuous policy's.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Literal

from sim.engine.kv_cache import SwapSpace
from sim.engine.policies.ordered import OrderedContinuous, sort_waiting
from sim.engine.scheduler import ContinuousSettings, CoreView

_PROMPT = attrgetter("num_prompt_tokens")


class ShortestPromptFirstConfig(ContinuousSettings):
    """Continuous batching admitting the shortest waiting prompt first."""

    kind: Literal["shortest_prompt_first"] = "shortest_prompt_first"

    def build(
        self, swap: SwapSpace | None = None, async_scheduling: bool = False
    ) -> ShortestPromptFirst:
        return ShortestPromptFirst(self, swap, async_scheduling)


class ShortestPromptFirst(OrderedContinuous):
    """The policy; holds no state between steps besides its settings."""

    def reorder(self, core: CoreView) -> None:
        sort_waiting(core, _PROMPT)
