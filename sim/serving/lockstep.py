"""Data-parallel ranks that step together (``cluster.lockstep``): vLLM's DP ranks of an MoE model.

With expert parallelism every MoE layer runs a collective across the DP ranks,
so no rank starts step ``n + 1`` before all finish step ``n`` (an idle rank runs
a dummy batch). One SimPy process asks every core for its plan, runs the
non-empty ones for the ``max`` of their prices (a dummy batch is not priced: the
busy ranks' MoE term counts the padded tokens) and commits each. Under async
scheduling a rank busy in step N plans step N+1 during it, as a replica does;
an idle rank plans after it, seeing every request.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
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

    def submit(self, request: Request) -> None:
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
        # Async scheduling: the start of the joint step just committed, for the
        # ranks busy in it (an idle rank's dummy batch runs synchronously,
        # DPEngineCoreProc.run_busy_loop). None: woken.
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
