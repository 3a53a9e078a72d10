"""Continuous batching with a waiting queue in an order of the policy's choosing.

The base of the ordered policies: before each step ``reorder`` sorts the waiting
queue (stably: ties stay first-come first-served, earlier preemptions ahead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.engine.request import Request
from sim.engine.scheduler import Continuous, CoreView, SchedulerOutput


class OrderedContinuous(Continuous):
    """Continuous batching that calls ``reorder`` before planning each step."""

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        self.reorder(core)
        return super().schedule(core, now_s)

    def reorder(self, core: CoreView) -> None:
        """Sort ``core.waiting`` (and ``core.running`` if the policy wants) in place."""
        raise NotImplementedError


def sort_waiting(core: CoreView, key: Callable[[Request], Any], reverse: bool = False) -> None:
    """Stable in-place sort of the waiting deque by ``key`` (``reverse`` keeps ties in order)."""
    waiting = core.waiting
    if len(waiting) > 1:
        items = sorted(waiting, key=key, reverse=reverse)
        waiting.clear()
        waiting.extend(items)
