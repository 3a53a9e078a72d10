"""How requests reach the serving layer: an open loop or a closed loop, and in what order.

An open loop knows every arrival time and length before the run (synthetic or
trace); a request is submitted to the replicas once through the server's way
in (``FrontendConfig.way_in_s``: the API server's per-request work and IPC,
and tokenization), so its submission time is its arrival plus its way in
(``submission_order``). An open loop may cap the requests in flight
(``max_concurrency``, ``vllm bench serve --max-concurrency``): an arrival
beyond the cap waits client-side, in arrival order, until an earlier request's
answer is in, and is sent then (``concurrency_limit``). A
closed loop is users who think, send a request, and wait for its answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from sim.engine.kv_cache import prefix_describer
from sim.engine.request import Request
from sim.serving.replica_config import FrontendConfig


class OpenLoop(Protocol):
    """Arrival times and lengths known in advance (synthetic or trace)."""

    # Read-only properties: frozen dataclasses (RequestArrays) satisfy them too.
    @property
    def arrival_s(self) -> npt.NDArray[np.float64]: ...
    @property
    def num_prompt_tokens(self) -> npt.NDArray[np.int64]: ...
    @property
    def num_output_tokens(self) -> npt.NDArray[np.int64]: ...


def concurrency_limit(work: OpenLoop) -> int | None:
    """The open loop's cap on requests in flight (its optional ``max_concurrency``)
    when it can bind, i.e. is below the number of requests; else None: a cap that
    never binds is the plain open loop, to the bit."""
    limit: int | None = getattr(work, "max_concurrency", None)
    return limit if limit is not None and limit < len(work.arrival_s) else None


@runtime_checkable
class ClosedLoop(Protocol):
    """Users who think, send a request, and wait for its answer. A closed loop
    may also have ``next_prefix() -> (prefix_group, num_shared_prefix_tokens) |
    None``, called once per request after ``next_lengths``."""

    num_users: int
    num_requests: int

    def next_lengths(self) -> tuple[int, int]: ...

    def next_think_s(self) -> float: ...


def submission_order(
    work: OpenLoop, frontend: FrontendConfig
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """When each request is due (arrival plus its way in, s), sorted, and the
    request indices in that order (stable: ties keep arrival order)."""
    ready = work.arrival_s + frontend.way_in_s(work.num_prompt_tokens)
    order = np.argsort(ready, kind="stable")
    return ready[order], order


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
