"""Prefix caching: block keys, reference counts, LRU eviction, admission, and its effect."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim import api
from sim.engine.kv_pool import BlockPool
from sim.engine.prefix_cache import PrefixCachingPool, prefix_cache_summary, prefix_describer
from sim.engine.request import Request
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict
from sim.workload.generate import RequestArrays, SyntheticWorkload, generate_open_loop


def grouped(request_id: int, prompt: int, group: int = 0, shared: int = 12) -> Request:
    request = Request(request_id, 0.0, prompt, 4)
    request.prefix_group = group
    request.num_shared_prefix_tokens = shared
    return request


def admit(pool: BlockPool, request: Request, num_tokens: int | None = None) -> int:
    """Admit as the continuous policy does; return the cached tokens skipped."""
    cached = pool.num_cached_tokens(request)
    target = num_tokens if num_tokens is not None else request.num_prompt_tokens
    assert pool.can_allocate(request, target)
    pool.allocate(request, target)
    request.num_computed_tokens = target
    return cached


def used_blocks(pool: PrefixCachingPool, requests: list[Request]) -> int:
    """Distinct cached blocks referenced plus every request's private blocks."""
    shared = {key for r in requests for key in pool.held_keys(r)}
    private = sum(r.num_blocks - len(pool.held_keys(r)) for r in requests)
    return len(shared) + private


# -- keys ------------------------------------------------------------------------------


def test_group_keys_are_whole_blocks_of_the_shared_prefix() -> None:
    pool = PrefixCachingPool(64, 4)
    assert len(pool.block_keys(grouped(0, 40, shared=12))) == 3
    assert len(pool.block_keys(grouped(1, 40, shared=10))) == 2  # a partial block is not shared
    assert len(pool.block_keys(grouped(2, 6, shared=12))) == 1  # never beyond the prompt
    assert pool.block_keys(Request(3, 0.0, 40, 4)) == []  # no prefix, nothing shareable


def test_keys_are_shared_within_a_group_only() -> None:
    pool = PrefixCachingPool(64, 4)
    a, b, c = grouped(0, 40, 0, 12), grouped(1, 40, 0, 8), grouped(2, 40, 1, 12)
    assert pool.block_keys(b) == pool.block_keys(a)[:2]
    assert not set(pool.block_keys(a)) & set(pool.block_keys(c))
    assert len(set(pool.block_keys(a))) == 3


def test_hash_id_keys_chain_on_the_whole_prefix() -> None:
    pool = PrefixCachingPool(64, 4)

    def with_ids(request_id: int, ids: tuple[int, ...]) -> Request:
        request = Request(request_id, 0.0, 4 * len(ids) + 1, 2)
        request.block_hash_ids = ids
        return request

    first = pool.block_keys(with_ids(0, (1, 2, 3)))
    assert pool.block_keys(with_ids(1, (1, 2, 9)))[:2] == first[:2]
    assert pool.block_keys(with_ids(1, (1, 2, 9)))[2] != first[2]
    # The same id after a different predecessor is a different block.
    assert not set(pool.block_keys(with_ids(2, (5, 2, 3)))) & set(first)


# -- admission, reference counts, eviction ------------------------------------------------


def test_second_request_of_a_group_reuses_the_first_ones_blocks() -> None:
    pool = PrefixCachingPool(10, 4)
    a, b = grouped(0, 14), grouped(1, 14)
    assert admit(pool, a) == 0
    assert pool.num_free_blocks == 6 and a.num_blocks == 4
    assert len(pool.held_keys(a)) == 3  # blocks 0-2 are full and shareable: registered
    assert pool.num_cached_tokens(b) == 12
    assert pool.num_missing_blocks(b, 14) == 1  # only the private tail block is new
    assert admit(pool, b) == 12
    assert pool.num_free_blocks == 5
    keys = pool.held_keys(a)
    assert pool.held_keys(b) == keys
    assert [pool.ref_count(k) for k in keys] == [2, 2, 2]
    assert used_blocks(pool, [a, b]) == pool.num_used_blocks


def test_freed_cached_blocks_stay_cached_and_count_as_free() -> None:
    pool = PrefixCachingPool(10, 4)
    a, b = grouped(0, 14), grouped(1, 14)
    admit(pool, a)
    admit(pool, b)
    keys = pool.held_keys(a)
    pool.free(a)
    assert [pool.ref_count(k) for k in keys] == [1, 1, 1]
    assert pool.num_free_blocks == 6 and pool.num_evictable_blocks == 0
    pool.free(b)
    assert pool.num_free_blocks == 10  # all free, three of them evictable
    assert pool.num_evictable_blocks == 3 and pool.num_cached_blocks == 3
    assert [pool.ref_count(k) for k in keys] == [0, 0, 0]
    # A later request of the group still hits them, and revives them from the free count.
    c = grouped(2, 14)
    assert pool.num_cached_tokens(c) == 12
    assert pool.num_missing_blocks(c, 14) == 4
    admit(pool, c)
    assert pool.num_free_blocks == 6 and pool.num_evictable_blocks == 0


def test_lru_evicts_the_deepest_block_of_the_oldest_prefix_first() -> None:
    pool = PrefixCachingPool(10, 4)
    a = grouped(0, 13, group=0)
    b = grouped(1, 13, group=1)
    admit(pool, a)
    admit(pool, b)
    keys_a, keys_b = pool.held_keys(a), pool.held_keys(b)
    pool.free(a)
    pool.free(b)
    # Oldest first; within one request its deepest block first (useless without its parents).
    assert pool.lru_keys() == [*reversed(keys_a), *reversed(keys_b)]
    big = Request(9, 0.0, 25, 2)  # 7 blocks: 4 truly free, so 3 cached blocks go
    admit(pool, big)
    assert pool.lru_keys() == [*reversed(keys_b)]
    assert all(pool.ref_count(k) is None for k in keys_a)
    assert pool.num_evictions == 3
    assert pool.num_cached_tokens(grouped(2, 13, group=0)) == 0
    assert pool.num_cached_tokens(grouped(3, 13, group=1)) == 12


def test_a_hit_refreshes_recency() -> None:
    pool = PrefixCachingPool(12, 4)
    a, b = grouped(0, 9, group=0, shared=8), grouped(1, 9, group=1, shared=8)
    admit(pool, a)
    admit(pool, b)
    keys_a, keys_b = pool.held_keys(a), pool.held_keys(b)
    pool.free(a)
    pool.free(b)
    assert pool.lru_keys() == [*reversed(keys_a), *reversed(keys_b)]
    again = grouped(2, 9, group=0, shared=8)
    assert admit(pool, again) == 8  # group 0's blocks are in use again...
    pool.free(again)
    # ...so group 1's are now the least recently used.
    assert pool.lru_keys() == [*reversed(keys_b), *reversed(keys_a)]


def test_eviction_is_realised_after_inline_allocation() -> None:
    # The core's skip-ahead path decrements num_free_blocks directly.
    pool = PrefixCachingPool(6, 4)
    a = grouped(0, 13)
    admit(pool, a)
    pool.free(a)
    assert pool.num_evictable_blocks == 3
    pool.num_free_blocks -= 5  # as EngineCore._commit_run does
    assert pool.num_evictable_blocks == 1 and pool.num_cached_blocks == 1
    assert pool.num_cached_tokens(grouped(1, 13)) == 4


def test_never_the_whole_prompt() -> None:
    pool = PrefixCachingPool(10, 4)
    admit(pool, grouped(0, 13, shared=12))
    # A 12-token prompt that is all prefix must still compute its last block.
    assert pool.num_cached_tokens(grouped(1, 12, shared=12)) == 8
    assert pool.num_cached_tokens(grouped(2, 13, shared=12)) == 12


def test_a_request_holding_blocks_or_tokens_gets_no_hit() -> None:
    pool = PrefixCachingPool(10, 4)
    admit(pool, grouped(0, 13))
    swapped = grouped(1, 13)
    swapped.num_computed_tokens = 5  # e.g. swapped out with its KV in CPU memory
    assert pool.num_cached_tokens(swapped) == 0


def test_blocks_computed_twice_concurrently_stay_private() -> None:
    pool = PrefixCachingPool(12, 4)
    a, b = grouped(0, 13), grouped(1, 13)
    # Both admitted with a 2-token chunk: nothing is full yet, nothing cached.
    admit(pool, a, 2)
    admit(pool, b, 2)
    pool.allocate(a, 13)
    a.num_computed_tokens = 13
    pool.allocate(b, 13)
    b.num_computed_tokens = 13
    assert len(pool.held_keys(a)) == 3 and pool.held_keys(b) == []
    assert used_blocks(pool, [a, b]) == pool.num_used_blocks == 8
    pool.free(a)
    pool.free(b)
    assert pool.num_free_blocks == 12 and pool.num_evictable_blocks == 3


def test_free_registers_a_block_filled_without_a_new_allocation() -> None:
    pool = PrefixCachingPool(10, 4)
    a = grouped(0, 13)
    admit(pool, a, 6)  # two blocks held, block 1 not full yet
    assert len(pool.held_keys(a)) == 1
    a.num_computed_tokens = 8  # block 1 filled within the held blocks
    pool.free(a)
    assert pool.num_cached_tokens(grouped(1, 13)) == 8


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


def test_summary_counts_completed_requests() -> None:
    frame = pd.DataFrame(
        {
            "num_prompt_tokens": [100, 100, 50],
            "num_cached_tokens": [0, 64, 32],
            "finish_s": [1.0, 2.0, float("nan")],
            "rejection_reason": [None, None, None],
        }
    )
    assert prefix_cache_summary(frame) == {
        "prefix_cache_hit_tokens": 64,
        "prefix_cache_hit_rate": 0.32,
    }


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


def test_caching_without_shared_prefixes_changes_nothing() -> None:
    off, on = run(False, None), run(True, None)
    pd.testing.assert_frame_equal(off.requests, on.requests, check_exact=True)
    pd.testing.assert_frame_equal(off.steps, on.steps, check_exact=True)
    assert on.summary["prefix_cache_hit_rate"] == 0.0


def test_switches_off_reproduce_the_default_run() -> None:
    # The defaults (no switch written) and the switches written off give the same run.
    doc = scenario_doc(False, None)
    explicit = api.run(scenario_from_dict(doc))
    del doc["engine"]["enable_prefix_caching"]
    default = api.run(scenario_from_dict(doc))
    pd.testing.assert_frame_equal(explicit.requests, default.requests, check_exact=True)
    pd.testing.assert_frame_equal(explicit.steps, default.steps, check_exact=True)
    pd.testing.assert_frame_equal(explicit.timeseries, default.timeseries, check_exact=True)


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
