"""Policy factories that switch a feature on in the continuous-batching family.

Each wraps a policy factory (``() -> Scheduler``) so that every policy it builds,
one per replica, gets the feature: its own swap space (``preemption: swap``,
``sim.engine.kv_cache``), or planning one step ahead (vLLM's async scheduling, run
by ``sim.serving.replica``). Policies outside the family are built unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.engine.kv_cache import SwapSpace
from sim.engine.scheduler import Continuous, Scheduler


def with_swap_space(
    build: Callable[[], Scheduler],
    capacity_bytes: float,
    bytes_per_block: float,
    bandwidth_bytes_per_s: float,
) -> Callable[[], Scheduler]:
    """A policy factory giving each continuous-family policy it builds its own swap space."""

    def make() -> Scheduler:
        policy = build()
        if isinstance(policy, Continuous):
            policy.swap = SwapSpace(capacity_bytes, bytes_per_block, bandwidth_bytes_per_s)
        return policy

    return make


def with_async_scheduling(build: Callable[[], Scheduler]) -> Callable[[], Scheduler]:
    """A policy factory whose continuous-family policies ask to be planned one step ahead."""

    def make() -> Scheduler:
        policy = build()
        if isinstance(policy, Continuous):
            policy.async_scheduling = True
        return policy

    return make
