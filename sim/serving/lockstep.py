"""Data-parallel ranks that step together (``cluster.lockstep``): vLLM's DP ranks of an MoE model.

With expert parallelism every MoE layer runs a collective across the DP
ranks, so no rank can start step ``n + 1`` before all have finished step
``n``: vLLM pads every rank's batch to the largest and an idle rank runs a
dummy batch. Here one SimPy process drives all the group's engine cores:
each step it asks every core for its plan, runs the non-empty ones for
``max`` of their prices (an idle rank's dummy batch is not priced: the busy
ranks' MoE term already counts the padded group tokens) and commits one
step of each. No skip-ahead: one event per joint step. Under async scheduling
(vLLM 0.19 keeps it with data parallelism, agreeing each step's padding over
Gloo on the CPU) a rank busy in step N plans step N+1 while step N runs, so
that plan sees only the requests that arrived before step N started, as a
replica's does; a rank idle in step N (its dummy batch runs synchronously)
plans step N+1 after it, seeing every request.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from sim.cost.base import CostModel
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore
from sim.serving.replica import idle_event


class LockstepMember:
    """One rank of a lockstep group, as the pool sees a replica: it takes requests."""

    def __init__(self, group: LockstepGroup, index: int) -> None:
        self.group, self.index = group, index
        self.core = group.cores[index]
        # Unused (runs are one step each); kept so pools treat all replicas alike.
        self.horizon: Callable[[], float] | None = None

    def submit(self, request: Request) -> None:
        """Hand over a tokenized request; wake the group if it sleeps."""
        self.group.submit(self.index, request)


class LockstepGroup:
    """Engine cores stepping together; a step lasts as long as the slowest rank's."""

    def __init__(
        self, env: simpy.Environment, cores: Sequence[EngineCore], cost: CostModel
    ) -> None:
        self.env, self.cores, self.cost = env, list(cores), cost
        self.members = [LockstepMember(self, i) for i in range(len(self.cores))]
        self._idle: simpy.Event | None = None
        self.process = env.process(self._run())

    def submit(self, index: int, request: Request) -> None:
        idle = self._idle
        if self.cores[index].add(request, self.env.now) and idle is not None and not idle.triggered:
            idle.succeed()

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        # Async scheduling: the start of the joint step just committed, when vLLM
        # made the next plans of the ranks busy in it. None: nothing ran since the
        # group woke. An idle rank runs its dummy batch synchronously
        # (DPEngineCoreProc.run_busy_loop), so it plans a newcomer for the next step.
        visible_until: float | None = None
        planned_ahead: list[EngineCore] = []
        while True:
            now = env.now
            plans = [
                core.schedule(now, visible_until if core in planned_ahead else None)
                for core in self.cores
            ]
            busy = [(core, plan) for core, plan in zip(self.cores, plans, strict=True)
                    if not plan.is_empty]  # fmt: skip
            deferred = any(core.num_deferred_at_plan > 0 for core in planned_ahead)
            visible_until, planned_ahead = None, []
            if not busy:
                if deferred:  # vLLM plans again once step N's output is in (as a replica)
                    continue
                wakes = [w for w in (core.wake_at_s() for core in self.cores) if w is not None]
                yield from self._wait(min(wakes) if wakes else None)
                continue
            planned_ahead = [core for core, _ in busy if core.async_scheduling]
            visible_until = now
            # The joint step: the longest of the ranks' own steps.
            end = now + max(
                self.cost.step_s(core.step_shape(plan)) + plan.extra_s for core, plan in busy
            )
            yield env.timeout(end - now)
            for core, plan in busy:
                core.update(plan, end)

    def _wait(self, wake_at_s: float | None) -> Generator[simpy.Event, Any, None]:
        """Sleep until a request arrives at any rank or the earliest policy wake-up."""
        idle = idle_event(self.env, wake_at_s)
        self._idle = idle
        yield idle
        self._idle = None
