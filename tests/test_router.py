"""Routers: plain choices from replica loads, checked without a simulation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.request import Request
from sim.serving.router import (
    LeastOutstandingRequests,
    LeastOutstandingTokens,
    PowerOfTwo,
    PrefixAffinity,
    ReplicaLoad,
    RoundRobin,
    make_router,
    mix64,
)


def request(request_id: int = 0, prompt: int = 10, output: int = 5) -> Request:
    return Request(request_id, 0.0, prompt, output)


def loads(*pairs: tuple[int, int]) -> list[ReplicaLoad]:
    return [ReplicaLoad(num_requests=n, num_tokens=t) for n, t in pairs]


def test_round_robin_cycles_in_order_whatever_the_load() -> None:
    router = RoundRobin()
    state = loads((9, 900), (0, 0), (5, 5))
    assert [router.choose(request(i), state) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_requests_picks_the_emptiest() -> None:
    router = LeastOutstandingRequests()
    assert router.choose(request(), loads((3, 10), (1, 9000), (2, 1))) == 1


def test_least_outstanding_requests_breaks_ties_by_lowest_index() -> None:
    assert LeastOutstandingRequests().choose(request(), loads((2, 1), (1, 5), (1, 3))) == 1


def test_least_outstanding_tokens_picks_the_fewest_tokens() -> None:
    router = LeastOutstandingTokens()
    assert router.choose(request(), loads((1, 5000), (4, 100), (2, 800))) == 1
    # Equal tokens: fewer requests wins.
    assert router.choose(request(), loads((3, 100), (2, 100))) == 1


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10_000)), min_size=1, max_size=8))
def test_least_outstanding_routers_choose_a_minimum(pairs: list[tuple[int, int]]) -> None:
    state = loads(*pairs)
    by_requests = LeastOutstandingRequests().choose(request(), state)
    by_tokens = LeastOutstandingTokens().choose(request(), state)
    assert state[by_requests].num_requests == min(n for n, _ in pairs)
    assert state[by_tokens].num_tokens == min(t for _, t in pairs)


def choices(seed: int, num: int = 200) -> list[int]:
    router = PowerOfTwo(np.random.default_rng(seed))
    state = loads((2, 0), (0, 0), (1, 0), (3, 0), (0, 0))
    return [router.choose(request(i), state) for i in range(num)]


def test_power_of_two_is_deterministic_for_a_seed() -> None:
    assert choices(7) == choices(7)
    assert choices(7) != choices(8)


def test_power_of_two_never_picks_the_busier_of_its_pair() -> None:
    # Replica 3 (3 outstanding) is the busiest: it loses every pair it is drawn into,
    # so it is never chosen; the two empty replicas win most draws.
    picked = choices(3, 500)
    assert 3 not in picked
    counts = np.bincount(picked, minlength=5)
    assert counts[1] + counts[4] > counts[0] + counts[2]


def test_power_of_two_with_one_replica_draws_nothing() -> None:
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert PowerOfTwo(rng).choose(request(), loads((5, 5))) == 0
    assert rng.bit_generator.state == before


@settings(max_examples=50)
@given(st.integers(0, 2**40), st.integers(1, 16))
def test_prefix_affinity_sends_a_group_to_one_replica(group: int, num_replicas: int) -> None:
    router = PrefixAffinity()
    first = request(0)
    first.prefix_group = group
    other = request(1, prompt=999)
    other.prefix_group = group
    busy = loads(*[(i * 3, i) for i in range(num_replicas)])
    idle = loads(*[(0, 0)] * num_replicas)
    chosen = router.choose(first, busy)
    assert chosen == router.choose(other, idle) == mix64(group) % num_replicas
    assert 0 <= chosen < num_replicas


def test_prefix_affinity_spreads_groups_and_falls_back_without_one() -> None:
    router = PrefixAffinity()
    state = loads(*[(0, 0)] * 4)
    picks = []
    for group in range(400):
        r = request(group)
        r.prefix_group = group
        picks.append(router.choose(r, state))
    assert np.bincount(picks, minlength=4).min() > 60  # ~100 each
    assert router.choose(request(), loads((4, 0), (2, 0), (1, 0), (3, 0))) == 2


def test_mix64_is_a_fixed_function() -> None:
    assert mix64(0) == mix64(0) != mix64(1)
    assert 0 <= mix64(2**63) < 2**64


@pytest.mark.parametrize(
    ("kind", "cls"),
    [
        ("round_robin", RoundRobin),
        ("least_outstanding_requests", LeastOutstandingRequests),
        ("least_outstanding_tokens", LeastOutstandingTokens),
        ("power_of_two", PowerOfTwo),
        ("prefix_affinity", PrefixAffinity),
        ("central_queue", LeastOutstandingRequests),
    ],
)
def test_make_router_builds_each_kind(kind: str, cls: type) -> None:
    assert isinstance(make_router(kind, np.random.default_rng(0)), cls)  # type: ignore[arg-type]


def test_make_router_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown router"):
        make_router("random", np.random.default_rng(0))  # type: ignore[arg-type]
