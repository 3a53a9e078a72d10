"""How many decode steps a plan may promise before the KV pool runs short."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.engine.request import Request

if TYPE_CHECKING:
    from sim.engine.cohort import Cohort
    from sim.engine.kv_pool import BlockPool


def steps_within_pool(
    kv: BlockPool,
    scheduled: list[tuple[Request, int]],
    num_steps: int,
    cohort: Cohort | None = None,
    step: int = 0,
) -> int:
    """Largest k ≤ ``num_steps`` such that k decode steps after this one fit in the pool.

    This step's blocks are reserved; each later step adds one token per request:
    per listed request in ``scheduled``, and per member of ``cohort`` when the
    plan (for ``step``) carries one.
    """
    block_size = kv.block_size_tokens

    def missing(k: int) -> int:
        # Blocks short of holding computed + new + k tokens (ceil division inline: hot path).
        total = 0
        for r, num_new in scheduled:
            short = -(-(r.num_computed_tokens + num_new + k) // block_size) - r.num_blocks
            if short > 0:
                total += short
        if cohort is not None:
            total += cohort.num_crossing_between(step + 1, k)
        return total

    free = kv.num_free_blocks
    num_seqs = len(scheduled) + (cohort.num_members if cohort is not None else 0)
    # Cheap bound first (the common case): k more tokens need at most
    # k // block_size + 1 new blocks per request.
    if num_seqs * (num_steps // block_size + 1) <= free or missing(num_steps) <= free:
        return num_steps
    low, high = 0, num_steps  # missing(low) == 0 <= free < missing(high)
    while high - low > 1:
        mid = (low + high) // 2
        if missing(mid) <= free:
            low = mid
        else:
            high = mid
    return low
