"""Open-loop requests handed to a replica when it plans, not one SimPy event each.

In an open loop every submission time is known before the run: arrival plus
tokenization. ``Feed`` holds them in submission order; the replica takes the
requests due by each plan's time (``take``) and, when idle, sleeps until the
next one (``next_clock_s``), so an arrival costs no event of its own (issue 16:
base requests cause 1.86 SimPy events instead of 2.86).

The times are those a SimPy process submitting each request at its own
timeout would see, to the bit: such a process, woken at clock ``c``, submits
every request whose time is ``<= c`` at once and otherwise sleeps
``ready - c``, landing at ``c + (ready - c)``, which need not be ``ready``.
``clock_s`` replays that sum, and ``ready_s`` of a taken request is its clock.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sim.engine.kv_cache import prefix_describer
from sim.engine.request import Request


class OpenLoop(Protocol):
    """Arrival times and lengths known in advance (synthetic or trace)."""

    # Read-only properties: frozen dataclasses (RequestArrays) satisfy them too.
    @property
    def arrival_s(self) -> npt.NDArray[np.float64]: ...
    @property
    def num_prompt_tokens(self) -> npt.NDArray[np.int64]: ...
    @property
    def num_output_tokens(self) -> npt.NDArray[np.int64]: ...


def submission_order(
    work: OpenLoop, tokenize_s_per_token: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """When each request is due (arrival plus tokenization, s), sorted, and the
    request indices in that order (stable: ties keep arrival order)."""
    ready = work.arrival_s + tokenize_s_per_token * work.num_prompt_tokens
    order = np.argsort(ready, kind="stable")
    return ready[order], order


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
    tokenization, s), the clock at its submission (``submission_clock_s``: the
    ready time the replica records), and its index in the workload."""

    ready_s: npt.NDArray[np.float64]
    clock_s: npt.NDArray[np.float64]
    order: npt.NDArray[np.intp]

    @classmethod
    def dealt(
        cls, work: OpenLoop, tokenize_s_per_token: float, num_replicas: int
    ) -> list[Submissions]:
        """``work``'s submissions dealt in turn to ``num_replicas`` replicas (a
        round-robin router's picks: the i-th submission goes to replica ``i % n``)."""
        ready, order = submission_order(work, tokenize_s_per_token)
        clock_s = np.frombuffer(submission_clock_s(ready.tolist()), dtype=np.float64)
        n = num_replicas
        return [cls(ready[k::n], clock_s[k::n], order[k::n]) for k in range(n)]


class Feed:
    """Requests in submission order, taken by time (see the module's docstring)."""

    __slots__ = ("_clock_s", "_index", "_make", "_ready_s", "num_requests")

    def __init__(
        self, ready_s: npt.ArrayLike, clock_s: npt.ArrayLike, requests: Iterator[Request]
    ) -> None:
        """``ready_s``: when each request is due, sorted (s); ``clock_s``: the clock
        at its submission (``submission_clock_s`` of the whole workload's times);
        ``requests``: the requests, built lazily, in that order."""
        # Compact (8 bytes a request), and inf last: "nothing more to come"
        # without a sentinel check per read.
        self._ready_s = _doubles(ready_s)
        self._clock_s = _doubles(clock_s)
        self.num_requests = len(self._ready_s) - 1
        self._index = 0
        self._make = requests

    @classmethod
    def split(cls, work: OpenLoop, tokenize_s_per_token: float, num_feeds: int) -> list[Feed]:
        """``work``'s requests dealt in turn to ``num_feeds`` feeds (``Submissions.dealt``)."""
        return [
            cls(mine.ready_s, mine.clock_s, requests_in_order(work, mine.order))
            for mine in Submissions.dealt(work, tokenize_s_per_token, num_feeds)
        ]

    @property
    def num_taken(self) -> int:
        """Requests handed over so far."""
        return self._index

    @property
    def next_clock_s(self) -> float:
        """The clock at which the next request is submitted (see the module), s."""
        return self._clock_s[self._index]

    def next_due_s(self) -> float:
        """When the next request is due (arrival plus tokenization, s; inf if none):
        a replica's ``horizon``."""
        return self._ready_s[self._index]

    def take(self, now_s: float, submit: Callable[[Request, float], object]) -> None:
        """Hand ``submit(request, clock_s)`` every request submitted by ``now_s``."""
        clock_s = self._clock_s
        i = self._index
        while clock_s[i] <= now_s:
            i += 1
            self._index = i  # before submit: it may read the next time
            submit(next(self._make), clock_s[i - 1])


def _doubles(values: npt.ArrayLike) -> array[float]:
    """``values`` and then inf, as an array of doubles."""
    out = array("d", np.ascontiguousarray(values, dtype=np.float64).tobytes())
    out.append(float("inf"))
    return out


def requests_in_order(work: OpenLoop, order: npt.NDArray[np.intp]) -> Iterator[Request]:
    """The workload's requests, built one at a time in submission ``order``
    (read a chunk at a time: Python lists of a million rows cost ~150 MB)."""
    describe = prefix_describer(work)  # None unless requests share prefixes
    priority = getattr(work, "priority", None)  # optional per-request priorities
    for start in range(0, len(order), _CHUNK):
        chunk = order[start : start + _CHUNK]
        rows = zip(
            chunk.tolist(),
            work.arrival_s[chunk].tolist(),
            work.num_prompt_tokens[chunk].tolist(),
            work.num_output_tokens[chunk].tolist(),
            strict=True,
        )
        priorities = None if priority is None else priority[chunk].tolist()
        for i, (request_id, arrival_s, num_prompt, num_output) in enumerate(rows):
            request = Request(request_id, arrival_s, num_prompt, num_output)
            if describe is not None:
                describe(request)
            if priorities is not None:
                request.priority = priorities[i]
            yield request


_CHUNK = 4096  # requests read from the workload's arrays at a time
