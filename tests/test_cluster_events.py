"""A replica behind a router pays only for its own arrivals (flat cost in cluster size).

With several replicas, an arrival interrupts the one replica it is routed to;
the others run on; a fresh round-robin pool's replicas each take their own
requests from a feed (``sim.fast.feed``) and end their runs at their own next
one. So replica 0 of a round-robin pair makes exactly the plans (the sampled
series: one row per plan) that one replica serving only its requests makes,
and a run of vLLM's defaults (async scheduling, prefix caching) over many
replicas is the same with skip-ahead as step by step, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import pandas as pd
import pytest
import simpy
from test_cluster import ROUTERS, cluster, make_engine, random_work

from sim import api
from sim.api.build import cluster_for, engine_for
from sim.engine.request import Request
from sim.fast.feed import FedReplica
from sim.fast.open_loop import FastSimulation
from sim.scenario import load_scenario
from sim.serving.disagg import Disaggregated
from sim.serving.pool import Pool
from sim.serving.router import ReplicaLoad, RoundRobin, RouterKind
from sim.serving.simulation import OpenLoop, Simulation
from sim.workload.generate import RequestArrays, SyntheticWorkload, generate_open_loop

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


# -- round robin: each replica knows when its next request comes --------------------


def test_round_robin_turns_before_a_replica() -> None:
    router = RoundRobin()
    loads = [ReplicaLoad() for _ in range(3)]
    # Next pick: replica 0. Replica 2 comes after 0 and 1.
    assert [router.num_turns_before(i, 3) for i in range(3)] == [0, 1, 2]
    assert router.choose(Request(0, 0.0, 1, 1), loads) == 0
    assert [router.num_turns_before(i, 3) for i in range(3)] == [2, 0, 1]
    router.choose(Request(1, 0.0, 1, 1), loads)
    router.choose(Request(2, 0.0, 1, 1), loads)
    assert [router.num_turns_before(i, 3) for i in range(3)] == [0, 1, 2]  # a full turn


def test_round_robin_replicas_read_their_own_next_submission() -> None:
    work = RequestArrays(np.array([0.5, 1.0, 2.0]), np.array([10, 10, 10]), np.array([5, 5, 5]))
    # The path users take (``api.run``): a fresh round-robin pair is fed, each
    # replica's horizon its own next submission; requests go 0, 1, 0.
    simulation = FastSimulation(make_engine(), cluster(2, "round_robin"), 1, False)
    layout = simulation.layout
    assert isinstance(layout, Pool)
    replicas = layout.replicas
    seen: list[tuple[float, int, float]] = []
    for index, core in enumerate(layout.cores):

        def spy(
            request: Request, now_s: float, index: int = index, add: Callable = core.add
        ) -> bool:
            # On taking a request, the replica's horizon reads its next one.
            replica = replicas[index]
            assert isinstance(replica, FedReplica)
            horizon = replica.horizon
            assert horizon is not None
            seen.append((now_s, index, horizon()))
            return bool(add(request, now_s))

        core.add = spy  # type: ignore[method-assign]
    simulation.run(cast(OpenLoop, work))
    inf = float("inf")
    assert seen == [(0.5, 0, 2.0), (1.0, 1, inf), (2.0, 0, inf)]


def count_interrupts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    interrupt = simpy.Process.interrupt

    def counting(self: simpy.Process, cause: object = None) -> None:
        count[0] += 1
        interrupt(self, cause)

    monkeypatch.setattr(simpy.Process, "interrupt", counting)
    return count


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding_requests"])
def test_round_robin_replicas_end_their_runs_at_their_own_arrivals(
    router: RouterKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round robin's picks are known in advance: no replica is interrupted. Other
    routers decide at the arrival, so a busy replica is interrupted by its own."""
    interrupts = count_interrupts(monkeypatch)
    work = random_work(3, num=300, rate_per_s=60.0)
    # The fast executor (the reference steps one by one), in this process.
    simulation = FastSimulation(make_engine(max_num_seqs=8), cluster(4, router), 1, False)
    simulation.run(cast(OpenLoop, work))
    horizons = [replica.horizon for replica in simulation.layout.replicas]  # type: ignore[union-attr]
    if router == "round_robin":
        assert all(horizon is not None for horizon in horizons)
        assert interrupts[0] == 0
    else:
        assert all(horizon is None for horizon in horizons)
        assert interrupts[0] > 50


def test_disaggregated_prefill_replicas_are_interrupted_not_told() -> None:
    """Not every submission reaches the prefill pool, so its replicas get no feed
    and no horizon (the fast executor plays disaggregation on the event path)."""
    scenario = load_scenario(
        "scenarios/disaggregated.yaml",
        [
            "workload.num_requests=50",
            "cluster.router=round_robin",
            "cluster.num_replicas=4",
            "cluster.disaggregation.num_prefill_replicas=2",
            "cluster.disaggregation.num_decode_replicas=2",
        ],
    )
    result = api.run(scenario)
    assert set(result.requests["replica"]) <= {0, 1, 2, 3}
    layout_cluster = cluster_for(scenario, np.random.default_rng(0))
    assert layout_cluster is not None
    simulation = FastSimulation(engine_for(scenario), layout_cluster, 1, False)
    layout = simulation.layout
    assert isinstance(layout, Disaggregated)
    assert isinstance(scenario.workload, SyntheticWorkload)
    work = generate_open_loop(scenario.workload, np.random.default_rng(0))
    simulation.run(cast(OpenLoop, work))
    prefill = layout.prefill.replicas
    assert all(isinstance(replica, FedReplica) and replica.feed is None for replica in prefill)
    assert all(replica.horizon is None for replica in prefill)


def test_back_to_back_steps_start_exactly_when_the_last_ended() -> None:
    """A step starts at the previous step's end to the bit, however the steps were
    grouped into timeouts (SimPy's clock, ``now + (end - now)``, may miss ``end``)."""
    # Early in a run (small clock values) a long run's timeout is the likeliest to miss.
    sets = [
        "workload.num_requests=60",
        "workload.arrival.rate_per_s=160",
        "cluster.num_replicas=16",
    ]
    for extra in ([], ["engine.skip_ahead=false"]):
        steps = api.run(load_scenario(REPLICAS, [*sets, *extra])).steps
        for _, own in steps.groupby("replica"):
            start = own["start_s"].to_numpy()[1:]
            end = own["end_s"].to_numpy()[:-1]
            gap = start - end
            assert (gap >= 0).all()
            assert not ((gap > 0) & (gap < 1e-12)).any(), "a step started an ulp late"
