"""``servesim measure`` and ``serve`` run one replica in this process: a scenario's
``cluster:`` section (replicas, a router, lockstep ranks, disaggregation) is refused
by both, from the one place that says what the reference engine cannot run."""

from __future__ import annotations

import pytest

from sim.api import core_config_for, reference_engine_problem
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict

DOC = {
    "model": "tiny",
    "hardware": "cpu-2core",
    "cost": {"kind": "roofline"},
    "engine": {"enable_prefix_caching": False, "num_kv_blocks": 256},
    "workload": {
        "kind": "synthetic",
        "num_requests": 4,
        "arrival": {"kind": "poisson", "rate_per_s": 1.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 32},
        "output_tokens": {"kind": "fixed", "tokens": 8},
    },
}


@pytest.mark.parametrize(
    "cluster",
    [
        {"num_replicas": 2},
        {"num_replicas": 2, "lockstep": True},
        {
            "num_replicas": 2,
            "disaggregation": {"num_prefill_replicas": 1, "num_decode_replicas": 1},
        },
    ],
)
def test_the_reference_engine_refuses_a_cluster(cluster: dict[str, object]) -> None:
    # Two replicas serve twice one's load: measured on one engine, every queue would
    # be that of twice the load the scenario describes.
    scenario = scenario_from_dict({**DOC, "cluster": cluster})
    problem = reference_engine_problem(scenario)
    assert problem is not None and problem.startswith("cluster:")
    with pytest.raises(ConfigError, match=r"^cluster: .*one replica"):
        core_config_for(scenario, reference_engine=True)


def test_one_replica_is_still_run() -> None:
    assert reference_engine_problem(scenario_from_dict(DOC)) is None
