"""Properties of the prefix-caching pool under random use (hypothesis).

A small driver plays the continuous policy and the core against a pool: admit
the head of the queue (taking its cache hit), compute chunks and decodes
(allocating through the pool, or inline as ``sim.fast.decode_runs.commit_run`` does),
preempt by recompute, finish. After every action: blocks are conserved (each
block is held by requests or in the free queue, never both; the free queue is
the free count; reference counts match holders), and a hit is whole blocks and
never all of a request's tokens. Without shared prefixes and preemption the
caching pool counts exactly as the plain pool.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pool_state import (
    block_ids,
    block_keys,
    block_ref_count,
    free_queue,
    held_keys,
    num_loose_blocks,
)

from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.request import Request

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Driver:
    """Waiting and running requests over one pool, moved by ``act``."""

    pool: BlockPool
    waiting: list[Request]
    running: list[Request] = field(default_factory=list)
    num_hit_tokens: int = 0

    def admit(self, chunk: int) -> None:
        if not self.waiting:
            return
        request = self.waiting[0]
        cached = self.pool.num_cached_tokens(request)
        size = self.pool.block_size_tokens
        assert cached % size == 0
        assert cached <= request.num_tokens - 1, "a hit leaves at least one token to compute"
        num_new = min(chunk, request.num_wanted_tokens - cached)
        target = request.num_computed_tokens + cached + num_new
        if not self.pool.can_allocate(request, target):
            return
        self.waiting.pop(0)
        self.pool.allocate(request, target)
        request.num_computed_tokens += cached
        self.num_hit_tokens += cached
        self.running.append(request)
        self.commit(request, num_new)

    def step(self, index: int, chunk: int, inline: bool) -> None:
        if not self.running:
            return
        request = self.running[index % len(self.running)]
        num_new = min(chunk, request.num_wanted_tokens)
        target = request.num_computed_tokens + num_new
        short = self.pool.blocks_for(target) - request.num_blocks
        if short > 0:
            if not self.pool.can_allocate(request, target):
                return
            if inline:  # as sim.fast.decode_runs.commit_run: counts only
                self.pool.num_free_blocks -= short
                request.num_blocks += short
            else:
                self.pool.allocate(request, target)
        self.commit(request, num_new)

    def commit(self, request: Request, num_new: int) -> None:
        request.num_computed_tokens += num_new
        if request.num_computed_tokens == request.num_tokens:
            request.num_generated_tokens += 1
            if request.num_generated_tokens == request.num_output_tokens:
                self.running.remove(request)
                self.pool.free(request)

    def preempt(self, index: int) -> None:
        if not self.running:
            return
        request = self.running.pop(index % len(self.running))
        self.pool.free(request)
        request.num_computed_tokens = 0
        self.waiting.insert(0, request)


def check_conserved(pool: PrefixCachingPool, running: list[Request]) -> None:
    queue = free_queue(pool)
    assert len(queue) == pool.num_free_blocks
    holders: Counter[int] = Counter()
    for r in running:
        ids = block_ids(pool, r)
        assert len(ids) == r.num_blocks == len(set(ids))
        holders.update(ids)
        held = held_keys(pool, r)
        assert held == block_keys(pool, r, len(held))
    assert num_loose_blocks(pool) == 0
    assert not set(holders) & set(queue)
    assert len(holders) + len(queue) == pool.num_blocks
    assert all(block_ref_count(pool, b) == n for b, n in holders.items())
    assert all(block_ref_count(pool, b) == 0 for b in queue)
    assert pool.num_blocks - pool.num_free_blocks == len(holders)


@st.composite
def requests(draw: st.DrawFn, grouped: bool) -> list[Request]:
    num = draw(st.integers(1, 8))
    out = []
    for i in range(num):
        request = Request(i, 0.0, draw(st.integers(1, 30)), draw(st.integers(1, 12)))
        if grouped and draw(st.booleans()):
            request.prefix_group = draw(st.integers(0, 1))
            request.num_shared_prefix_tokens = draw(st.integers(0, 30))
        out.append(request)
    return out


actions = st.lists(
    st.tuples(
        st.sampled_from(["admit", "step", "step", "step", "preempt"]),
        st.integers(0, 7),
        st.integers(1, 12),
        st.booleans(),
    ),
    max_size=80,
)


def act(driver: Driver, action: tuple[str, int, int, bool], preempt: bool = True) -> None:
    kind, index, chunk, inline = action
    if kind == "admit":
        driver.admit(chunk)
    elif kind == "step":
        driver.step(index, chunk, inline)
    elif preempt:
        driver.preempt(index)


@SETTINGS
@given(
    reqs=requests(grouped=True),
    plan=actions,
    num_blocks=st.integers(4, 30),
    block_size=st.sampled_from([1, 2, 4]),
)
def test_blocks_are_conserved_and_hits_leave_a_token(
    reqs: list[Request], plan: list[tuple[str, int, int, bool]], num_blocks: int, block_size: int
) -> None:
    pool = PrefixCachingPool(num_blocks, block_size)
    reqs = [r for r in reqs if pool.blocks_for(r.max_num_tokens) <= num_blocks]
    driver = Driver(pool, reqs)
    for action in plan:
        act(driver, action)
        check_conserved(pool, driver.running)
        assert all(r.num_blocks == 0 for r in driver.waiting)
    for request in [*driver.running]:
        pool.free(request)
    assert pool.num_free_blocks == num_blocks == len(free_queue(pool))


@SETTINGS
@given(
    reqs=requests(grouped=False),
    plan=actions,
    num_blocks=st.integers(4, 30),
    block_size=st.sampled_from([1, 2, 4]),
)
def test_without_prefixes_or_preemption_it_counts_as_the_plain_pool(
    reqs: list[Request], plan: list[tuple[str, int, int, bool]], num_blocks: int, block_size: int
) -> None:
    plain = BlockPool(num_blocks, block_size)
    reqs = [r for r in reqs if plain.blocks_for(r.max_num_tokens) <= num_blocks]
    copies = [Request(r.request_id, 0.0, r.num_prompt_tokens, r.num_output_tokens) for r in reqs]
    a = Driver(plain, reqs)
    b = Driver(PrefixCachingPool(num_blocks, block_size), copies)
    for action in plan:
        act(a, action, preempt=False)
        act(b, action, preempt=False)
        assert a.pool.num_free_blocks == b.pool.num_free_blocks
        assert [r.num_blocks for r in a.running] == [r.num_blocks for r in b.running]
        assert [r.num_computed_tokens for r in a.running] == [
            r.num_computed_tokens for r in b.running
        ]
    assert b.num_hit_tokens == 0


@SETTINGS
@given(reqs=requests(grouped=False), plan=actions, block_size=st.sampled_from([1, 2, 4]))
def test_a_preempted_request_hits_only_its_own_blocks(
    reqs: list[Request], plan: list[tuple[str, int, int, bool]], block_size: int
) -> None:
    # A pool big enough never to evict: a readmitted request hits every full block
    # of what it had computed (at most all its tokens but one), a fresh one nothing.
    pool = PrefixCachingPool(400, block_size)
    driver = Driver(pool, reqs)
    computed: dict[int, int] = {}
    for action in plan:
        victim = None
        if action[0] == "preempt" and driver.running:
            victim = driver.running[action[1] % len(driver.running)]
            computed[victim.request_id] = victim.num_computed_tokens
        act(driver, action)
        if victim is not None:
            whole = min(computed[victim.request_id], victim.num_tokens - 1) // block_size
            assert pool.num_cached_tokens(victim) == whole * block_size
    for r in driver.waiting:
        if r.request_id not in computed:
            assert pool.num_cached_tokens(r) == 0
