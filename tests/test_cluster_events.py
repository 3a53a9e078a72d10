"""A replica behind a router pays only for its own arrivals (flat cost in cluster size).

With several replicas, an arrival interrupts the one replica it is routed to;
the others run on (``Pool.set_horizon``). So replica 0 of a round-robin pair
makes exactly the plans (the sampled series: one row per plan) that one
replica serving only its requests makes, and a run of vLLM's defaults (async
scheduling, prefix caching) over many replicas is the same with skip-ahead
as step by step, bit for bit.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd
import pytest
from test_cluster import ROUTERS, cluster, make_engine, random_work

from sim import api
from sim.scenario import load_scenario
from sim.serving.router import RouterKind
from sim.serving.simulation import OpenLoop, Simulation
from sim.workload.generate import RequestArrays

REPLICAS = "scenarios/replicas.yaml"


def take(work: RequestArrays, rows: np.ndarray) -> RequestArrays:
    return RequestArrays(
        work.arrival_s[rows], work.num_prompt_tokens[rows], work.num_output_tokens[rows]
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_round_robin_replica_plans_as_if_it_served_its_requests_alone(seed: int) -> None:
    work = random_work(seed, num=200, rate_per_s=30.0)
    pair = Simulation(make_engine(max_num_seqs=4), cluster(2, "round_robin")).run(
        cast(OpenLoop, work)
    )
    mine = pair.requests["request_id"][pair.requests["replica"] == 0].to_numpy()
    assert len(mine) == 100  # round robin: every other request
    alone = Simulation(make_engine(max_num_seqs=4)).run(cast(OpenLoop, take(work, mine)))
    series = pair.timeseries[pair.timeseries["replica"] == 0].drop(columns="replica")
    pd.testing.assert_frame_equal(
        series.reset_index(drop=True), alone.timeseries.drop(columns="replica"), check_dtype=False
    )
    # And the same token times (request ids differ: renumber the lone run's).
    pair_rows = pair.requests.set_index("request_id").loc[mine]
    np.testing.assert_array_equal(
        pair_rows["finish_s"].to_numpy(), alone.requests["finish_s"].to_numpy()
    )


@pytest.mark.parametrize("router", ROUTERS)
def test_vllm_defaults_over_replicas_skip_ahead_equals_step_by_step(router: RouterKind) -> None:
    sets = [
        "workload.num_requests=400",
        "workload.arrival.rate_per_s=60",
        "cluster.num_replicas=6",
        f"cluster.router={router}",
    ]
    scenario = load_scenario(REPLICAS, sets)
    assert scenario.async_scheduling and scenario.engine.enable_prefix_caching
    fast = api.run(scenario).requests
    slow = api.run(load_scenario(REPLICAS, [*sets, "engine.skip_ahead=false"])).requests
    for column in ("replica", "first_token_s", "finish_s", "num_preemptions"):
        np.testing.assert_array_equal(fast[column].to_numpy(), slow[column].to_numpy())
