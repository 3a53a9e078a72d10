"""Open-loop requests pulled by a replica when it plans, not one SimPy event each.

In an open loop every submission time (arrival plus way in) is known before the
run. ``Feed`` holds them in submission order; a ``FedReplica`` takes the requests
due by each plan's time (``Feed.take``) and, when idle, sleeps until the next
one, so an arrival costs no SimPy event of its own. The reference,
``Simulation._open_loop``, submits each at a timeout of its own: woken at clock
``c``, it sleeps ``ready - c``, landing at ``c + (ready - c)``, which need not be
``ready``; ``submission_clock_s`` replays that sum, to the bit.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from sim.cost.base import CostModel
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore
from sim.fast.decode_runs import RunningReplica
from sim.serving.pool import Pool
from sim.serving.replica_config import FrontendConfig
from sim.serving.router import RoundRobin
from sim.serving.submission import OpenLoop, requests_in_order, submission_order

Intake = Callable[[Request, float], object]  # what a taken request goes through, at its clock


def submission_clock_s(ready_s: Sequence[float]) -> array[float]:
    """The SimPy clock at each submission of a process that sleeps until each
    time in ``ready_s`` (sorted, s) from the previous wake, starting at 0."""
    clock = 0.0
    out = array("d")
    append = out.append
    for ready in ready_s:
        if ready > clock:
            clock = clock + (ready - clock)  # SimPy: now + delay
        append(clock)
    return out


@dataclass(frozen=True)
class Submissions:
    """One replica's requests in submission order: when each is due (arrival plus
    way in, s), the clock at its submission (``submission_clock_s``: the
    ready time the replica records), and its index in the workload."""

    ready_s: npt.NDArray[np.float64]
    clock_s: npt.NDArray[np.float64]
    order: npt.NDArray[np.intp]

    @classmethod
    def dealt(
        cls, work: OpenLoop, frontend: FrontendConfig, num_replicas: int
    ) -> list[Submissions]:
        """``work``'s submissions dealt in turn to ``num_replicas`` replicas (a
        round-robin router's picks: the i-th submission goes to replica ``i % n``)."""
        ready, order = submission_order(work, frontend)
        clock_s = np.frombuffer(submission_clock_s(ready.tolist()), dtype=np.float64)
        n = num_replicas
        return [cls(ready[k::n], clock_s[k::n], order[k::n]) for k in range(n)]


class Feed:
    """Requests in submission order, taken by time (see the module's docstring)."""

    __slots__ = ("_clock_s", "_index", "_make", "_ready_s", "_submit", "num_requests")

    def __init__(
        self,
        ready_s: npt.ArrayLike,
        clock_s: npt.ArrayLike,
        requests: Iterator[Request],
        submit: Intake,
    ) -> None:
        """``ready_s``: when each request is due, sorted (s); ``clock_s``: the clock at
        its submission; ``requests``: built lazily, in that order; ``submit``: what
        each goes through when taken."""
        # Compact (8 bytes a request), and inf last: "nothing more to come"
        # without a sentinel check per read.
        self._ready_s = _doubles(ready_s)
        self._clock_s = _doubles(clock_s)
        self.num_requests = len(self._ready_s) - 1
        self._index = 0  # requests handed over so far
        self._make = requests
        self._submit = submit

    @classmethod
    def split(
        cls, work: OpenLoop, frontend: FrontendConfig, intakes: Sequence[Intake]
    ) -> list[Feed]:
        """``work``'s requests dealt in turn to one feed per intake (``Submissions.dealt``)."""
        return [
            cls(mine.ready_s, mine.clock_s, requests_in_order(work, mine.order), submit)
            for mine, submit in zip(
                Submissions.dealt(work, frontend, len(intakes)), intakes, strict=True
            )
        ]

    def next_due_s(self) -> float:
        """When the next request is due (arrival plus its way in, s; inf if none):
        a fed replica's ``horizon``."""
        return self._ready_s[self._index]

    def take(self, now_s: float) -> float:
        """Hand ``submit(request, clock_s)`` every request submitted by ``now_s``;
        return the clock at which the next one is submitted (inf: none left), s."""
        clock_s = self._clock_s
        i = self._index
        while clock_s[i] <= now_s:
            i += 1
            self._index = i  # before submit: it may read the next time
            self._submit(next(self._make), clock_s[i - 1])
        return clock_s[i]


def _doubles(values: npt.ArrayLike) -> array[float]:
    """``values`` and then inf, as an array of doubles."""
    out = array("d", np.ascontiguousarray(values, dtype=np.float64).tobytes())
    out.append(float("inf"))
    return out


class FedReplica(RunningReplica):
    """A ``RunningReplica`` that, once given a ``feed``, takes its requests from it
    when it plans, sleeps until the next one when idle, and ends its runs at the
    next one (``horizon``); until then, the reference's loop, handed requests."""

    def __init__(self, env: simpy.Environment, core: EngineCore, cost: CostModel) -> None:
        # Set before the run starts (``take_from``); None: handed requests.
        self.feed: Feed | None = None
        super().__init__(env, core, cost)

    def take_from(self, feed: Feed) -> None:
        """Take requests from ``feed`` from the start of the run."""
        self.feed = feed
        self.horizon = feed.next_due_s

    def run(self) -> Generator[simpy.Event, Any, None]:
        """The reference's loop (``Replica.run``), with the feed's requests taken
        before each plan but the first, and an idle wait that ends at the next."""
        feed = self.feed
        if feed is None:
            yield from super().run()
            return
        env, core, take = self.env, self.core, feed.take
        async_scheduling = self.async_scheduling
        visible_until: float | None = None  # async scheduling: the last step's start
        now = env.now
        # The first plan (at time 0) comes before the first submission, as the
        # reference's replica process starts before its open loop's: nothing taken.
        next_s = take(-math.inf)
        while True:
            output = core.schedule(now, visible_until)
            visible_until = None
            if not output.is_empty:
                now, visible_until = yield from self.run_step(output, now)
            elif not (async_scheduling and core.num_deferred_at_plan > 0):
                woke_s = yield from self._sleep(next_s, core.wake_at_s())
                if woke_s is None:
                    return  # nothing more can come
                now = woke_s
            # (else vLLM plans again once step N's output is in, as the reference)
            if next_s <= now:
                next_s = take(now)

    def _sleep(
        self, next_clock_s: float, wake_at_s: float | None
    ) -> Generator[simpy.Event, Any, float | None]:
        """Sleep until the next submission (``next_clock_s``) or the policy's wake-up
        time; return the time to plan at, or None if neither will ever come."""
        env = self.env
        if wake_at_s is None:
            if next_clock_s == math.inf:
                return None
        else:
            # As the reference's idle_event timer: the time it would fire at.
            delay_s = max(0.0, wake_at_s - env.now)
            if env.now + delay_s < next_clock_s:
                yield env.timeout(delay_s)
                return env.now
        # The submission (on a tie too), planned at its exact time.
        yield env.timeout(max(0.0, next_clock_s - env.now))
        return next_clock_s


def feedable(pool: Pool) -> bool:
    """Whether each of ``pool``'s replicas can take its requests from a feed of its
    own: a fresh round-robin router (its picks ignore load: the i-th request goes
    to replica ``i % n``), no central queue, and fed replicas (no lockstep ranks)."""
    router = pool.router
    return (
        isinstance(router, RoundRobin)
        and router.num_turns_before(0, len(pool.replicas)) == 0
        and pool.queue is None
        and all(isinstance(replica, FedReplica) for replica in pool.replicas)
    )


def pool_feeds(pool: Pool, work: OpenLoop, frontend: FrontendConfig) -> list[Feed]:
    """One feed per replica of ``pool``, dealt as its round-robin router would;
    a request taken counts in its replica's load."""
    intakes = [partial(_take, pool, index) for index in range(len(pool.replicas))]
    return Feed.split(work, frontend, intakes)


def take_feeds(pool: Pool, feeds: Sequence[Feed]) -> None:
    """Replica i of ``pool`` pulls its requests from ``feeds[i]`` (``pool_feeds``)."""
    if not feedable(pool) or len(feeds) != len(pool.replicas):
        raise ValueError("feeds need a fresh round-robin pool, one feed per replica")
    for replica, feed in zip(pool.replicas, feeds, strict=True):
        assert isinstance(replica, FedReplica)
        replica.take_from(feed)


def _take(pool: Pool, index: int, request: Request, now_s: float) -> None:
    """Replica ``index`` takes ``request`` from its feed: count it in its load."""
    pool.count_sent(index, request)
    pool.cores[index].add(request, now_s)
