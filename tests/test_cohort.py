"""The decode cohort's bookkeeping (``sim.fast.cohort``), traced by hand.

A member joins with its counters as of step ``j`` and is not touched until it
leaves; these tests check the aggregates the policy and the commit read
instead (context, block crossings, first finish) against the per-request
arithmetic, and that leaving brings the counters to what per-step commits
would have made them. Whole runs with and without the cohort are compared in
``tests/properties/test_cohort_equivalence.py``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.policies import ContinuousConfig
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, StepPlan, steps_within_pool
from sim.fast.cohort import Cohort, CohortCore, CohortPlan

BLOCK = 4  # tokens per KV block in these tests


def decoder(
    request_id: int, prompt: int, generated: int, output: int, last_step: int = 9
) -> Request:
    """A steady decoder before step ``last_step + 1``: every token but the newest computed."""
    request = Request(request_id, 0.0, prompt, output)
    request.num_generated_tokens = generated
    request.num_computed_tokens = prompt + generated - 1
    request.num_blocks = -(-request.num_computed_tokens // BLOCK)
    request.first_token_s = 0.5
    request.last_token_step = last_step
    request.last_token_s = 1.0
    return request


# -- aggregates ------------------------------------------------------------------


def test_join_counts_context_and_crossings() -> None:
    cohort = Cohort(BLOCK)
    a = decoder(1, prompt=6, generated=1, output=10)  # 6 computed before step 10
    b = decoder(2, prompt=4, generated=2, output=3)  # 5 computed before step 10
    cohort.join(a, 10)
    cohort.join(b, 10)
    assert cohort.num_members == 2
    assert cohort._joined.get(a) == cohort._joined.get(b) == 10
    # Step 10 computes token 7 of a and 6 of b; step 11, tokens 8 and 7.
    assert cohort.context_tokens(10) == 6 + 5
    assert cohort.context_tokens(11) == 7 + 6
    # a computes its 9th token (a new block: 8 fill two) in step 12, b in step 13.
    assert [cohort.num_crossing(t) for t in range(10, 15)] == [0, 0, 1, 1, 0]
    assert cohort.num_crossing_between(10, 4) == 2
    # b emits its 3rd and last token in step 10: generated 2 -> 3.
    assert cohort.first_finish_step() == 10
    assert cohort.leave_finishing(11, [a, b], 9.0) == []  # nobody's last token in 11
    assert cohort.leave_finishing(10, [a, b], 9.0) == [b]
    # a: 10 - 1 = 9 tokens to go, the last in step 18.
    assert cohort.first_finish_step() == 18


@settings(max_examples=200, deadline=None)
@given(
    computed=st.lists(st.integers(1, 60), min_size=1, max_size=8),
    joined=st.lists(st.integers(0, 20), min_size=8, max_size=8),
    first=st.integers(20, 40),
    num_steps=st.integers(0, 30),
    block=st.sampled_from([1, 2, 4, 16]),
)
def test_crossings_match_the_per_request_rule(
    computed: list[int], joined: list[int], first: int, num_steps: int, block: int
) -> None:
    """A member needs a block in step t iff it computes a token past its last block."""
    cohort = Cohort(block)
    members = []
    for i, c in enumerate(computed):
        request = Request(i, 0.0, c + 1, 10_000)
        request.num_computed_tokens = c
        request.num_generated_tokens = 1
        cohort.join(request, joined[i])
        members.append(request)

    def computed_before(request: Request, step: int) -> int:
        joined_at = cohort._joined.get(request)
        assert joined_at is not None
        return request.num_computed_tokens + step - joined_at

    def needs_block(request: Request, step: int) -> bool:
        c = computed_before(request, step)  # this step computes token c + 1
        return c + 1 > -(-c // block) * block

    for t in range(first, first + num_steps):
        assert cohort.num_crossing(t) == sum(needs_block(r, t) for r in members)
        assert cohort.context_tokens(t) == sum(computed_before(r, t) for r in members)
    expected = sum(needs_block(r, t) for r in members for t in range(first, first + num_steps))
    assert cohort.num_crossing_between(first, num_steps) == expected


# -- leaving -----------------------------------------------------------------------


def test_catch_up_gives_the_counters_per_step_commits_would() -> None:
    cohort = Cohort(BLOCK)
    request = decoder(1, prompt=6, generated=1, output=10)  # 6 computed, 2 blocks
    cohort.join(request, 10)
    cohort.catch_up(request, 13, 2.5)  # steps 10, 11, 12 ran; 12 ended at 2.5 s
    assert cohort._joined.get(request) is None
    assert request.num_computed_tokens == 9
    assert request.num_generated_tokens == 4
    assert request.num_blocks == 3  # 9 tokens in blocks of 4
    assert request.last_token_step == 12
    assert request.last_token_s == 2.5
    assert cohort.num_members == 0
    assert cohort.context_tokens(20) == 0
    assert cohort.num_crossing_between(0, 16) == 0


def test_catch_up_in_the_step_it_joined_changes_nothing() -> None:
    cohort = Cohort(BLOCK)
    request = decoder(1, prompt=6, generated=1, output=10, last_step=9)
    cohort.join(request, 10)
    cohort.catch_up(request, 10, 99.0)
    assert (request.num_computed_tokens, request.num_generated_tokens) == (6, 1)
    assert (request.last_token_step, request.last_token_s) == (9, 1.0)


def test_leave_finishing_in_running_order() -> None:
    cohort = Cohort(BLOCK)
    a = decoder(1, prompt=4, generated=1, output=3)  # last token in step 11
    b = decoder(2, prompt=4, generated=2, output=4)  # last token in step 11
    c = decoder(3, prompt=4, generated=1, output=9)
    running = [b, c, a]  # b was admitted first
    for request in (a, c, b):  # joined in another order
        cohort.join(request, 10)
    assert cohort.leave_finishing(10, running, 1.5) == []
    assert cohort.leave_finishing(11, running, 2.0) == [b, a]
    for request in (a, b):
        assert request.num_generated_tokens == request.num_output_tokens
        assert request.last_token_s == 2.0
        assert request.last_token_step == 11
        assert cohort._joined.get(request) is None
    assert cohort.num_members == 1
    assert cohort.first_finish_step() == 10 + 9 - 1 - 1


def test_dissolve_lets_everyone_go_up_to_date() -> None:
    cohort = Cohort(BLOCK)
    a = decoder(1, prompt=4, generated=1, output=30)
    b = decoder(2, prompt=9, generated=3, output=30)
    cohort.join(a, 10)
    cohort.join(b, 12)
    outsider = decoder(3, prompt=4, generated=1, output=30)
    cohort.dissolve([a, outsider, b], 15, 7.0)
    assert cohort.num_members == 0
    assert cohort.first_finish_step() is None
    assert (a.num_generated_tokens, b.num_generated_tokens) == (1 + 5, 3 + 3)
    assert a.last_token_s == b.last_token_s == 7.0
    assert (outsider.num_generated_tokens, outsider.last_token_s) == (1, 1.0)


# -- who joins -----------------------------------------------------------------------


def test_join_steady_takes_only_steady_decoders() -> None:
    cohort = Cohort(BLOCK)
    kv = BlockPool(100, BLOCK)
    steady = decoder(1, prompt=6, generated=1, output=10)
    prefilling = Request(2, 0.0, 10, 5)
    prefilling.num_computed_tokens = 8  # a chunk: not caught up
    prefilling.num_blocks = 2
    prefilling.last_token_step = None
    finished = decoder(3, prompt=6, generated=10, output=10)
    finished.finish_s = 1.0
    late = decoder(4, prompt=6, generated=2, output=10, last_step=7)  # did not emit in 9
    extra = decoder(5, prompt=6, generated=2, output=10)
    extra.num_blocks += 1  # holds more blocks than its tokens need
    listed = [(r, 1) for r in (steady, prefilling, finished, late, extra)]
    cohort.join_steady(listed, kv, 10)
    assert cohort.num_members == 1
    assert cohort._joined.get(steady) == 10
    assert all(cohort._joined.get(r) is None for r, _ in listed[1:])


def test_a_request_still_filling_shared_blocks_stays_outside() -> None:
    """With prefix caching, a request whose shareable blocks are not all full must
    cache them as it fills them, so it is visited each step (``grows_by_count``)."""
    kv = PrefixCachingPool(100, BLOCK)
    request = Request(1, 0.0, 10, 10, prefix_group=0, num_shared_prefix_tokens=12)
    kv.allocate(request, 6)  # a chunk of 6: shared block 1 (tokens 5-8) not full yet
    request.num_computed_tokens = 6
    request.num_generated_tokens = 1
    request.last_token_step = 9
    assert not kv.grows_by_count(request)
    cohort = Cohort(BLOCK)
    cohort.join_steady([(request, 6)], kv, 10)
    assert cohort.num_members == 0
    plain = Request(2, 0.0, 6, 10)
    kv.allocate(plain, 6)
    assert kv.grows_by_count(plain)
    assert not kv.grows_by_count(Request(3, 0.0, 6, 10))  # holds no blocks


# -- the plan and the run length --------------------------------------------------------


def test_a_plan_of_members_only_is_not_empty() -> None:
    assert StepPlan([]).is_empty
    assert not CohortPlan([], num_cohort=3).is_empty


@settings(max_examples=150, deadline=None)
@given(
    computed=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    listed=st.lists(st.integers(1, 40), max_size=4),
    free=st.integers(0, 30),
    num_steps=st.integers(1, 40),
)
def test_steps_within_pool_counts_members_like_listed_requests(
    computed: list[int], listed: list[int], free: int, num_steps: int
) -> None:
    """The same decoders listed one by one or kept in a cohort fit the same run."""
    step = 10

    def make(i: int, c: int) -> Request:
        # Before step 10: c computed; this step's block already reserved.
        request = Request(i, 0.0, c + 1, 10_000)
        request.num_computed_tokens = c
        request.num_generated_tokens = 1
        request.num_blocks = -(-(c + 1) // BLOCK)
        return request

    others = [(make(100 + i, c), 1) for i, c in enumerate(listed)]
    as_listed = [(make(i, c), 1) for i, c in enumerate(computed)]
    kv = BlockPool(10_000, BLOCK)
    kv.num_free_blocks = free
    expected = steps_within_pool(kv, others + as_listed, num_steps)
    cohort = Cohort(BLOCK)
    for i, c in enumerate(computed):
        cohort.join(make(i, c), step)
    members = cohort.num_members
    fit = steps_within_pool(
        kv, others, num_steps, members, lambda k: cohort.num_crossing_between(step + 1, k)
    )
    assert fit == expected


# -- the engine core ------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.num_listed: list[int] = []

    def on_commit(
        self, core: EngineCore, plan: StepPlan, start_s: float, ends_s: list[float]
    ) -> None:
        self.num_listed.append(len(plan.scheduled))


def test_a_recorder_sees_every_request_the_cohort_is_dropped() -> None:
    core = CohortCore(ContinuousConfig().build(), BlockPool(100, BLOCK), 1000)
    a, b = Request(1, 0.0, 3, 20), Request(2, 0.0, 3, 20)
    core.add(a, 0.0)
    core.add(b, 0.0)
    plan = core.schedule(0.0)
    core.commit(plan, 0.0, [1.0])  # both prefill and emit: both join
    assert core.cohort is not None and core.cohort.num_members == 2
    plan = core.schedule(1.0)
    assert isinstance(plan, CohortPlan)
    assert plan.num_cohort == 2 and plan.scheduled == []
    core.commit(plan, 1.0, [2.0])
    recorder = Recorder()
    core.recorder = recorder
    plan = core.schedule(2.0)
    assert core.cohort is None
    assert not isinstance(plan, CohortPlan)
    core.commit(plan, 2.0, [3.0])
    assert recorder.num_listed == [2]
    # Prefill (3 computed, 1 generated), a member's step (4, 2), caught up at the
    # dissolve, then one more step as themselves (5, 3).
    assert [(r.num_computed_tokens, r.num_generated_tokens) for r in (a, b)] == [(5, 3)] * 2


def test_flush_catches_members_up_before_recording_them() -> None:
    core = CohortCore(ContinuousConfig().build(), BlockPool(100, BLOCK), 1000)
    request = Request(1, 0.0, 3, 20)
    core.add(request, 0.0)
    core.commit(core.schedule(0.0), 0.0, [1.0])
    for k in range(1, 4):
        core.commit(core.schedule(float(k)), float(k), [k + 1.0])
    core.flush_unfinished()
    assert request.num_generated_tokens == 4
    assert core.kv.num_free_blocks == 100
    assert core.records.views()["num_generated_tokens"][0] == 4


# -- the batch's spread (longest and shortest context) ------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.integers(1, 60)),  # computed tokens at joining
        st.tuples(st.just("leave"), st.integers(0, 10_000)),  # which member (modulo)
        st.tuples(st.just("advance"), st.integers(1, 5)),  # steps
        st.tuples(st.just("dissolve"), st.just(0)),
    ),
    max_size=400,
)


@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_the_longest_and_shortest_member_match_a_brute_force_scan(
    ops: list[tuple[str, int]],
) -> None:
    """Under joins, departures (one by one or all at once) and steps, the cohort's
    longest and shortest context is the max and min over its members' own."""
    cohort = Cohort(BLOCK)
    members: list[Request] = []
    step = 10
    for i, (op, value) in enumerate(ops):
        if op == "join":
            request = Request(i, 0.0, value + 1, 10_000)
            request.num_computed_tokens = value
            cohort.join(request, step)
            members.append(request)
        elif op == "leave" and members:
            request = members.pop(value % len(members))
            cohort.catch_up(request, step, 1.0)
        elif op == "advance":
            step += value
        elif op == "dissolve":
            cohort.dissolve(members, step, 1.0)
            members = []
        # A member's computed tokens before ``step``: as it joined, one more a step since.
        contexts = [r.num_computed_tokens + step - cohort._joined[r] for r in members]
        assert cohort.max_context_tokens(step) == max(contexts, default=0)
        assert cohort.min_context_tokens(step) == min(contexts, default=0)


def test_the_spread_survives_rebuilding_heaps_of_mostly_departed_offsets() -> None:
    cohort = Cohort(BLOCK)
    joined = []
    for i in range(300):  # distinct offsets, most of them gone again
        request = Request(i, 0.0, i + 2, 10_000)
        request.num_computed_tokens = i + 1
        cohort.join(request, 0)
        joined.append(request)
        if i % 10:
            cohort.catch_up(joined.pop(), 0, 1.0)
    assert len(cohort._low_offsets) <= 2 * len(cohort._offset_counts) + 65  # rebuilt
    contexts = [r.num_computed_tokens for r in joined]
    assert (cohort.max_context_tokens(3), cohort.min_context_tokens(3)) == (
        max(contexts) + 3,
        min(contexts) + 3,
    )
