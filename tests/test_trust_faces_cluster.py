"""``cluster:`` settings that change nothing under the other settings are refused,
not silently dropped: ``central_queue_slots`` caps what a central queue hands each
replica, and any other router sends every request to a replica at once."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.scenario import scenario_from_dict

DOC = {
    "workload": {
        "kind": "synthetic",
        "num_requests": 10,
        "arrival": {"kind": "poisson", "rate_per_s": 1.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 32},
        "output_tokens": {"kind": "fixed", "tokens": 8},
    },
}


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding_requests", "power_of_two"])
def test_central_queue_slots_need_the_central_queue(router: str) -> None:
    cluster = {"num_replicas": 2, "router": router, "central_queue_slots": 1}
    with pytest.raises(ConfigError, match=r"cluster: central_queue_slots is router central_queue"):
        scenario_from_dict({**DOC, "cluster": cluster})


def test_central_queue_slots_with_the_central_queue() -> None:
    cluster = {"num_replicas": 2, "router": "central_queue", "central_queue_slots": 1}
    scenario = scenario_from_dict({**DOC, "cluster": cluster})
    assert scenario.cluster is not None and scenario.cluster.central_queue_slots == 1
