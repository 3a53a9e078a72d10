"""Prefix caching inside the continuous policy's step, and its statistics, as vLLM v1.

- ``KVCacheManager.allocate_slots`` caches a request's full blocks at the step
  that fills them, so a request admitted later in that step already hits them;
- ``PrefixCacheStats`` counts a lookup on every admission that looks the cache
  up (re-admission after a recompute preemption included), its ``queries`` and
  ``hits`` in tokens, and the hit rate is ``hits / queries``.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.kv_cache import BlockPool, PrefixCachingPool, prefix_cache_summary
from sim.engine.policies import ContinuousConfig
from sim.engine.records import RequestTable
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, SchedulerOutput

COUNTS = ("num_prefix_lookups", "num_prefix_query_tokens", "num_prefix_hit_tokens")


def grouped(request_id: int, prompt: int, output: int = 4) -> Request:
    """A request whose first 32 prompt tokens are group 5's shared prefix."""
    request = Request(request_id, 0.0, prompt, output)
    request.prefix_group = 5
    request.num_shared_prefix_tokens = 32
    return request


def batch(plan: SchedulerOutput) -> list[tuple[int, int]]:
    return [(r.request_id, n) for r, n in plan.scheduled]


def step(core: EngineCore, now_s: float) -> SchedulerOutput:
    """Schedule one step and update the core with its end, one second later."""
    plan = core.schedule(now_s)
    core.update(plan, now_s + 1.0)
    return plan


@pytest.mark.parametrize("pool", [PrefixCachingPool, BlockPool])
def test_allocate_slots_caches_a_block_filled_without_a_new_allocation(
    pool: type[BlockPool],
) -> None:
    """Blocks of 16 tokens, a budget of 20 tokens a step.

    Step 1: A (32-token prompt, all of it group 5's prefix) computes 20 tokens:
    2 blocks, block 0 full and cached. B (40 tokens, same prefix) arrives.
    Step 2: A computes its last 12 tokens, filling block 1, which it already
    holds (no allocation); vLLM caches it in this step, so B, admitted after A
    in the same step, finds 32 tokens cached and computes its last 8 (the
    budget left). Before the fix B found only block 0 (16 tokens). A plain pool
    caches nothing: B's first 8 tokens.
    """
    core = EngineCore(
        ContinuousConfig(max_num_batched_tokens=20, max_num_seqs=4).build(), pool(16, 16), 1024
    )
    a, b = grouped(0, 32), grouped(1, 40)
    core.add(a, 0.0)
    plan = core.schedule(0.0)
    assert batch(plan) == [(0, 20)]
    core.update(plan, 1.0)
    core.add(b, 0.5)
    plan = core.schedule(1.0)
    hit = 32 if pool is PrefixCachingPool else 0
    assert batch(plan) == [(0, 12), (1, 8)]
    assert b.num_cached_tokens == hit
    assert b.num_computed_tokens == hit
    assert (b.num_prefix_hit_tokens, b.num_prefix_query_tokens) == ((32, 40) if hit else (0, 0))


def test_prefix_cache_stats_count_the_readmission_after_preemption() -> None:
    """4 blocks of 4 tokens; A and B (6-token prompts, 6 outputs, no shared prefix).

    A and B are admitted together (2 blocks each; lookups of 6 tokens, no hit)
    and decode to 8 tokens each, filling the pool. A's next token needs a block:
    B (newest) is preempted with 8 computed tokens, so its 2 full blocks are
    cached under its own keys and freed tail first; A's new block pops the head
    of the queue, B's second block. B waits (it needs 3 blocks, 1 is free; no
    lookup is counted for a failed admission) until A finishes and frees 3.
    B's re-admission looks up its 9 tokens (6 prompt + 3 generated) and finds
    its first block: 4 tokens. So vLLM's stats: 3 lookups, 6 + 6 + 9 = 21
    query tokens, 4 hit tokens; hit rate 4 / 21. ``num_cached_tokens`` (first
    admission only) stays 0 for both.
    """
    core = EngineCore(
        ContinuousConfig(max_num_batched_tokens=64, max_num_seqs=4).build(),
        PrefixCachingPool(4, 4),
        64,
    )
    a, b = Request(0, 0.0, 6, 6), Request(1, 0.0, 6, 6)
    core.add(a, 0.0)
    core.add(b, 0.0)
    now = 0.0
    while core.num_done < 2:
        step(core, now)
        now += 1
        assert now < 100, "the run does not end"
    assert b.num_preemptions == 1 and a.num_preemptions == 0
    assert (a.num_prefix_lookups, a.num_prefix_query_tokens, a.num_prefix_hit_tokens) == (1, 6, 0)
    assert (b.num_prefix_lookups, b.num_prefix_query_tokens, b.num_prefix_hit_tokens) == (2, 15, 4)
    assert a.num_cached_tokens == b.num_cached_tokens == 0
    summary = prefix_cache_summary(RequestTable(core.records.views(), {}))
    assert summary == {
        "prefix_cache_requests": 3,
        "prefix_cache_query_tokens": 21,
        "prefix_cache_hit_tokens": 4,
        "prefix_cache_hit_rate": pytest.approx(4 / 21),
    }


def test_a_plain_pool_looks_nothing_up() -> None:
    core = EngineCore(ContinuousConfig().build(), BlockPool(8, 4), 64)
    request = Request(0, 0.0, 6, 2)
    core.add(request, 0.0)
    while core.num_done < 1:
        step(core, float(core.num_steps))
    summary = prefix_cache_summary(RequestTable(core.records.views(), {}))
    assert summary["prefix_cache_requests"] == 0
    assert summary["prefix_cache_hit_rate"] == 0.0


def test_summary_sums_every_request_and_admission() -> None:
    table = RequestTable(
        {
            "request_id": np.arange(3),
            "num_prefix_lookups": np.array([1, 2, 1]),
            "num_prefix_query_tokens": np.array([100, 130, 50]),
            "num_prefix_hit_tokens": np.array([0, 64, 32]),
            "finish_s": np.array([1.0, 2.0, float("nan")]),  # unfinished requests looked up too
        },
        {},
    )
    assert prefix_cache_summary(table) == {
        "prefix_cache_requests": 4,
        "prefix_cache_query_tokens": 280,
        "prefix_cache_hit_tokens": 96,
        "prefix_cache_hit_rate": pytest.approx(96 / 280),
    }
    no_rows = {name: np.zeros(0, np.int64) for name in COUNTS}
    empty = prefix_cache_summary(RequestTable({"request_id": np.zeros(0, np.int64), **no_rows}, {}))
    assert empty["prefix_cache_requests"] == 0 and empty["prefix_cache_hit_rate"] == 0.0
    assert np.isfinite(empty["prefix_cache_hit_rate"])
