"""The simulator's executor: a SimPy process that runs an engine core's steps.

Each step is one timeout of the cost model's price, then the core's update at
its end: the reference, one event per step (a fast executor overrides
``run_step`` and ``submit``, docs/architecture.md). With an open loop the
replica may pull its requests itself when it plans (``pull``, ``horizon``), so
an arrival costs no event. Async scheduling (vLLM's ``AsyncScheduler``): the
replica plans after committing step N, showing the core only what it could see
at step N's start (``EngineCore.schedule``'s ``visible_until_s``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
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
        # When set, the earliest time a new request can be submitted (s).
        self.horizon: Callable[[], float] | None = None
        # When set, ``pull(now_s)`` submits every request due by ``now_s`` and returns
        # when the next one is (s; inf: none left).
        self.pull: Callable[[float], float] | None = None
        self.async_scheduling = core.async_scheduling
        self.process = env.process(self._run())

    @property
    def is_idle(self) -> bool:
        return self._idle is not None

    def submit(self, request: Request) -> None:
        """Hand over a tokenized request; wake the replica if it is idle."""
        if not self.core.add(request, self.env.now):
            return
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env, core = self.env, self.core
        async_scheduling = self.async_scheduling
        # Async scheduling: the start of the step just committed (None: woken).
        visible_until: float | None = None
        # The end of the step just committed, where the next starts (not env.now, a
        # unit in the last place off after SimPy adds delays). None: woken.
        last_end: float | None = None
        pull = self.pull
        # The first plan (at time 0) comes before the first submission.
        next_pull_s = math.inf if pull is None else pull(-math.inf)
        started = False
        while True:
            now = env.now if last_end is None else last_end
            if pull is not None and started and next_pull_s <= now:
                next_pull_s = pull(now)
            started = True
            output = core.schedule(now, visible_until)
            visible_until = None
            if output.is_empty:
                if async_scheduling and core.num_deferred_at_plan > 0:
                    continue  # vLLM plans again once step N's output is in
                if pull is None:
                    yield from self._wait(core.wake_at_s())
                    last_end = None
                    continue
                woke_s = yield from self._sleep(next_pull_s, core.wake_at_s())
                if woke_s is None:
                    return  # nothing more can come
                last_end = woke_s
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

    def _sleep(
        self, next_clock_s: float, wake_at_s: float | None
    ) -> Generator[simpy.Event, Any, float | None]:
        """Sleep until the next pull (``next_clock_s``) or the policy's wake-up time;
        return the time to plan at, or None if neither will ever come."""
        env = self.env
        if wake_at_s is None:
            if next_clock_s == float("inf"):
                return None
        else:
            # As idle_event's timer: the time it would fire at.
            delay_s = max(0.0, wake_at_s - env.now)
            if env.now + delay_s < next_clock_s:
                yield env.timeout(delay_s)
                return env.now
        # The submission (on a tie too), planned at its exact time.
        yield env.timeout(max(0.0, next_clock_s - env.now))
        return next_clock_s

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
