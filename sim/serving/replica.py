"""The simulator's executor: a SimPy process that runs an engine core's steps.

Each step is one timeout of the cost model's price, then the core's update at
its end: the reference, one event per step. Requests are handed to it
(``submit``), which wakes it when idle. Async scheduling (vLLM's
``AsyncScheduler``): the replica plans after committing step N, showing the
core only what it could see at step N's start (``EngineCore.schedule``'s
``visible_until_s``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from sim.cost.base import CostModel
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, SchedulerOutput


class Replica:
    """One model server: an engine core driven in simulated time."""

    def __init__(self, env: simpy.Environment, core: EngineCore, cost: CostModel) -> None:
        self.env = env
        self.core = core
        self.cost = cost
        self._idle: simpy.Event | None = None
        self.async_scheduling = core.async_scheduling
        self.process = env.process(self.run())

    @property
    def is_idle(self) -> bool:
        return self._idle is not None

    def submit(self, request: Request) -> None:
        """Hand over a tokenized request; wake the replica if it is idle."""
        if not self.core.add(request, self.env.now):
            return
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def run(self) -> Generator[simpy.Event, Any, None]:
        """The executor's loop (its SimPy process): plan, run the step, commit; when
        there is nothing to run, sleep until a request arrives or the policy's
        wake-up time."""
        env, core = self.env, self.core
        async_scheduling = self.async_scheduling
        # Async scheduling: the start of the step just committed (None: woken).
        visible_until: float | None = None
        # The end of the step just committed, where the next starts (not env.now, a
        # unit in the last place off after SimPy adds delays). None: woken.
        last_end: float | None = None
        while True:
            now = env.now if last_end is None else last_end
            output = core.schedule(now, visible_until)
            visible_until = None
            if output.is_empty:
                if async_scheduling and core.num_deferred_at_plan > 0:
                    continue  # vLLM plans again once step N's output is in
                yield from self._wait(core.wake_at_s())
                last_end = None
                continue
            last_end, visible_until = yield from self.run_step(output, now)

    def run_step(
        self, output: SchedulerOutput, now: float
    ) -> Generator[simpy.Event, Any, tuple[float, float | None]]:
        """Run ``output``'s step from ``now``; its end and, with async scheduling, its
        start (what the next plan may see; else None)."""
        end = now + (self.cost.step_s(self.core.step_shape(output)) + output.extra_s)
        yield self.env.timeout(end - now)
        self.core.update(output, end)
        return end, (now if self.async_scheduling else None)

    def _wait(self, wake_at_s: float | None) -> Generator[simpy.Event, Any, None]:
        """Sleep until a request arrives or the policy's wake-up time."""
        idle = idle_event(self.env, wake_at_s)
        self._idle = idle
        yield idle
        self._idle = None


def idle_event(env: simpy.Environment, wake_at_s: float | None) -> simpy.Event:
    """The event an idle executor sleeps on, succeeded when work arrives or at
    ``wake_at_s`` (s)."""
    idle = env.event()
    if wake_at_s is not None:
        timer = env.timeout(max(0.0, wake_at_s - env.now))

        def wake(_: simpy.Event) -> None:
            if not idle.triggered:
                idle.succeed()

        timer.callbacks.append(wake)
    return idle
