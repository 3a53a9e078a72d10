"""Power-of-two choices on equal loads: the first replica drawn wins (the docstring's promise).

``test_router.py``'s loads are all different where it matters, so a tie going to
the second draw would pass there. Here every pair is a tie, and the expected
replica is read off a twin generator (the same seed, the same ``choice`` call).
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.request import Request
from sim.serving.router import PowerOfTwo, ReplicaLoad


@pytest.mark.parametrize("num_replicas", [2, 3, 8])
def test_equal_loads_go_to_the_first_replica_drawn(num_replicas: int) -> None:
    router = PowerOfTwo(np.random.default_rng(11))
    twin = np.random.default_rng(11)
    loads = [ReplicaLoad(num_requests=4, num_tokens=100 * i) for i in range(num_replicas)]
    for i in range(50):
        first, second = (int(x) for x in twin.choice(num_replicas, size=2, replace=False))
        assert first != second
        assert router.choose(Request(i, 0.0, 10, 5), loads) == first


def test_a_tie_between_the_drawn_pair_ignores_the_others() -> None:
    # Replicas 0 and 1 tie at 3; replica 2 is idle. Whenever the pair is {0, 1} the
    # first drawn wins; a pair containing 2 picks 2.
    router = PowerOfTwo(np.random.default_rng(5))
    twin = np.random.default_rng(5)
    loads = [ReplicaLoad(3, 0), ReplicaLoad(3, 0), ReplicaLoad(0, 0)]
    ties = 0
    for i in range(60):
        first, second = (int(x) for x in twin.choice(3, size=2, replace=False))
        expected = 2 if 2 in (first, second) else first
        ties += expected != 2
        assert router.choose(Request(i, 0.0, 10, 5), loads) == expected
    assert ties > 5  # the tie case was exercised
