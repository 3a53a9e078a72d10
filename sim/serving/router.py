"""Routers: which replica of a pool takes the next request.

A router reads only each replica's load (kept by ``sim.serving.pool.Pool``),
never an engine's internals, so skip-ahead and step-by-step runs route
identically. ``central_queue`` is a pool mode; it picks among the replicas
with room by ``least_outstanding_requests``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from sim.engine.request import Request

RouterKind = Literal[
    "round_robin",
    "least_outstanding_requests",
    "least_outstanding_tokens",
    "power_of_two",
    "prefix_affinity",
    "central_queue",
]

_MASK_64 = (1 << 64) - 1


@dataclass(slots=True)
class ReplicaLoad:
    """What a replica has been sent and not yet finished (or rejected)."""

    num_requests: int = 0
    # Prompt plus output tokens (a real router is told ``max_tokens``).
    num_tokens: int = 0


class Router(Protocol):
    """Chooses the replica (index into ``loads``) for ``request``."""

    def choose(self, request: Request, loads: Sequence[ReplicaLoad]) -> int: ...


class RoundRobin:
    """Replicas in turn, 0, 1, …, n-1, 0, …, whatever their load."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        index = self._next % len(loads)
        self._next = index + 1
        return index

    def num_turns_before(self, index: int, num_replicas: int) -> int:
        """How many requests go elsewhere before the next one goes to replica ``index``."""
        return (index - self._next) % num_replicas


class LeastOutstandingRequests:
    """The replica with the fewest unfinished requests (lowest index on ties)."""

    def choose(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        return min(range(len(loads)), key=lambda i: loads[i].num_requests)


class LeastOutstandingTokens:
    """The replica with the fewest unfinished tokens (then fewest requests, lowest index)."""

    def choose(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        return min(range(len(loads)), key=lambda i: (loads[i].num_tokens, loads[i].num_requests))


class PowerOfTwo:
    """Two distinct replicas drawn from ``rng``; the one with fewer unfinished requests
    (ties: the first drawn)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choose(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        n = len(loads)
        if n == 1:
            return 0
        first, second = (int(i) for i in self.rng.choice(n, size=2, replace=False))
        return second if loads[second].num_requests < loads[first].num_requests else first


def mix64(value: int) -> int:
    """splitmix64's finaliser: a deterministic, well-spread 64-bit hash of an integer."""
    z = (value + 0x9E3779B97F4A7C15) & _MASK_64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK_64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK_64
    return z ^ (z >> 31)


class PrefixAffinity:
    """Requests of one prefix group (a trace's: of one first hash id) always go to the
    same replica (hash of the group id), which keeps its prefix cached; requests
    without one to the least loaded."""

    def __init__(self) -> None:
        self._fallback = LeastOutstandingRequests()

    def choose(self, request: Request, loads: Sequence[ReplicaLoad]) -> int:
        group = request.prefix_group
        if group is None and request.block_hash_ids:
            group = request.block_hash_ids[0]  # its first blocks' (as routed.py's head)
        if group is None:
            return self._fallback.choose(request, loads)
        return mix64(int(group)) % len(loads)


def make_router(kind: RouterKind, rng: np.random.Generator) -> Router:
    """The router of a ``cluster.router`` setting (``rng`` is used by ``power_of_two`` only)."""
    if kind == "round_robin":
        return RoundRobin()
    if kind in ("least_outstanding_requests", "central_queue"):
        return LeastOutstandingRequests()
    if kind == "least_outstanding_tokens":
        return LeastOutstandingTokens()
    if kind == "power_of_two":
        return PowerOfTwo(rng)
    if kind == "prefix_affinity":
        return PrefixAffinity()
    raise ValueError(f"unknown router {kind!r}")
