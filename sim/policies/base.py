"""The scheduler protocol: engine state in, a step plan out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from sim.plan import StepPlan

if TYPE_CHECKING:
    from sim.core import EngineCore


class Scheduler(Protocol):
    """A scheduling policy.

    ``schedule`` reads the core's ``waiting`` and ``running`` queues and KV
    pool, moves requests between them (admission, preemption via
    ``core.preempt``), reserves the KV blocks of the next step, and returns
    the plan. It must not advance token counters: ``EngineCore.commit`` does
    that after the executor has run the step. The same object serves the
    simulator and the real engine, so it may not look at any clock but
    ``now_s``.
    """

    def schedule(self, core: EngineCore, now_s: float) -> StepPlan:
        """Plan the next step at time ``now_s`` (seconds)."""
        ...
