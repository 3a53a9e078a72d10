"""vLLM 0.24's free-queue order: a freed request's blocks without a hash to the head.

vLLM 0.24.0's ``BlockPool.free_blocks`` splits a freed request's blocks (given
deepest first) into those without a block hash, put at the head of the free
queue (``prepend_n``, the deepest first: evicted before anything else), and the
hashed ones, appended to the tail; 0.10.2, 0.11.0 and 0.19.0 to 0.23.0 append
them all to the tail, deepest first (read in each release's
``vllm/v1/core/block_pool.py``). vLLM hashes a block once it is full of computed
tokens, so the unhashed blocks are those past ``num_computed_tokens //
block_size``: a request's last, partly filled block. servesim follows the
version (``sim.scenario.vllm_versions``, ``PrefixCachingPool``'s
``free_unhashed_first``); the figures below are worked out by hand in the comments.
The bulk pool against the per-block reference, in both orders, is
``tests/test_prefix_cache_reference.py``'s property.
"""

from __future__ import annotations

import numpy as np
import pytest
from compiled_runs import assert_identical, simulate
from hypothesis import given
from hypothesis import strategies as st
from pool_state import free_queue, num_evictable_blocks, queue_blocks
from scenario_docs import small_doc
from test_prefix_cache_reference import SETTINGS, ListQueue

from sim.api.build import core_config_for
from sim.cost.roofline import RooflineCost
from sim.engine import kv_blocks
from sim.engine.core_config import CoreConfig
from sim.engine.kv_blocks import FreeQueue
from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.policies import ContinuousConfig
from sim.engine.request import Request
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import scenario_from_dict
from sim.scenario.vllm_versions import NEWEST, VERSIONS
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.workload.generate import RequestArrays

BLOCK = 4  # tokens per KV block in the hand-built cases


# -- the version defaults -------------------------------------------------------------


def test_only_0_24_frees_blocks_without_a_hash_to_the_head() -> None:
    # Read from each release's block_pool.py (see the module docstring).
    assert VERSIONS["0.24"].free_unhashed_first and NEWEST == "0.24"
    assert not any(VERSIONS[name].free_unhashed_first for name in VERSIONS if name != "0.24")


def test_a_pool_built_without_a_version_frees_as_0_23() -> None:
    assert not PrefixCachingPool(4, BLOCK).free_unhashed_first
    assert not CoreConfig(ContinuousConfig().build, 4, BLOCK, 64, True).free_unhashed_first


# -- a hand-built case where the two orders cache different blocks ---------------------


def found_on_return(pool: BlockPool, unhashed_first: bool) -> int:
    """Whole blocks request A finds cached on its return, after the sequence below
    (freeing as 0.24 if ``unhashed_first``, else as 0.23).

    6 blocks of ``size`` tokens; the queue starts 0 1 2 3 4 5 (head first).
    1. A (prompt 2 blocks, output 4) is admitted: blocks 0 1; it computes its prompt
       and samples 1 token (2 * size + 1 tokens), then is preempted: both blocks are
       full of computed tokens, so both are hashed (own keys) and go to the tail,
       deepest first: queue 2 3 4 5 1* 0* (* cached).
    2. B (prompt size + 1, output 1) is admitted: blocks 2 3; it computes its
       prompt and finishes. Block 2 is full (hashed), block 3 holds 1 token (no hash).
       0.23: both to the tail, deepest first: 4 5 1* 0* 3 2.
       0.24: block 3 to the head, block 2 to the tail: 3 4 5 1* 0* 2.
    3. C (prompt 3 blocks) takes 3 blocks from the head.
       0.23: 4 5 1, evicting A's block 1; 0.24: 3 4 5, evicting nothing.
    4. A comes back (2 * size + 1 tokens: at most 2 blocks looked up, one token
       left to compute): 0.23 finds its block 0 only (the chain breaks at block 1):
       1 block; 0.24 finds both: 2 blocks.
    """
    assert pool.num_blocks == 6 and isinstance(pool, PrefixCachingPool)
    size = pool.block_size_tokens
    a, b = Request(0, 0.0, 2 * size, 4), Request(1, 0.0, size + 1, 1)
    pool.allocate(a, 2 * size)
    a.num_computed_tokens, a.num_generated_tokens = 2 * size, 1
    pool.free(a)  # preempted (unfinished): as EngineCore.preempt
    a.num_computed_tokens = 0
    assert pool.num_cached_tokens(b) == 0
    pool.allocate(b, size + 1)
    b.num_computed_tokens, b.num_generated_tokens = size + 1, 1
    pool.free(b)  # finished
    pool.allocate(Request(2, 0.0, 3 * size, 1), 3 * size)
    assert pool.num_evictions == (0 if unhashed_first else 1)
    assert num_evictable_blocks(pool) == (2 if unhashed_first else 1)
    return pool.num_cached_tokens(a) // size


def test_0_23_evicts_a_cached_block_before_the_partly_filled_one() -> None:
    assert found_on_return(PrefixCachingPool(6, BLOCK), unhashed_first=False) == 1


@pytest.mark.parametrize(("name", "num_found"), [("0.23", 1), ("0.24", 2)])
def test_a_scenario_s_pool_frees_as_its_vllm_version(name: str, num_found: int) -> None:
    # 0.24 evicts the partly filled block first and keeps A's cached blocks.
    engine = {"vllm_version": name, "block_size_tokens": 8, "num_kv_blocks": 6}
    engine["max_model_len_tokens"] = 48  # what 6 blocks of 8 hold
    pool = core_config_for(scenario_from_dict(small_doc(engine=engine))).new_block_pool()
    assert found_on_return(pool, unhashed_first=name == "0.24") == num_found


def test_0_24_puts_every_unhashed_block_at_the_head_deepest_first() -> None:
    # 8 blocks; D (prompt 6) is allocated 14 tokens ahead (4 blocks: 0 1 2 3) but has
    # computed 6: block 0 full (hashed), 1 to 3 not. Freed finished: 3 2 1 go to the
    # head in that order, 0 to the tail: queue 3 2 1 4 5 6 7 0.
    pool = PrefixCachingPool(8, BLOCK, free_unhashed_first=True)
    d = Request(0, 0.0, 6, 1)
    pool.allocate(d, 14)
    d.num_computed_tokens, d.num_generated_tokens = 6, 1
    pool.free(d)
    assert free_queue(pool) == [3, 2, 1, 4, 5, 6, 7, 0]
    assert pool.num_free_blocks == 8


def test_a_shared_prefix_block_stays_at_the_tail_and_a_held_one_stays_held() -> None:
    # Two requests of one prefix group share blocks 0 and 1 (8 shared tokens, keyed
    # when filled). E (prompt 10) holds 0 1 2; F (prompt 10) hits 0 1 and adds 3.
    # E finishes having computed 10 tokens: blocks 0 1 are still F's (not freed),
    # block 2 (2 tokens, no hash) goes to the head: queue 2 4 5 6 7.
    pool = PrefixCachingPool(8, BLOCK, free_unhashed_first=True)
    e, f = Request(0, 0.0, 10, 1), Request(1, 0.0, 10, 1)
    for request in (e, f):
        request.prefix_group, request.num_shared_prefix_tokens = 0, 8
    pool.allocate(e, 10)
    e.num_computed_tokens = 10
    assert pool.num_cached_tokens(f) == 8
    pool.allocate(f, 10)
    e.num_generated_tokens = 1
    pool.free(e)
    assert free_queue(pool) == [2, 4, 5, 6, 7]
    # F finishes too (10 computed): 3 to the head, then 1 0 to the tail, cached.
    f.num_computed_tokens, f.num_generated_tokens = 10, 1
    pool.free(f)
    assert free_queue(pool) == [3, 2, 4, 5, 6, 7, 1, 0]
    assert num_evictable_blocks(pool) == 2


# -- the free queue's head ------------------------------------------------------------


def test_blocks_put_at_the_head_pop_first_the_first_given_first() -> None:
    queue = FreeQueue(range(3))
    queue.extend_head([7, 6])
    queue.extend_head([9])
    assert queue.size == 6 and queue_blocks(queue) == [9, 7, 6, 0, 1, 2]
    assert queue.pop(2) == ([9, 7], [])
    queue.append_keyed(5)
    assert queue.pop(3) == ([6, 0, 1], [])
    assert queue.pop(2) == ([2, 5], [5]) and queue.size == 0


class HeadListQueue(ListQueue):
    """The list reference, with vLLM 0.24's ``prepend_n``."""

    def extend_head(self, blocks: list[int]) -> None:
        self.items[:0] = [(b, False) for b in blocks]


@SETTINGS
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["extend", "head", "keyed", "remove", "pop"]), st.integers(0, 8)),
        max_size=80,
    ),
    start=st.integers(0, 10),
)
def test_the_free_queue_with_a_head_pops_what_a_plain_list_would(
    ops: list[tuple[str, int]], start: int
) -> None:
    """``test_prefix_cache_reference``'s list check with blocks put at the head too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kv_blocks, "_TRIM_ENTRIES", 4)  # trim often
        queue, reference = FreeQueue(range(start)), HeadListQueue(list(range(start)))
        next_block = start
        for op, n in ops:
            fresh = list(range(next_block, next_block + n))
            if op == "extend":
                queue.extend(fresh)
                reference.extend(fresh)
            elif op == "head":
                queue.extend_head(fresh)
                reference.extend_head(fresh)
            elif op == "keyed":
                for block in fresh:
                    queue.append_keyed(block)
                    reference.append_keyed(block)
            elif op == "remove":
                keyed = [b for b, k in reference.items if k]
                if keyed:
                    queue.remove(keyed[n % len(keyed)])
                    reference.remove(keyed[n % len(keyed)])
            else:
                count = min(n, len(reference.items))
                assert queue.pop(count) == reference.pop(count)
            next_block += n
            assert queue_blocks(queue) == [b for b, _ in reference.items]
            assert queue.size == len(reference.items)


# -- the compiled loop ----------------------------------------------------------------


@pytest.mark.parametrize("num_kv_blocks", [64, 12])
def test_the_compiled_loop_plays_0_24_pools_as_the_python_path(num_kv_blocks: int) -> None:
    # Without shared prefixes nothing is keyed but by a preemption, which the compiled
    # loop leaves to the Python path (12 blocks of 16 tokens: three 96-token prompts
    # growing to 160 tokens need 30; 64 blocks hold them all).
    cost = RooflineCost(model_preset("llama-3-8b"), hardware_preset("h100"))
    config = ContinuousConfig(max_num_seqs=4, max_num_batched_tokens=256)
    core = CoreConfig(config.build, num_kv_blocks, 16, 1024, True, free_unhashed_first=True)
    engine = ReplicaConfig(core, cost, NO_FRONTEND)
    arrays = RequestArrays(
        np.zeros(3), np.full(3, 96, dtype=np.int64), np.full(3, 64, dtype=np.int64)
    )
    reference, reference_order, _ = simulate(arrays, engine, "never")
    raw, order, played = simulate(arrays, engine, "python")
    assert_identical(raw, reference)
    assert order == reference_order
    preempted = int(reference.requests["num_preemptions"].sum())
    assert played == (preempted == 0) and (preempted > 0) == (num_kv_blocks == 12)
