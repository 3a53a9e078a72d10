"""How requests reach the serving layer: an open loop or a closed loop, and in what order.

An open loop knows every arrival and length up front; a request is submitted at
its arrival plus its way in (``submission_order``), or, beyond a
``max_concurrency`` cap, when an earlier answer is in. A closed loop is users
who think, send a request, and wait for its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

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

    # Optional, None where absent (the fields of ``Request`` of those names, and the
    # cap on requests in flight).
    @property
    def prefix_group(self) -> npt.NDArray[np.int64] | None: ...
    @property
    def num_shared_prefix_tokens(self) -> npt.NDArray[np.int64] | None: ...
    @property
    def block_hash_ids(self) -> tuple[tuple[int, ...], ...] | None: ...
    @property
    def block_hash_tokens(self) -> int | None: ...
    @property
    def priority(self) -> npt.NDArray[np.int64] | None: ...
    @property
    def max_concurrency(self) -> int | None: ...


def concurrency_limit(work: OpenLoop) -> int | None:
    """The open loop's ``max_concurrency`` when it can bind (below its number of
    requests); else None, the plain open loop."""
    limit = work.max_concurrency
    return limit if limit is not None and limit < len(work.arrival_s) else None


@runtime_checkable
class ClosedLoop(Protocol):
    """Users who think, send a request, and wait for its answer."""

    num_users: int
    num_requests: int

    def next_lengths(self) -> tuple[int, int]: ...

    def next_prefix(self) -> tuple[int, int] | None:
        """(prefix_group, num_shared_prefix_tokens) of the request just drawn, or None."""

    def next_think_s(self) -> float: ...


def prefix_describer(work: OpenLoop) -> Callable[[Request], None] | None:
    """A function filling in a request's prefix fields from ``work``; None if it has
    neither prefix groups nor block hash ids."""
    groups, shared = work.prefix_group, work.num_shared_prefix_tokens
    hash_ids, hash_tokens = work.block_hash_ids, work.block_hash_tokens
    if groups is None and hash_ids is None:
        return None
    group_list: list[int] | None = None if groups is None else groups.tolist()
    shared_list: list[int] | None = None if shared is None else shared.tolist()

    def describe(request: Request) -> None:
        i = request.request_id
        if group_list is not None and shared_list is not None:
            request.prefix_group = group_list[i]
            request.num_shared_prefix_tokens = shared_list[i]
        if hash_ids is not None:
            request.block_hash_ids = hash_ids[i]
            request.block_hash_tokens = hash_tokens

    return describe


def submission_order(
    work: OpenLoop, frontend: FrontendConfig
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """When each request is due (arrival plus its way in, s), sorted, and the
    request indices in that order (stable: ties keep arrival order)."""
    ready = work.arrival_s + frontend.way_in_s(work.num_prompt_tokens)
    order = np.argsort(ready, kind="stable")
    return ready[order], order


def requests_in_order(work: OpenLoop, order: npt.NDArray[np.intp]) -> Iterator[Request]:
    """The workload's requests, built one at a time in submission ``order`` (read a
    chunk at a time: lists of a million rows cost ~150 MB)."""
    describe = prefix_describer(work)
    priority = work.priority
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
