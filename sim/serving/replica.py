"""The simulator's executor: a SimPy process that runs an engine core's plans.

Each plan becomes one timeout of the cost model's predicted duration. A plan
that promises ``num_steps`` identical decode steps becomes one timeout for all
of them (skip-ahead); if a request arrives meanwhile and the plan says it
could change the batch, the process is interrupted, finishes the step in
progress, commits the steps done and plans again. So events grow with
requests, not tokens. ``skip_ahead=False`` runs every step as its own event
(the reference the skip-ahead mode is tested against).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Generator
from itertools import accumulate
from typing import Any

import simpy

from sim.cost.base import CostModel
from sim.engine.core import EngineCore
from sim.engine.request import Request


class Replica:
    """One model server: an engine core driven in simulated time."""

    def __init__(
        self, env: simpy.Environment, core: EngineCore, cost: CostModel, skip_ahead: bool = True
    ) -> None:
        self.env = env
        self.core = core
        self.cost = cost
        self.skip_ahead = skip_ahead
        self._idle: simpy.Event | None = None
        self._interruptible = False
        # When set, returns the earliest time a new request can be submitted
        # (open loop: known in advance); runs then end at that step instead of
        # being interrupted, which saves two events per arrival.
        self.horizon: Callable[[], float] | None = None
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
        while True:
            now = env.now
            plan = core.schedule(now)
            if plan.is_empty:
                yield from self._wait(plan.wake_at_s)
                continue
            if plan.num_steps == 1 or not self.skip_ahead:
                end = now + (cost.step_s(plan.shape()) + plan.extra_s)  # as in a run below
                yield env.timeout(end - now)
                core.commit(plan, now, [end])
                continue
            rest = cost.decode_steps_s(
                plan.run_num_seqs, plan.run_context_tokens, plan.num_steps - 1
            ).tolist()
            # ends[j] = ((now + d0) + d1) + ... + dj, summed in the same order
            # as step-by-step execution, so both modes agree exactly. (Python
            # lists: runs are mostly short, where numpy's call overhead dominates.)
            first_s = cost.step_s(plan.shape()) + plan.extra_s  # extra: e.g. a swap copy
            ends = list(accumulate(rest, initial=now + first_s))
            if plan.interruptible and self.horizon is not None:
                next_s = self.horizon()
                if next_s <= ends[-1]:
                    # Stop at the end of the step running when it arrives.
                    ends = ends[: bisect_left(ends, next_s) + 1]
            else:
                self._interruptible = plan.interruptible
            try:
                yield env.timeout(ends[-1] - now)
            except simpy.Interrupt:
                # Steps whose end has passed are done; the one running finishes.
                # A step ending exactly now counts as running, as in step-by-step
                # mode, where the newcomer would join the step starting now.
                num_done = bisect_left(ends, env.now)
                ends = ends[: min(num_done + 1, len(ends))]
                if ends[-1] > env.now:
                    yield env.timeout(ends[-1] - env.now)
            self._interruptible = False
            core.commit(plan, now, ends)

    def _wait(self, wake_at_s: float | None) -> Generator[simpy.Event, Any, None]:
        """Sleep until a request arrives or the policy's wake-up time."""
        idle = self.env.event()
        self._idle = idle
        if wake_at_s is not None:
            timer = self.env.timeout(max(0.0, wake_at_s - self.env.now))

            def wake(_: simpy.Event) -> None:
                if not idle.triggered:
                    idle.succeed()

            timer.callbacks.append(wake)
        yield idle
        self._idle = None
