"""The scheduler protocol: engine state in, a step plan out.

Policies see the engine core through ``CoreView``, the few queues and
actions they need, not through ``EngineCore`` itself: the core depends on
this protocol, never the other way round, so a policy can be read (and
tested with a stand-in core) without the bookkeeping around it.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

from sim.engine.plan import StepPlan

if TYPE_CHECKING:
    from sim.engine.cohort import Cohort
    from sim.engine.kv_pool import BlockPool
    from sim.engine.request import Request
    from sim.engine.steplog import StepLog


class CoreView(Protocol):
    """What a policy may read and do on the engine core of one replica."""

    waiting: deque[Request]  # queued, front first
    running: list[Request]  # admitted, in admission order
    num_steps: int  # steps committed so far
    steps: StepLog
    cohort: Cohort | None  # steady decoders advanced in aggregate (sim.engine.cohort)
    last_end_s: float  # end of the last step committed, s

    @property
    def num_held_seqs(self) -> int:
        """Finished requests still holding a slot for this plan (async scheduling)."""
        ...

    @property
    def kv(self) -> BlockPool: ...

    def preempt(self, request: Request) -> None:
        """Recompute preemption: drop ``request``'s KV cache, requeue it at the front."""
        ...

    def swap_out(self, request: Request) -> None:
        """Swap preemption: free its GPU blocks, keep its computed tokens, requeue it."""
        ...

    def break_run(self, request: Request, time_s: float) -> None:
        """Record a token at ``time_s`` that does not follow its predecessor by one step."""
        ...

    def finish(self, request: Request, time_s: float) -> None:
        """``request`` emitted its last token at ``time_s``: free it and record it."""
        ...


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

    def schedule(self, core: CoreView, now_s: float) -> StepPlan:
        """Plan the next step at time ``now_s`` (seconds)."""
        ...
