"""The feed (``sim.fast.feed``): replicas pull open-loop requests when they plan.

What it replaces is a SimPy process that sleeps until each request's
submission time and hands it over (the reference ``Simulation``), so the two are
compared run for run, to the bit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from sim.api.build import cluster_for, engine_for
from sim.engine.request import Request
from sim.fast.decode_runs import RunningReplica
from sim.fast.feed import FedReplica, Feed, feedable, pool_feeds, submission_clock_s, take_feeds
from sim.fast.open_loop import FastSimulation
from sim.scenario import Scenario, scenario_from_dict
from sim.serving import submission as submission_module
from sim.serving.pool import Pool
from sim.serving.replica_config import NO_FRONTEND
from sim.serving.simulation import RawResult, Simulation
from sim.serving.submission import requests_in_order
from sim.workload.generate import RequestArrays, SyntheticWorkload, generate_open_loop

times = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(times, max_size=40))
def test_submission_clocks_are_those_a_sleeping_simpy_process_sees(ready: list[float]) -> None:
    ready.sort()
    env = simpy.Environment()
    seen: list[float] = []

    def submitter() -> Any:
        for t in ready:
            if t > env.now:
                yield env.timeout(t - env.now)
            seen.append(env.now)

    env.process(submitter())
    env.run()
    assert submission_clock_s(ready).tolist() == seen  # exact


def arrays(arrival_s: list[float], prompt: list[int]) -> RequestArrays:
    n = len(arrival_s)
    return RequestArrays(
        arrival_s=np.array(arrival_s, dtype=np.float64),
        num_prompt_tokens=np.array(prompt, dtype=np.int64),
        num_output_tokens=np.full(n, 5, dtype=np.int64),
    )


# A way in of 0.01 s per prompt token and nothing per request.
PER_TOKEN = NO_FRONTEND.model_copy(update={"tokenize_s_per_token": 0.01})


def test_take_hands_over_what_is_due_in_submission_order_with_its_clock() -> None:
    # The way in takes 0.01 s per prompt token: request 1 (short) overtakes 0.
    taken: list[tuple[int, float]] = []

    def submit(request: Request, clock_s: float) -> None:
        taken.append((request.request_id, clock_s))

    (feed,) = Feed.split(arrays([0.0, 0.5, 0.5, 2.0], [100, 10, 1, 10]), PER_TOKEN, [submit])
    assert feed.num_requests == 4 and feed._index == 0
    assert feed.next_due_s() == pytest.approx(0.51)
    assert feed.take(0.5) == pytest.approx(0.51)
    assert taken == []
    feed.take(0.52)
    assert [rid for rid, _ in taken] == [2]
    assert feed.next_due_s() == pytest.approx(0.6) and feed._index == 1
    feed.take(0.65)
    assert [rid for rid, _ in taken] == [2, 1]
    assert taken[0][1] == pytest.approx(0.51) and taken[1][1] == pytest.approx(0.6)
    assert feed.next_due_s() == pytest.approx(1.0) and feed._index == 2
    next_clock_s = feed.take(10.0)
    assert [rid for rid, _ in taken] == [2, 1, 0, 3]
    assert feed.next_due_s() == math.inf and next_clock_s == math.inf


def test_take_sets_the_next_time_before_each_submission() -> None:
    nexts: list[float] = []

    def submit(request: Request, clock_s: float) -> None:
        nexts.append(feed.next_due_s())

    (feed,) = Feed.split(arrays([1.0, 2.0, 3.0], [1, 1, 1]), NO_FRONTEND, [submit])
    feed.take(2.5)
    assert nexts == [2.0, 3.0]


def test_requests_carry_their_spec_and_priority() -> None:
    work = RequestArrays(
        arrival_s=np.array([0.2, 0.1]),
        num_prompt_tokens=np.array([7, 8]),
        num_output_tokens=np.array([3, 4]),
        priority=np.array([5, 6]),
    )
    got: list[Request] = []
    (feed,) = Feed.split(work, NO_FRONTEND, [lambda request, clock_s: got.append(request)])
    feed.take(1.0)
    assert [(r.request_id, r.arrival_s, r.num_prompt_tokens, r.num_output_tokens) for r in got] == [
        (1, 0.1, 8, 4),
        (0, 0.2, 7, 3),
    ]
    assert [r.priority for r in got] == [6, 5]


def test_requests_are_read_a_chunk_at_a_time_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submission_module, "_CHUNK", 3)
    n = 10
    work = RequestArrays(
        arrival_s=np.linspace(1.0, 0.1, n),
        num_prompt_tokens=np.arange(n) + 100,
        num_output_tokens=np.arange(n) + 1,
        priority=np.arange(n) * 7,
    )
    order = np.argsort(work.arrival_s, kind="stable")
    got = list(requests_in_order(work, order))
    assert [r.request_id for r in got] == order.tolist()
    assert [r.num_prompt_tokens for r in got] == (order + 100).tolist()
    assert [r.priority for r in got] == (order * 7).tolist()
    assert [r.arrival_s for r in got] == work.arrival_s[order].tolist()


def scenario(
    scheduler: dict[str, Any],
    workload: dict[str, Any],
    num_replicas: int | None = None,
    frontend: dict[str, Any] | None = None,
    router: str = "round_robin",
    **engine: Any,
) -> Scenario:
    doc: dict[str, Any] = {
        "name": "feed",
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "scheduler": scheduler,
        "engine": engine,
        "workload": {"kind": "synthetic", **workload},
    }
    if frontend is not None:
        doc["frontend"] = frontend
    if num_replicas is not None:
        doc["cluster"] = {"num_replicas": num_replicas, "router": router}
    return scenario_from_dict(doc, "test_feed")


def simulate(sc: Scenario, feed: bool, work: RequestArrays | None = None) -> RawResult:
    """Run ``sc`` (or ``work`` on its engine) with feeds, or with an event per arrival."""
    rng = np.random.default_rng(sc.seed)
    if work is None:
        assert isinstance(sc.workload, SyntheticWorkload)
        work = generate_open_loop(sc.workload, rng)
    if feed:
        simulation: Simulation = FastSimulation(engine_for(sc), cluster_for(sc, rng))
    else:  # the same replicas (decode runs as one event), handed each request at an event
        simulation = Simulation(engine_for(sc), cluster_for(sc, rng), new_replica=RunningReplica)
    result = simulation.run(work)
    layout = simulation.layout
    replicas = [simulation.replica] if layout is None else layout.front_replicas
    assert all(
        isinstance(r, RunningReplica) and (isinstance(r, FedReplica) and r.feed is not None) == feed
        for r in replicas
    )
    return result


def same_runs(a: RawResult, b: RawResult) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)


CONTINUOUS = {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 1024}
LENGTHS = {
    "prompt_tokens": {"kind": "lognormal", "median_tokens": 300, "sigma": 0.8, "max_tokens": 3000},
    "output_tokens": {"kind": "lognormal", "median_tokens": 60, "sigma": 0.8, "max_tokens": 600},
}
POISSON = {"kind": "poisson", "rate_per_s": 20}


@pytest.mark.parametrize("num_replicas", [None, 1, 3])
@pytest.mark.parametrize(
    ("scheduler", "arrival", "engine"),
    [
        (CONTINUOUS, POISSON, {}),
        (CONTINUOUS, POISSON, {"async_scheduling": False}),
        (CONTINUOUS, POISSON, {"skip_ahead": False}),
        (
            CONTINUOUS,
            {"kind": "gamma", "rate_per_s": 30, "burstiness": 0.1},
            {"num_kv_blocks": 300, "max_model_len_tokens": 4800},  # 300 x 16
        ),
        (CONTINUOUS, {"kind": "constant", "rate_per_s": 10}, {}),
        (
            {"kind": "static", "max_batch_size": 8, "max_wait_s": 0.05},
            {"kind": "poisson", "rate_per_s": 3},
            {},
        ),
    ],
)
def test_fed_replicas_run_as_replicas_handed_each_request_at_an_event(
    num_replicas: int | None,
    scheduler: dict[str, Any],
    arrival: dict[str, Any],
    engine: dict[str, Any],
) -> None:
    workload = {"num_requests": 300, "arrival": arrival, **LENGTHS}
    sc = scenario(scheduler, workload, num_replicas, **engine)
    fed = simulate(sc, feed=True)
    same_runs(fed, simulate(sc, feed=False))
    assert fed.requests["finish_s"].notna().all()
    if num_replicas == 3:  # dealt in turn
        by_arrival = fed.requests.sort_values(["arrival_s", "request_id"], kind="stable")
        assert by_arrival["replica"].tolist()[:6] == [0, 1, 2, 0, 1, 2]


def test_a_pool_counts_the_load_of_what_its_replicas_take() -> None:
    workload = {"num_requests": 60, "arrival": POISSON, **LENGTHS}
    sc = scenario(CONTINUOUS, workload, 4)
    rng = np.random.default_rng(sc.seed)
    assert isinstance(sc.workload, SyntheticWorkload)
    simulation = Simulation(engine_for(sc), cluster_for(sc, rng), new_replica=FedReplica)
    layout = simulation.layout
    assert isinstance(layout, Pool) and feedable(layout)
    work = generate_open_loop(sc.workload, rng)
    feeds = pool_feeds(layout, work, NO_FRONTEND)
    take_feeds(layout, feeds)
    simulation.env.run(until=1.0)
    taken = sum(feed._index for feed in feeds)
    assert 0 < taken < 60
    done = sum(core.num_done for core in layout.cores)
    assert sum(load.num_requests for load in layout.loads) == taken - done
    with pytest.raises(ValueError, match="one feed per replica"):
        take_feeds(layout, feeds[:3])


def test_requests_due_at_time_zero_come_after_the_first_plan_as_with_events() -> None:
    # Ties: three requests at 0 (the first plan, at 0, sees none: the event-fed
    # replica planned before the submitting process started), two at once later.
    work = RequestArrays(
        arrival_s=np.array([0.0, 0.0, 0.0, 0.25, 0.25, 0.4]),
        num_prompt_tokens=np.array([50, 300, 20, 700, 10, 90]),
        num_output_tokens=np.array([30, 3, 12, 40, 9, 1]),
    )
    workload = {"num_requests": 1, "arrival": POISSON, **LENGTHS}
    for num_replicas in (None, 2):
        sc = scenario(
            CONTINUOUS,
            workload,
            num_replicas,
            frontend={"way_in_s_per_request": 0.0, "tokenize_s_per_token": 0.0},
        )
        fed = simulate(sc, True, work)
        same_runs(fed, simulate(sc, False, work))
        series = fed.timeseries[fed.timeseries["replica"] == 0]
        assert list(series["time_s"][:2]) == [0.0, 0.0]  # an empty plan, then the first step's
        assert list(series["num_waiting"][:2]) == [0, 0]
        assert fed.requests["finish_s"].notna().all()


def test_a_fed_replica_ends_runs_at_arrivals_the_event_path_by_interrupts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fed replica knows the next arrival (its feed's), so it is never
    # interrupted. The reference executor tells its replicas nothing ahead of time
    # (no horizon): the open loop submits at events, and an arrival interrupts a
    # run it could change (the same runs, to the bit: the test above).
    interrupts = [0]
    interrupt = simpy.Process.interrupt

    def counting(self: simpy.Process, cause: object = None) -> None:
        interrupts[0] += 1
        interrupt(self, cause)

    monkeypatch.setattr(simpy.Process, "interrupt", counting)
    workload = {"num_requests": 200, "arrival": POISSON, **LENGTHS}
    simulate(scenario(CONTINUOUS, workload), feed=True)
    assert interrupts[0] == 0
    simulate(scenario(CONTINUOUS, workload), feed=False)
    assert interrupts[0] > 0
