"""The prefix-caching pool against an independent per-block reference: same ids, same evictions.

``PrefixCachingPool`` pushes and pops unkeyed blocks as list slices and keeps
reference counts for keyed blocks only (``sim.engine.kv_blocks``). The same
random admissions, chunks, decodes (through the pool or inline), preemptions
and finishes are played on it and on ``ReferencePrefixPool`` (written from
vLLM's rules with no code of ``sim.engine``: its own keys, one queue entry and
count per block); after every action both must hold the same blocks for every
request, the same free queue in the same order, the same keys, counts and
evictions.
"""

from __future__ import annotations

from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pool_state import (
    block_ids,
    block_key,
    block_ref_count,
    free_queue,
    grows_by_count,
    held_keys,
    num_cached_blocks,
    num_evictable_blocks,
    num_loose_blocks,
    queue_blocks,
)
from prefix_pool_reference import ReferencePrefixPool
from test_prefix_cache_properties import Driver, act

from sim.engine import kv_blocks
from sim.engine.kv_blocks import FreeQueue
from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.request import Request

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def twin(
    pool: BlockPool | ReferencePrefixPool, specs: list[tuple[int, int, int | None, int]]
) -> Driver:
    """A driver (the properties test's) of fresh requests built from ``specs`` over ``pool``
    (the reference shares no code with ``BlockPool``, only its interface)."""
    waiting = []
    for i, (prompt, output, group, shared) in enumerate(specs):
        request = Request(i, 0.0, prompt, output)
        if group is not None:
            request.prefix_group = group
            request.num_shared_prefix_tokens = shared
        waiting.append(request)
    return Driver(cast(BlockPool, pool), waiting)


def twins(
    specs: list[tuple[int, int, int | None, int]],
    num_blocks: int,
    block_size: int,
    *,
    free_unhashed_first: bool = False,
) -> tuple[Driver, Driver]:
    """The pool under test and the reference, each driving the requests of ``specs``
    that fit in ``num_blocks`` blocks (``free_unhashed_first``: both free as vLLM 0.24)."""
    fits = [s for s in specs if -(-(s[0] + s[1]) // block_size) <= num_blocks]
    fast = twin(PrefixCachingPool(num_blocks, block_size, free_unhashed_first), fits)
    slow = ReferencePrefixPool(num_blocks, block_size, free_unhashed_first=free_unhashed_first)
    return fast, twin(slow, fits)


def state(driver: Driver) -> tuple[object, ...]:
    """Everything the two pools must agree on."""
    pool = driver.pool
    assert isinstance(pool, PrefixCachingPool | ReferencePrefixPool)
    held = [(r.request_id, block_ids(pool, r), held_keys(pool, r)) for r in driver.running]
    return (
        free_queue(pool),
        pool.num_free_blocks,
        held,
        [block_key(pool, b) for b in range(pool.num_blocks)],
        [block_ref_count(pool, b) for b in range(pool.num_blocks)],
        pool.num_evictions,
        num_evictable_blocks(pool),
        num_cached_blocks(pool),
        [pool.num_cached_tokens(r) for r in driver.waiting[:1]],
    )


spec = st.tuples(
    st.integers(1, 40),
    st.integers(1, 12),
    st.one_of(st.none(), st.integers(0, 1)),
    st.integers(0, 40),
)
specs = st.lists(spec, min_size=1, max_size=8)
action = st.tuples(
    st.sampled_from(["admit", "admit", "step", "step", "step", "preempt"]),
    st.integers(0, 7),
    st.integers(1, 16),
    st.booleans(),
)
actions = st.lists(action, max_size=120)


# Both free-queue orders: to the tail (vLLM 0.10.2 to 0.23) and 0.24's unhashed
# blocks to the head (tests/test_free_queue_order.py).
@pytest.mark.parametrize("free_unhashed_first", [False, True])
@SETTINGS
@given(
    specs=specs,
    plan=actions,
    num_blocks=st.integers(4, 40),
    block_size=st.sampled_from([1, 2, 4]),
)
def test_bulk_pool_matches_the_per_block_reference(
    free_unhashed_first: bool,
    specs: list[tuple[int, int, int | None, int]],
    plan: list[tuple[str, int, int, bool]],
    num_blocks: int,
    block_size: int,
) -> None:
    fast, slow = twins(specs, num_blocks, block_size, free_unhashed_first=free_unhashed_first)
    for action in plan:
        act(fast, action)
        act(slow, action)
        assert state(fast) == state(slow)


@settings(SETTINGS, max_examples=150)
@given(
    specs=st.lists(spec, min_size=3, max_size=8),
    plan=st.lists(action, min_size=30, max_size=120),  # long enough to interleave
    looks=st.lists(st.sampled_from([False, False, True]), min_size=1, max_size=8),
    num_blocks=st.integers(4, 40),
    block_size=st.sampled_from([1, 2, 4]),
)
def test_bulk_pool_matches_the_reference_when_looked_at_seldom(
    specs: list[tuple[int, int, int | None, int]],
    plan: list[tuple[str, int, int, bool]],
    looks: list[bool],
    num_blocks: int,
    block_size: int,
) -> None:
    # Looking settles the inline allocations; the engine looks only when it
    # allocates or frees, so several inline allocations, admissions and frees
    # run between two looks here, as they do in the simulator.
    fast, slow = twins(specs, num_blocks, block_size)
    for i, (kind, index, chunk, inline) in enumerate(plan):
        if kind == "step" and inline and fast.running:
            # As the engine: inline (by count) only a request the pool lets grow so; one
            # still filling shareable blocks allocates through the pool (try_grow).
            inline = grows_by_count(fast.pool, fast.running[index % len(fast.running)])
        act(fast, (kind, index, chunk, inline))
        act(slow, (kind, index, chunk, inline))
        if looks[i % len(looks)]:
            assert state(fast) == state(slow)
    assert state(fast) == state(slow)


def test_a_plain_admission_takes_its_blocks_after_those_allocated_inline() -> None:
    # One pop settles the inline growth and allocates: the head to the grown request.
    pool = PrefixCachingPool(num_blocks=8, block_size_tokens=2)
    grown, fresh = Request(0, 0.0, 4, 4), Request(1, 0.0, 4, 4)
    pool.allocate(grown, 4)  # blocks 0, 1
    pool.num_free_blocks -= 1  # inline, as EngineCore._commit_run: a third block
    grown.num_blocks += 1
    assert pool.num_cached_tokens(fresh) == 0 and pool.can_allocate(fresh, 4)
    pool.allocate(fresh, 4)
    assert block_ids(pool, fresh) == [3, 4] and block_ids(pool, grown) == [0, 1, 2]
    assert pool.num_free_blocks == 3 and free_queue(pool) == [5, 6, 7]
    grown.num_generated_tokens = grown.num_output_tokens  # finished: freed tail first
    pool.free(grown)
    assert free_queue(pool) == [5, 6, 7, 2, 1, 0] and num_cached_blocks(pool) == 0


def test_a_plain_request_freed_unfinished_hits_its_own_blocks_on_return() -> None:
    pool = PrefixCachingPool(num_blocks=8, block_size_tokens=2)
    request = Request(0, 0.0, 5, 4)
    pool.allocate(request, 5)  # 3 blocks: 0, 1, 2
    request.num_computed_tokens = 5
    pool.free(request)  # preempted: its 2 full blocks keep their own keys
    request.num_computed_tokens = 0
    assert pool.num_cached_tokens(request) == 4 and num_evictable_blocks(pool) == 2
    assert pool.num_missing_blocks(request, 5) == 3  # 1 new, 2 revived from the queue
    pool.allocate(request, 5)
    assert block_ids(pool, request) == [0, 1, 3] and pool.num_free_blocks == 5


# -- the queue itself, traced by hand ----------------------------------------------
def test_pops_come_from_the_head_and_pushes_go_to_the_tail() -> None:
    queue = FreeQueue(range(5))
    assert queue.pop(2) == ([0, 1], [])
    queue.extend([7, 6])
    assert queue.size == 5 and queue_blocks(queue) == [2, 3, 4, 7, 6]
    assert queue.pop(4) == ([2, 3, 4, 7], [])
    assert queue_blocks(queue) == [6]


def test_a_removed_keyed_block_is_skipped_and_keyed_pops_are_reported() -> None:
    queue = FreeQueue([0, 1])
    queue.append_keyed(5)
    queue.append_keyed(6)
    queue.extend([2])
    assert len(queue._keyed_at) == 2 and queue.size == 5
    queue.remove(5)  # a hit took it
    assert queue_blocks(queue) == [0, 1, 6, 2] and queue.size == 4 and len(queue._keyed_at) == 1
    assert queue.pop(3) == ([0, 1, 6], [6])
    assert len(queue._keyed_at) == 0 and queue_blocks(queue) == [2]


def test_a_block_freed_again_after_a_hit_is_live_only_at_its_new_place() -> None:
    queue = FreeQueue([])
    queue.append_keyed(3)
    queue.extend([1])
    queue.remove(3)  # hit ...
    queue.append_keyed(3)  # ... then freed again: at the tail now
    assert queue_blocks(queue) == [1, 3]
    assert queue.pop(1) == ([1], [])
    assert queue.pop(1) == ([3], [3])
    assert queue.size == 0


def test_popping_more_than_is_free_is_an_error() -> None:
    queue = FreeQueue(range(3))
    with pytest.raises(RuntimeError, match="popped 3 of 4"):
        queue.pop(4)
    keyed = FreeQueue([])
    keyed.append_keyed(0)
    with pytest.raises(RuntimeError, match="popped 1 of 2"):
        keyed.pop(2)


def test_positions_survive_trimming_the_consumed_head() -> None:
    # Many pops trim the list's consumed head; keyed positions are absolute.
    queue = FreeQueue(range(10_000))
    queue.append_keyed(20_000)
    queue.append_keyed(20_001)
    for _ in range(9):
        queue.pop(1_000)
    queue.remove(20_000)
    assert queue.size == 1_001 and len(queue._keyed_at) == 1
    popped, keyed = queue.pop(1_001)
    assert popped == [*range(9_000, 10_000), 20_001] and keyed == [20_001]
    assert queue.size == 0 and queue_blocks(queue) == []


# -- try_grow: the running loop's block crossing ---------------------------------
def test_try_grow_counts_blocks_and_refuses_without_changing_anything() -> None:
    pool = BlockPool(num_blocks=4, block_size_tokens=4)
    request = Request(0, 0.0, 8, 8)
    pool.allocate(request, 8)  # 2 blocks
    assert pool.try_grow(request, 8) and pool.num_free_blocks == 2  # nothing short
    assert pool.try_grow(request, 9)  # 9 tokens: a third block
    assert (request.num_blocks, pool.num_free_blocks) == (3, 1)
    assert not pool.try_grow(request, 17)  # 5 blocks: 2 short, 1 free
    assert (request.num_blocks, pool.num_free_blocks) == (3, 1)


def test_prefix_pool_try_grow_is_lazy_for_own_blocks_and_eager_for_shared_ones() -> None:
    pool = PrefixCachingPool(num_blocks=8, block_size_tokens=2)
    own = Request(0, 0.0, 4, 4)
    pool.allocate(own, 4)
    assert pool.try_grow(own, 5)
    assert own.num_blocks == 3 and pool.num_free_blocks == 5
    assert num_loose_blocks(pool) == 1  # realised when next looked at
    assert block_ids(pool, own) == [0, 1, 2] and num_loose_blocks(pool) == 0
    shared = Request(1, 0.0, 6, 2)
    shared.prefix_group, shared.num_shared_prefix_tokens = 0, 6
    pool.allocate(shared, 2)  # its first block is full: cached at once
    assert pool.try_grow(shared, 4)  # eager: the block it fills is cached in this step
    keys = [block_key(pool, b) for b in block_ids(pool, shared)]
    assert keys == [("group", 0, 0), ("group", 0, 1)]
    assert pool.num_free_blocks == 3
    assert not pool.try_grow(shared, 12)  # 6 blocks: 4 short, 3 free
    assert shared.num_blocks == 2 and pool.num_free_blocks == 3


class ListQueue:
    """The free queue as vLLM keeps it, a plain list (head first): the reference."""

    def __init__(self, blocks: list[int]) -> None:
        self.items: list[tuple[int, bool]] = [(b, False) for b in blocks]  # (block, keyed)

    def extend(self, blocks: list[int]) -> None:
        self.items += [(b, False) for b in blocks]

    def append_keyed(self, block: int) -> None:
        self.items.append((block, True))

    def remove(self, block: int) -> None:
        self.items.remove((block, True))

    def pop(self, count: int) -> tuple[list[int], list[int]]:
        taken, self.items = self.items[:count], self.items[count:]
        return [b for b, _ in taken], [b for b, keyed in taken if keyed]


queue_ops = st.lists(
    st.one_of(
        st.tuples(st.just("extend"), st.integers(0, 6)),
        st.tuples(st.just("keyed"), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, 50)),
        st.tuples(st.just("pop"), st.integers(0, 12)),
    ),
    max_size=80,
)


@SETTINGS
@given(ops=queue_ops, start=st.integers(0, 10))
def test_the_free_queue_pops_what_a_plain_list_would(
    ops: list[tuple[str, int]], start: int
) -> None:
    """Random pushes (plain and keyed), hits taking keyed blocks out, and pops: the
    same blocks, keyed ones reported, as a list; the queue trims itself without
    losing its place (after 4 entries here, instead of 4096)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kv_blocks, "_TRIM_ENTRIES", 4)
        play(ops, FreeQueue(range(start)), ListQueue(list(range(start))), start)


def play(ops: list[tuple[str, int]], queue: FreeQueue, reference: ListQueue, start: int) -> None:
    """Apply ``ops`` to both queues, checking they agree after each."""
    next_block = start
    for op, n in ops:
        if op == "extend":
            blocks = list(range(next_block, next_block + n))
            next_block += n
            queue.extend(blocks)
            reference.extend(blocks)
        elif op == "keyed":
            for block in range(next_block, next_block + n):
                queue.append_keyed(block)
                reference.append_keyed(block)
            next_block += n
        elif op == "remove":
            keyed = [b for b, k in reference.items if k]
            if keyed:
                block = keyed[n % len(keyed)]
                queue.remove(block)
                reference.remove(block)
        else:
            count = min(n, len(reference.items))
            assert queue.pop(count) == reference.pop(count)
        assert queue_blocks(queue) == [b for b, _ in reference.items]
        assert queue.size == len(reference.items)
        assert len(queue._keyed_at) == sum(k for _, k in reference.items)


def test_a_keyed_block_popped_then_pushed_plain_is_not_reported_keyed() -> None:
    queue = FreeQueue([0])
    queue.append_keyed(1)
    queue.extend([2])
    assert queue.pop(2) == ([0, 1], [1])
    queue.extend([1])  # freed again by a request that did not key it
    assert queue.pop(2) == ([2, 1], [])
