"""The simulator's executor: a SimPy process that runs an engine core's plans.

Each scheduled step becomes one timeout of the cost model's predicted duration.
When plain decode steps of the same batch follow it (``sim.fast.decode_runs``),
they become one timeout for all of them (skip-ahead); if a request arrives
meanwhile and it could change the batch, the process is interrupted, finishes the step in
progress, commits the steps done and plans again. So events grow with
requests, not tokens. ``skip_ahead=False`` runs every step as its own event
(the reference the skip-ahead mode is tested against). When the next arrival
is known in advance (``horizon``: an open loop), a run ends at the step it
arrives in instead of being interrupted. When every request is known in
advance, the replica may also pull its requests itself when it plans (``pull``),
so an arrival costs no event at all.

Async scheduling (vLLM's ``AsyncScheduler``, ``step_with_batch_queue``): step
N+1 is planned while step N runs. The replica still plans after committing
step N, but shows the core only what the scheduler could see at step N's start:
requests ready later wait one more step, and those finishing in step N keep
their slot and blocks for that plan (``EngineCore.schedule``'s
``visible_until_s``, ``EngineCore.held``). So a run of decode steps stops one
step after the step during which a request arrives.
The scheduler's CPU time then overlaps the GPU step: the cost model prices that
(``sim.cost.engine_cpu``, docs/vllm-fidelity.md).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Generator
from typing import Any

import simpy

from sim.cost.base import CostModel, run_ends_for
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore
from sim.fast.decode_runs import commit_run, plan_run


class Replica:
    """One model server: an engine core driven in simulated time."""

    def __init__(
        self, env: simpy.Environment, core: EngineCore, cost: CostModel, skip_ahead: bool = True
    ) -> None:
        self.env = env
        self.core = core
        self.cost = cost
        self.skip_ahead = skip_ahead
        self._run_ends = run_ends_for(cost)  # a run's step end times (sim.cost.base)
        self._idle: simpy.Event | None = None
        self._interruptible = False
        # When set, returns the earliest time a new request can be submitted
        # (open loop: known in advance); runs then end at that step instead of
        # being interrupted, which saves two events per arrival.
        self.horizon: Callable[[], float] | None = None
        # When set, the replica takes its requests itself instead of being handed
        # each at an event of its own: ``pull(now_s)`` submits every request due by
        # ``now_s`` and returns when the next one is (inf: none left), s. Idle, the
        # replica then sleeps until that time.
        self.pull: Callable[[float], float] | None = None
        # Async scheduling: asked for by the policy (vLLM's --async-scheduling).
        self.async_scheduling = core.async_scheduling
        # Steps a run goes on past the step during which a request arrives.
        self._lag = 2 if self.async_scheduling else 1
        self.process = env.process(self._run())

    def submit(self, request: Request) -> None:
        """Hand over a tokenized request; wake the replica if it could use it."""
        if not self.core.add(request, self.env.now):
            return
        if self._idle is not None:
            if not self._idle.triggered:
                self._idle.succeed()
        elif self._interruptible:
            self._interruptible = False
            self.process.interrupt()

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env, core, cost = self.env, self.core, self.cost
        async_scheduling, lag = self.async_scheduling, self._lag
        run_ends = self._run_ends
        # Async scheduling: the start of the step just committed; the next plan
        # was (in vLLM) made then. None: nothing ran since the replica woke.
        visible_until: float | None = None
        # The end of the step just committed: the next one starts then. The
        # clock may be a unit in the last place off it, as SimPy adds delays
        # (``now + (end - now)`` need not be ``end``), and that would make the
        # times depend on how steps were grouped into timeouts. None: woken.
        last_end: float | None = None
        pull = self.pull
        # The first plan (at time 0) comes before the open loop's first submission,
        # as when a SimPy process submits (it starts after this one).
        next_pull_s = math.inf if pull is None else pull(-math.inf)
        started = False
        while True:
            now = env.now if last_end is None else last_end
            if pull is not None and started and next_pull_s <= now:
                next_pull_s = pull(now)
            started = True
            output = core.schedule(now, visible_until)
            deferred = async_scheduling and core.num_deferred_at_plan > 0
            visible_until = None
            if output.is_empty:
                if deferred:  # vLLM plans again once step N's output is in
                    continue
                if pull is None:
                    yield from self._wait(core.wake_at_s())
                    last_end = None
                    continue
                woke_s = yield from self._sleep(next_pull_s, core.wake_at_s())
                if woke_s is None:
                    return  # nothing more can come
                last_end = woke_s
                continue
            # Deferred work (a hidden arrival, a held slot) may change the next
            # plan, so a run would promise too much: one step.
            run = plan_run(core, output) if self.skip_ahead and not deferred else None
            if run is None:
                end = now + (cost.step_s(core.step_shape(output)) + output.extra_s)  # as below
                yield env.timeout(end - now)
                core.update(output, end)
                last_end = end
                visible_until = now if async_scheduling else None
                continue
            # ends[j] = ((now + d0) + d1) + ... + dj, summed in the same order
            # as step-by-step execution, so both modes agree exactly.
            first_s = cost.step_s(core.step_shape(output)) + output.extra_s  # e.g. a swap copy
            next_s = float("inf")
            if run.interruptible and self.horizon is not None:
                # Stop at the end of the step running when the next request
                # arrives (the step after it with async scheduling: that one
                # was planned), instead of being interrupted.
                next_s = self.horizon()
            else:
                self._interruptible = run.interruptible
            shape = run.shape  # of the decode steps after the first
            ends = run_ends(
                now + first_s,
                shape.num_decode_seqs,
                shape.num_decode_context_tokens,
                shape.max_decode_context_tokens,
                shape.min_decode_context_tokens,
                run.num_steps - 1,
                next_s,
                lag,
            )
            try:
                yield env.timeout(ends[-1] - now)
            except simpy.Interrupt:
                # Steps whose end has passed are done; the one running finishes
                # (and, with async scheduling, the one already planned after it).
                # A step ending exactly now counts as running, as in step-by-step
                # mode, where the newcomer would join the step starting now.
                num_done = bisect_left(ends, env.now)
                ends = ends[: min(num_done + lag, len(ends))]
                if ends[-1] > env.now:
                    yield env.timeout(ends[-1] - env.now)
            self._interruptible = False
            if len(ends) == 1:
                core.update(output, ends[0])
            else:
                commit_run(core, output, now, ends)
            last_end = ends[-1]
            if async_scheduling:
                visible_until = ends[-2] if len(ends) > 1 else now

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
        # The submission (on a tie too: its timeout would be the older event). The
        # clock may land a unit in the last place off it (either side: the plans
        # are made at exact times, SimPy's clock only orders events); the plan is
        # made at the submission's time.
        yield env.timeout(max(0.0, next_clock_s - env.now))
        return next_clock_s

    def _wait(self, wake_at_s: float | None) -> Generator[simpy.Event, Any, None]:
        """Sleep until a request arrives or the policy's wake-up time."""
        idle = idle_event(self.env, wake_at_s)
        self._idle = idle
        yield idle
        self._idle = None


def idle_event(env: simpy.Environment, wake_at_s: float | None) -> simpy.Event:
    """The event an idle executor sleeps on: the caller succeeds it when work
    arrives; it also fires at ``wake_at_s`` (the policy's wake-up time, s)."""
    idle = env.event()
    if wake_at_s is not None:
        timer = env.timeout(max(0.0, wake_at_s - env.now))

        def wake(_: simpy.Event) -> None:
            if not idle.triggered:
                idle.succeed()

        timer.callbacks.append(wake)
    return idle
