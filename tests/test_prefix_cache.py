"""Prefix caching as vLLM v1: block keys, the free-block queue, hits, and whole runs.

Unit tests are named after the vLLM v1 function whose rule they check
(``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``,
``single_type_kv_cache_manager.py``, ``kv_cache_utils.py``) and drive the pool
as the continuous policy does (``admit``). Pools are tiny (4-token blocks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest
from pool_state import (
    block_ids,
    block_key,
    block_keys,
    block_ref_count,
    cached_block,
    free_queue,
    held_keys,
    num_cached_blocks,
    num_evictable_blocks,
    num_loose_blocks,
)

from sim import api
from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.request import Request
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict
from sim.serving.simulation import OpenLoop, Simulation
from sim.serving.submission import prefix_describer
from sim.workload.generate import RequestArrays, SyntheticWorkload, generate_open_loop


def grouped(
    request_id: int, prompt: int, group: int = 0, shared: int = 12, output: int = 4
) -> Request:
    request = Request(request_id, 0.0, prompt, output)
    request.prefix_group = group
    request.num_shared_prefix_tokens = shared
    return request


def admit(pool: BlockPool, request: Request, num_tokens: int | None = None) -> int:
    """Admit as the continuous policy does (hit, allocate, skip the hit); return the hit."""
    cached = pool.num_cached_tokens(request)
    target = num_tokens if num_tokens is not None else request.num_tokens
    assert pool.can_allocate(request, target)
    pool.allocate(request, target)
    request.num_computed_tokens = target
    return cached


def decode(pool: BlockPool, request: Request, num_steps: int) -> None:
    """``num_steps`` decode steps, step by step (allocating as the policy does)."""
    for _ in range(num_steps):
        request.num_generated_tokens += 1  # the token sampled by the previous step
        target = request.num_computed_tokens + 1
        if target > request.num_blocks * pool.block_size_tokens:
            pool.allocate(request, target)
        request.num_computed_tokens = target


def keys_of(pool: PrefixCachingPool, blocks: list[int]) -> list[Any]:
    return [block_key(pool, b) for b in blocks]


def own(request_id: int, block: int) -> int:
    """A block key private to one request (its id and the block's index)."""
    return (request_id << 32) | block


# -- keys (hash_block_tokens / hash_request_tokens) --------------------------------------


def test_hash_block_tokens_shares_whole_blocks_of_a_group_prefix_only() -> None:
    pool = PrefixCachingPool(64, 4)
    a, b, c = grouped(0, 40, 0, 12), grouped(1, 40, 0, 10), grouped(2, 40, 1, 12)
    keys_a, keys_b, keys_c = (block_keys(pool, r, 4) for r in (a, b, c))
    assert keys_a[:3] == [("group", 0, 0), ("group", 0, 1), ("group", 0, 2)]
    assert keys_b[:2] == keys_a[:2]  # a partial block of the prefix is not shared...
    assert keys_b[2] == own(1, 2)  # ...it holds the request's own tokens too
    assert keys_a[3] == own(0, 3)  # past the prefix every block is the request's own
    assert not set(keys_a) & set(keys_c)  # other group
    assert block_keys(pool, grouped(3, 6, shared=12), 2) == [("group", 0, 0), own(3, 1)]
    assert block_keys(pool, Request(4, 0.0, 40, 4), 2) == [own(4, 0), own(4, 1)]
    assert block_keys(pool, a, 5, start=2) == [*keys_a[2:], own(0, 4)]


def test_hash_request_tokens_keys_output_blocks_too() -> None:
    # vLLM hashes generated tokens as well: blocks past the prompt have keys (the request's).
    pool = PrefixCachingPool(64, 4)
    request = grouped(0, 9, shared=8, output=20)
    assert block_keys(pool, request, 6)[2:] == [own(0, j) for j in range(2, 6)]


def test_hash_block_tokens_chains_trace_ids_on_the_whole_prefix() -> None:
    pool = PrefixCachingPool(64, 4)

    def with_ids(request_id: int, ids: tuple[int, ...]) -> Request:
        request = Request(request_id, 0.0, 4 * len(ids) + 1, 2)
        request.block_hash_ids = ids
        return request

    first = block_keys(pool, with_ids(0, (1, 2, 3)), 3)
    assert block_keys(pool, with_ids(1, (1, 2, 9)), 3)[:2] == first[:2]
    assert block_keys(pool, with_ids(1, (1, 2, 9)), 3)[2] != first[2]
    # The same id after a different predecessor is a different block.
    assert not set(block_keys(pool, with_ids(2, (5, 2, 3)), 3)) & set(first)
    assert block_keys(pool, with_ids(3, (1, 2, 3)), 4, start=1) == [*first[1:], own(3, 3)]


# -- hits (get_computed_blocks / find_longest_cache_hit) ---------------------------------------


def test_get_computed_blocks_leaves_one_token_to_compute() -> None:
    pool = PrefixCachingPool(10, 4)
    admit(pool, grouped(0, 13, shared=12))
    # A 12-token prompt that is all prefix must still compute its last token: a whole block.
    assert pool.num_cached_tokens(grouped(1, 12, shared=12)) == 8
    assert pool.num_cached_tokens(grouped(2, 13, shared=12)) == 12


def test_get_computed_blocks_hits_own_prompt_and_output_blocks_after_preemption() -> None:
    pool = PrefixCachingPool(16, 4)
    request = Request(0, 0.0, 10, 20)
    admit(pool, request)  # 10 prompt tokens: blocks 0-1 full
    decode(pool, request, 7)  # 17 tokens known, 16 computed: blocks 0-3 full
    pool.free(request)  # preempted by recompute: its full blocks keep their keys
    request.num_computed_tokens = 0
    # 17 tokens known: at most 16 hit (4 whole blocks), the last one recomputed.
    assert request.num_tokens == 17
    assert pool.num_cached_tokens(request) == 16
    request.num_generated_tokens = 6  # one token fewer: block 3 would hold the last token
    assert pool.num_cached_tokens(request) == 12


def test_get_computed_blocks_stops_at_the_first_evicted_block() -> None:
    pool = PrefixCachingPool(6, 4)
    request = Request(0, 0.0, 17, 4)
    admit(pool, request)  # blocks 0-4; 0-3 full and cached, 4 holds one token
    pool.free(request)  # preempted: queue b5, b4, b3 .. b0 (its tail first)
    request.num_computed_tokens = 0
    first = Request(1, 0.0, 8, 2)
    admit(pool, first)  # pops b5 (never used) and b4 (uncached)
    assert pool.num_cached_tokens(request) == 16
    pool.free(first)
    admit(pool, Request(2, 0.0, 4, 2))  # pops b3: request 0's tail block is evicted
    assert pool.num_cached_tokens(request) == 12


def test_a_request_holding_blocks_or_tokens_gets_no_hit() -> None:
    pool = PrefixCachingPool(10, 4)
    admit(pool, grouped(0, 13))
    swapped = grouped(1, 13)
    swapped.num_computed_tokens = 5  # swapped out with its KV in CPU memory
    assert pool.num_cached_tokens(swapped) == 0


# -- allocation (get_num_blocks_to_allocate / touch / get_new_blocks) ----------------------


def test_get_num_blocks_to_allocate_counts_free_hit_blocks() -> None:
    pool = PrefixCachingPool(10, 4)
    a, b = grouped(0, 14), grouped(1, 14)
    admit(pool, a)
    assert pool.num_missing_blocks(b, 14) == 1  # blocks 0-2 referenced by a: only the tail
    assert admit(pool, b) == 12
    assert pool.num_free_blocks == 5
    assert block_ids(pool, b)[:3] == block_ids(pool, a)[:3]
    assert [block_ref_count(pool, x) for x in block_ids(pool, a)] == [2, 2, 2, 1]
    pool.free(a)
    pool.free(b)
    c = grouped(2, 14)
    # Free (evictable) hit blocks leave the free count when referenced again.
    assert pool.num_missing_blocks(c, 14) == 4


def test_touch_removes_a_hit_block_from_the_free_queue() -> None:
    pool = PrefixCachingPool(8, 4)
    a = grouped(0, 9, shared=8)
    admit(pool, a)
    first_two = block_ids(pool, a)[:2]
    pool.free(a)
    assert set(first_two) <= set(free_queue(pool))
    b = grouped(1, 9, shared=8)
    assert admit(pool, b) == 8
    assert not set(first_two) & set(free_queue(pool))
    assert block_ids(pool, b)[:2] == first_two
    assert pool.num_free_blocks == len(free_queue(pool)) == 5


def test_get_new_blocks_pops_the_head_and_evicts_it() -> None:
    pool = PrefixCachingPool(4, 4)
    a = grouped(0, 13, shared=12)
    admit(pool, a)  # all 4 blocks; 3 cached
    pool.free(a)
    queue = free_queue(pool)
    assert keys_of(pool, queue) == [None, ("group", 0, 2), ("group", 0, 1), ("group", 0, 0)]
    b = Request(1, 0.0, 8, 2)
    admit(pool, b)  # pops the uncached tail block, then the group's deepest block
    assert block_ids(pool, b) == queue[:2]
    assert pool.num_evictions == 1
    assert cached_block(pool, ("group", 0, 2)) is None
    assert pool.num_cached_tokens(grouped(2, 13)) == 8


def test_free_blocks_appends_in_reverse_order_like_free_blocks() -> None:
    pool = PrefixCachingPool(10, 4)
    a, b = grouped(0, 13, group=0), grouped(1, 13, group=1)
    admit(pool, a)
    admit(pool, b)
    ids_a, ids_b = block_ids(pool, a), block_ids(pool, b)
    pool.free(a)
    pool.free(b)
    # Never-used blocks first, then each request's blocks tail first, in the order freed.
    assert free_queue(pool) == [8, 9, *reversed(ids_a), *reversed(ids_b)]
    big = Request(9, 0.0, 25, 2)  # 7 blocks: 2 never used, a's 4 (tail first), b's tail
    admit(pool, big)
    assert pool.num_cached_tokens(grouped(2, 13, group=0)) == 0
    assert pool.num_cached_tokens(grouped(3, 13, group=1)) == 12  # b's tail was uncached
    assert pool.num_evictions == 3


def test_free_blocks_keeps_blocks_other_requests_reference() -> None:
    pool = PrefixCachingPool(10, 4)
    a, b = grouped(0, 14), grouped(1, 14)
    admit(pool, a)
    admit(pool, b)
    shared = block_ids(pool, a)[:3]
    pool.free(a)
    assert [block_ref_count(pool, x) for x in shared] == [1, 1, 1]
    assert pool.num_free_blocks == 6 and not set(shared) & set(free_queue(pool))
    pool.free(b)
    assert free_queue(pool)[-3:] == shared[::-1]  # appended when the last holder frees


def test_cache_full_blocks_caches_output_blocks_for_a_preempted_request() -> None:
    pool = PrefixCachingPool(10, 4)
    request = Request(0, 0.0, 6, 10)
    admit(pool, request)
    decode(pool, request, 3)  # 9 tokens known, 9 computed: block 1 (prompt + output) full
    # Own keys are given when the request frees its blocks (nobody can hit them before).
    assert held_keys(pool, request) == []
    pool.free(request)
    request.num_computed_tokens = 0
    assert cached_block(pool, own(0, 1)) is not None
    assert pool.num_cached_tokens(request) == 8
    # A finished request never comes back: its own blocks are not keyed at all.
    done = Request(1, 0.0, 9, 1)
    admit(pool, done)
    done.num_generated_tokens = 1
    pool.free(done)
    assert cached_block(pool, own(1, 0)) is None


def test_cache_full_blocks_caches_a_shared_block_filled_without_an_allocation() -> None:
    # A chunk that fills a prefix block it already holds does not call the pool; the
    # block is cached before the next lookup all the same.
    pool = PrefixCachingPool(10, 4)
    a = grouped(0, 13, shared=12)
    admit(pool, a, 6)  # blocks 0-1 held, block 1 half full
    a.num_computed_tokens = 8  # the next chunk fills block 1, no new block needed
    assert pool.num_cached_tokens(grouped(1, 13, shared=12)) == 8


def test_cache_full_blocks_caches_a_block_computed_twice_twice() -> None:
    # vLLM does not de-duplicate: both copies are cached, a hit takes the first.
    pool = PrefixCachingPool(12, 4)
    a, b = grouped(0, 13), grouped(1, 13)
    admit(pool, a, 2)  # both admitted with a 2-token chunk: nothing full, nothing cached
    admit(pool, b, 2)
    pool.allocate(a, 13)
    a.num_computed_tokens = 13
    pool.allocate(b, 13)
    b.num_computed_tokens = 13
    assert held_keys(pool, a) == held_keys(pool, b) == block_keys(pool, a, 3)
    assert cached_block(pool, ("group", 0, 0)) == block_ids(pool, a)[0]
    ids_b = block_ids(pool, b)
    pool.free(a)
    pool.free(b)
    assert num_evictable_blocks(pool) == 6
    # 8 blocks pop the 4 never-used ones, then a's (freed first) tail first: evicting
    # a's copies leaves b's to hit.
    admit(pool, Request(2, 0.0, 29, 2))
    assert cached_block(pool, ("group", 0, 0)) == ids_b[0]
    assert pool.num_cached_tokens(grouped(3, 13)) == 12


def test_free_registers_a_block_filled_without_a_new_allocation() -> None:
    pool = PrefixCachingPool(10, 4)
    a = grouped(0, 13)
    admit(pool, a, 6)  # two blocks held, block 1 not full yet
    assert len(held_keys(pool, a)) == 1
    a.num_computed_tokens = 8  # block 1 filled within the held blocks
    pool.free(a)
    assert pool.num_cached_tokens(grouped(1, 13)) == 8


def test_eviction_is_realised_after_inline_allocation() -> None:
    # EngineCore._commit_run decrements num_free_blocks and adds to request.num_blocks.
    pool = PrefixCachingPool(6, 4)
    a = grouped(0, 13)
    admit(pool, a)
    pool.free(a)
    assert num_evictable_blocks(pool) == 3
    b = Request(1, 0.0, 4, 30)
    admit(pool, b)
    pool.num_free_blocks -= 4  # b grows to 5 blocks inline
    b.num_blocks += 4
    b.num_computed_tokens = 20
    assert num_evictable_blocks(pool) == 1 and num_cached_blocks(pool) == 1  # a's block 0
    assert pool.num_cached_tokens(grouped(2, 13)) == 4
    assert len(block_ids(pool, b)) == 5 and num_loose_blocks(pool) == 0
    b.num_generated_tokens = 17
    pool.free(b)  # registers the output blocks the run filled (preempted)
    b.num_computed_tokens = 0
    assert pool.num_cached_tokens(b) == 20


def test_overdrawing_raises() -> None:
    pool = PrefixCachingPool(3, 4)
    request = Request(0, 0.0, 20, 2)
    assert not pool.can_allocate(request, 20)
    with pytest.raises(RuntimeError, match="overdrawn"):
        pool.allocate(request, 20)


def test_plain_pool_caches_nothing() -> None:
    pool = BlockPool(10, 4)
    admit(pool, grouped(0, 13))
    assert pool.num_cached_tokens(grouped(1, 13)) == 0


# -- the issue's hand-traced case ---------------------------------------------------------


def test_get_new_blocks_evicts_a_freed_prefix_before_it_is_hit_again() -> None:
    """Issue 12's trace: 8 blocks of 4 tokens, one output token each, one request at a time.

    A (group g, 9 tokens), C (16), D (20), E (group g, 9); g's shared prefix is 8
    tokens (blocks 0-1). Queue written head first; bN(key) a cached block.

    * Start: queue b0..b7, nothing cached.
    * A: no hit; get_new_blocks pops b0 b1 b2; cache_full_blocks caches 9 // 4 = 2
      full blocks: b0(g0) b1(g1) (b2 holds one token). A finishes; free_blocks
      appends reversed: queue b3 b4 b5 b6 b7 b2 b1(g1) b0(g0).
    * C: its own keys, no hit (at most 15 tokens looked up); pops b3 b4 b5 b6, all
      4 full and cached as C0..C3; freed reversed: queue b7 b2 b1(g1) b0(g0) b6(C3)
      b5(C2) b4(C1) b3(C0).
    * D: 5 blocks: pops b7, b2, b1 (evicts g1), b0 (evicts g0), b6 (evicts C3).
    * E: looks up g0: evicted. Hit 0 tokens.

    (servesim never keys a finished request's own blocks, C's here: nobody can
    hit them again, and a key never moves a block in the queue.)

    The old servesim used every uncached free block before evicting a cached one
    (and cached nothing of C or D), so it kept g's blocks and gave E 8 tokens.
    """
    pool = PrefixCachingPool(8, 4)
    hits = {}
    for name, request in [
        ("A", grouped(0, 9, shared=8, output=1)),
        ("C", Request(1, 0.0, 16, 1)),
        ("D", Request(2, 0.0, 20, 1)),
        ("E", grouped(3, 9, shared=8, output=1)),
    ]:
        hits[name] = admit(pool, request)
        if name == "D":
            assert block_ids(pool, request) == [7, 2, 1, 0, 6]
            assert pool.num_evictions == 2  # g1, g0 (C's C3 was never keyed: C finished)
        request.num_generated_tokens = 1
        pool.free(request)
        if name == "A":
            assert free_queue(pool) == [3, 4, 5, 6, 7, 2, 1, 0]
            assert keys_of(pool, [1, 0]) == [("group", 0, 1), ("group", 0, 0)]
        if name == "C":
            assert free_queue(pool) == [7, 2, 1, 0, 6, 5, 4, 3]
    assert hits == {"A": 0, "C": 0, "D": 0, "E": 0}


def test_the_issue_trace_through_the_engine() -> None:
    # The same four requests, run by the simulator (continuous policy, skip-ahead).
    engine = api.engine_for(scenario_from_dict(scenario_doc(True, None)))
    core = replace(engine.core, num_kv_blocks=8, block_size_tokens=4, max_model_len_tokens=64)
    engine = replace(engine, core=core)
    arrays = RequestArrays(
        np.array([0.0, 10.0, 20.0, 30.0]),
        np.array([9, 16, 20, 9], dtype=np.int64),
        np.ones(4, dtype=np.int64),
        prefix_group=np.array([0, 1, 2, 0], dtype=np.int64),
        num_shared_prefix_tokens=np.array([8, 0, 0, 8], dtype=np.int64),
    )
    result = Simulation(engine).run(cast(OpenLoop, arrays))
    assert result.requests["num_cached_tokens"].tolist() == [0, 0, 0, 0]
    # Without D in between, E hits A's prefix (8 tokens: the 9th is computed).
    keep = np.array([True, True, False, True])
    short = RequestArrays(
        arrays.arrival_s[keep],
        arrays.num_prompt_tokens[keep],
        arrays.num_output_tokens[keep],
        prefix_group=np.array([0, 1, 0], dtype=np.int64),
        num_shared_prefix_tokens=np.array([8, 0, 8], dtype=np.int64),
    )
    result = Simulation(engine).run(cast(OpenLoop, short))
    assert result.requests["num_cached_tokens"].tolist() == [0, 0, 8]


# -- workload and plumbing ----------------------------------------------------------------


def synthetic(groups: dict[str, int] | None = None, **extra: Any) -> SyntheticWorkload:
    doc: dict[str, Any] = {
        "kind": "synthetic",
        "num_requests": 200,
        "arrival": {"kind": "poisson", "rate_per_s": 5},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 10, "max_tokens": 300},
        "output_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 50},
        **extra,
    }
    if groups is not None:
        doc["prefix_groups"] = groups
    return SyntheticWorkload.model_validate(doc)


def test_prefix_groups_leave_the_other_streams_unchanged() -> None:
    plain = generate_open_loop(synthetic(), np.random.default_rng(3))
    shared = generate_open_loop(
        synthetic({"num_groups": 5, "shared_prefix_tokens": 64}), np.random.default_rng(3)
    )
    np.testing.assert_array_equal(plain.arrival_s, shared.arrival_s)
    np.testing.assert_array_equal(plain.num_output_tokens, shared.num_output_tokens)
    np.testing.assert_array_equal(plain.num_prompt_tokens + 64, shared.num_prompt_tokens)
    assert plain.prefix_group is None and shared.prefix_group is not None
    assert shared.num_shared_prefix_tokens is not None
    assert set(shared.prefix_group.tolist()) == set(range(5))
    assert (shared.num_shared_prefix_tokens == 64).all()
    again = generate_open_loop(
        synthetic({"num_groups": 5, "shared_prefix_tokens": 64}), np.random.default_rng(3)
    )
    np.testing.assert_array_equal(again.prefix_group, shared.prefix_group)


def test_prefix_groups_are_validated() -> None:
    with pytest.raises(ValueError, match="num_groups"):
        synthetic({"num_groups": 0, "shared_prefix_tokens": 64})
    with pytest.raises(ValueError, match="bogus"):
        synthetic({"num_groups": 2, "shared_prefix_tokens": 64, "bogus": 1})


def test_request_arrays_check_prefix_arrays() -> None:
    ones = np.ones(3, dtype=np.int64)
    times = np.zeros(3)
    with pytest.raises(ValueError, match="both"):
        RequestArrays(times, ones, ones, prefix_group=ones)
    with pytest.raises(ValueError, match="int64"):
        RequestArrays(times, ones, ones, prefix_group=ones[:2], num_shared_prefix_tokens=ones)


def test_describer_fills_in_the_fields() -> None:
    ones = np.ones(2, dtype=np.int64)
    groups = np.array([3, 1], dtype=np.int64)
    arrays = RequestArrays(
        np.zeros(2), ones * 40, ones, prefix_group=groups, num_shared_prefix_tokens=ones * 16
    )
    describe = prefix_describer(arrays)
    assert describe is not None
    request = Request(1, 0.0, 40, 1)
    describe(request)
    assert (request.prefix_group, request.num_shared_prefix_tokens) == (1, 16)
    assert prefix_describer(RequestArrays(np.zeros(2), ones, ones)) is None


# -- whole runs -----------------------------------------------------------------------------


def scenario_doc(caching: bool, groups: dict[str, int] | None, rate: float = 4.0) -> dict[str, Any]:
    workload: dict[str, Any] = {
        "kind": "synthetic",
        "num_requests": 150,
        "arrival": {"kind": "poisson", "rate_per_s": rate},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 20, "max_tokens": 200},
        "output_tokens": {"kind": "uniform", "min_tokens": 5, "max_tokens": 40},
    }
    if groups is not None:
        workload["prefix_groups"] = groups
    return {
        "seed": 7,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "engine": {"enable_prefix_caching": caching, "num_kv_blocks": 4000},
        "workload": workload,
    }


GROUPS = {"num_groups": 4, "shared_prefix_tokens": 2000}


def run(caching: bool, groups: dict[str, int] | None, rate: float = 4.0) -> api.Result:
    return api.run(scenario_from_dict(scenario_doc(caching, groups, rate)))


def test_hit_rate_is_zero_without_caching_and_positive_with_it() -> None:
    off, on = run(False, GROUPS), run(True, GROUPS)
    assert off.summary["prefix_cache_hit_rate"] == 0.0
    assert off.summary["prefix_cache_hit_tokens"] == 0
    assert (off.requests["num_cached_tokens"] == 0).all()
    assert 0 < on.summary["prefix_cache_hit_rate"] < 1
    cached = on.requests["num_cached_tokens"]
    assert (cached % 16 == 0).all() and (cached < on.requests["num_prompt_tokens"]).all()
    assert (cached <= 2000).all()
    # Only the first request of each group can miss the whole prefix, and 4 groups exist.
    assert (cached == 0).sum() <= 4 + 2  # plus a few admitted before a sibling's prefill ran
    assert on.summary["completed"] == off.summary["completed"] == 150


def test_prefix_caching_lowers_ttft_when_prompts_share_prefixes() -> None:
    off, on = run(False, GROUPS, rate=12.0), run(True, GROUPS, rate=12.0)
    assert on.summary["mean_ttft_ms"] < 0.7 * off.summary["mean_ttft_ms"]
    assert on.summary["p99_ttft_ms"] < off.summary["p99_ttft_ms"]
    # Same requests, same tokens out.
    assert on.summary["total_output_tokens"] == off.summary["total_output_tokens"]
    assert on.summary["mean_ttft_ms"] < off.summary["mean_ttft_ms"]


def test_caching_without_shared_prefixes_changes_nothing() -> None:
    # Without shared prefixes only a recompute-preempted request can hit (its own
    # blocks); this pool is large enough that nothing is preempted.
    off, on = run(False, None), run(True, None)
    assert off.requests["num_preemptions"].sum() == 0
    lookups = ["num_prefix_lookups", "num_prefix_query_tokens", "num_prefix_hit_tokens"]
    pd.testing.assert_frame_equal(
        off.requests.drop(columns=lookups), on.requests.drop(columns=lookups), check_exact=True
    )
    # Every admission looked its prompt up (vLLM's PrefixCacheStats) and found nothing.
    assert (on.requests["num_prefix_lookups"] == 1).all()
    assert (on.requests["num_prefix_query_tokens"] == on.requests["num_prompt_tokens"]).all()
    assert (off.requests[lookups].to_numpy() == 0).all()
    pd.testing.assert_frame_equal(off.steps, on.steps, check_exact=True)
    assert on.summary["prefix_cache_hit_rate"] == 0.0


def test_prefix_caching_is_on_by_default() -> None:
    # vLLM v1 turns prefix caching on by default (EngineArgs.enable_prefix_caching).
    doc = scenario_doc(True, GROUPS)
    explicit = api.run(scenario_from_dict(doc))
    del doc["engine"]["enable_prefix_caching"]
    default = api.run(scenario_from_dict(doc))
    assert scenario_from_dict(doc).engine.enable_prefix_caching
    pd.testing.assert_frame_equal(explicit.requests, default.requests, check_exact=True)
    pd.testing.assert_frame_equal(explicit.steps, default.steps, check_exact=True)
    pd.testing.assert_frame_equal(explicit.timeseries, default.timeseries, check_exact=True)


def test_recompute_preemption_rereads_its_own_cached_blocks() -> None:
    # A pool too small for the load: preempted requests hit their own prompt and output
    # blocks when readmitted, so the same load computes fewer tokens with caching on.
    doc = scenario_doc(True, None, rate=50.0)
    doc["engine"]["num_kv_blocks"] = 60
    doc["engine"]["max_model_len_tokens"] = 960  # 60 x 16: vLLM refuses a smaller pool
    on = api.run(scenario_from_dict(doc))
    doc["engine"]["enable_prefix_caching"] = False
    off = api.run(scenario_from_dict(doc))
    assert off.requests["num_preemptions"].sum() > 0
    assert on.steps["num_prefill_tokens"].sum() < off.steps["num_prefill_tokens"].sum()
    assert on.summary["total_output_tokens"] == off.summary["total_output_tokens"]


def test_bad_switch_is_a_config_error() -> None:
    doc = scenario_doc(False, None)
    doc["engine"]["enable_prefix_caching"] = "sometimes"
    with pytest.raises(ConfigError, match="enable_prefix_caching"):
        scenario_from_dict(doc)


def test_shipped_scenario_shows_the_effect() -> None:
    overrides = ["workload.num_requests=300"]
    on = api.run("scenarios/prefix_caching.yaml", overrides)
    switch_off = [*overrides, "engine.enable_prefix_caching=false"]
    off = api.run("scenarios/prefix_caching.yaml", switch_off)
    assert on.summary["prefix_cache_hit_rate"] > 0.5
    assert on.summary["mean_ttft_ms"] < off.summary["mean_ttft_ms"]
