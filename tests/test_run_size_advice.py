"""A run too big for memory is told a fix it can follow, never "at most 0".

When the requests and the replicas together overflow memory, the refusal
names the larger of the two; if the other alone already fills memory, cutting
the named one to zero would not help either, so the advice names the other.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.scenario import load_scenario
from sim.workload.size import BASE_BYTES, BYTES_PER_REPLICA, BYTES_PER_REQUEST, check_run_size

CHAT = Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml"
MEMORY_BYTES = BASE_BYTES + 1000 * BYTES_PER_REQUEST  # room for 1000 requests, 1 replica


def _refusal(num_requests: int, num_replicas: int) -> str:
    workload = load_scenario(CHAT, [f"workload.num_requests={num_requests}"]).workload
    with pytest.raises(ConfigError) as error:
        check_run_size(workload, MEMORY_BYTES, num_replicas=num_replicas)
    return str(error.value)


def test_replicas_that_leave_no_room_for_requests_are_named() -> None:
    # 200 replicas: 199 beyond the base one, ~4.0 MB, more than the 3 MB spare;
    # the 2,000 requests (6 MB) are the larger part, yet none would fit.
    assert 199 * BYTES_PER_REPLICA > MEMORY_BYTES - BASE_BYTES
    message = _refusal(2000, 200)
    assert "at most 0" not in message
    assert "lower cluster.num_replicas" in message


def test_requests_that_leave_no_room_for_one_replica_are_named() -> None:
    # 1,500 requests (4.5 MB) overflow the 3 MB spare on their own; the
    # 1,000 replicas (20 MB) are the larger part, yet not one would fit.
    message = _refusal(1500, 1000)
    assert "at most 0" not in message
    assert "lower workload.num_requests" in message


def test_a_fix_that_fits_still_names_its_bound() -> None:
    # 3 MB spare - 10 requests (30 KB) = 2.97 MB: the base replica plus
    # floor(2.97 MB / 20 KB) = 148 more, 149 in all.
    assert "lower cluster.num_replicas to at most 149" in _refusal(10, 200)
