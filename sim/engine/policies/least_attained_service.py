"""Least-attained-service admission on continuous batching.

The waiting queue is served in increasing *attained service*, the output tokens
a request has already streamed (stable): a request preempted by recompute waits
behind fresh arrivals instead of going first as in vLLM.

Why: LAS ("foreground-background") favours short jobs when sizes are unknown;
here it bounds how long one long request, preempted again and again, can hold
the head of the queue under KV pressure, at the price of its own latency.

This module is the worked example of ``docs/dev/adding-a-policy.md``.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Literal

from sim.engine.kv_cache import SwapSpace
from sim.engine.policies.ordered import OrderedContinuous, sort_waiting
from sim.engine.scheduler import ContinuousSettings, CoreView

_ATTAINED = attrgetter("num_generated_tokens")  # output tokens streamed so far


class LeastAttainedServiceConfig(ContinuousSettings):
    """Continuous batching admitting the waiting request served least so far first."""

    kind: Literal["least_attained_service"] = "least_attained_service"

    def build(
        self, swap: SwapSpace | None = None, async_scheduling: bool = False
    ) -> LeastAttainedService:
        return LeastAttainedService(self, swap, async_scheduling)


class LeastAttainedService(OrderedContinuous):
    """The policy; holds no state between steps besides its settings."""

    def reorder(self, core: CoreView) -> None:
        sort_waiting(core, _ATTAINED)
