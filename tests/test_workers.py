"""Round-robin replicas simulated in worker processes give the run of one process.

Each run is compared to the bit (requests, step log, time series, token gaps,
later runs and rejections) with the same run in this process alone, across
scheduler settings that exercise preemption, rejections, prefix caching,
async scheduling, tokenization delays and step-by-step mode.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from child_processes import no_children_left
from hypothesis import given, settings
from hypothesis import strategies as st
from test_feed import scenario as feed_scenario

from sim import api
from sim.api.build import cluster_for, engine_for
from sim.fast import open_loop as open_loop_module
from sim.fast import workers as workers_module
from sim.fast.open_loop import FastSimulation
from sim.fast.workers import WorkerError, default_num_workers, shares
from sim.scenario import Scenario
from sim.serving import progress as progress_module
from sim.serving.raw_result import CoreOutput
from sim.serving.simulation import RawResult, Simulation
from sim.workload.generate import SyntheticWorkload, generate_open_loop

LENGTHS = {
    "prompt_tokens": {"kind": "lognormal", "median_tokens": 300, "sigma": 0.9, "max_tokens": 3000},
    "output_tokens": {"kind": "lognormal", "median_tokens": 60, "sigma": 0.8, "max_tokens": 600},
}


def scenario(
    num_replicas: int,
    num_requests: int = 240,
    rate_per_s: float = 40.0,
    router: str = "round_robin",
    frontend: dict[str, Any] | None = None,
    **engine: Any,
) -> Scenario:
    workload = {
        "num_requests": num_requests,
        "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
        **LENGTHS,
    }
    scheduler = {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 1024}
    return feed_scenario(scheduler, workload, num_replicas, frontend, router, **engine)


def simulate(sc: Scenario, workers: int) -> tuple[RawResult, Simulation]:
    rng = np.random.default_rng(sc.seed)
    assert isinstance(sc.workload, SyntheticWorkload)
    work = generate_open_loop(sc.workload, rng)
    simulation = FastSimulation(engine_for(sc), cluster_for(sc, rng), workers=workers)
    return simulation.run(work), simulation


def same_runs(a: RawResult, b: RawResult) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)
    assert a.extra_itl_s.tobytes() == b.extra_itl_s.tobytes()
    assert a.later_runs == b.later_runs
    assert a.records.rejections == b.records.rejections
    assert a.num_replicas == b.num_replicas


ENGINES: list[dict[str, Any]] = [
    {},
    {"async_scheduling": False},
    {"skip_ahead": False},
    # preemptions; prompts over the pool's size (260 x 16 = max_model_len) are rejected
    {"num_kv_blocks": 260, "max_model_len_tokens": 4160},
    {"enable_prefix_caching": False},
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("num_replicas", "num_workers"), [(2, 2), (3, 2), (5, 3)])
def test_workers_give_the_run_of_one_process(
    engine: dict[str, Any], num_replicas: int, num_workers: int
) -> None:
    sc = scenario(num_replicas, **engine)
    alone, _ = simulate(sc, 1)
    split, simulation = simulate(sc, num_workers)
    same_runs(alone, split)
    assert isinstance(sc.workload, SyntheticWorkload)
    assert len(split.requests) == sc.workload.num_requests
    # This process simulated only its share: the other replicas' cores saw nothing.
    mine = set(shares(num_replicas, num_workers)[0])
    for index, core in enumerate(simulation.cores):
        assert (core.num_done > 0) == (index in mine)


@settings(max_examples=6, deadline=None)
@given(
    num_replicas=st.integers(2, 6),
    num_workers=st.integers(2, 4),
    rate_per_s=st.floats(5.0, 120.0),
    tokenize_s_per_token=st.sampled_from([0.0, 1e-6, 2e-4]),
    way_in_s_per_request=st.sampled_from([0.0, 0.01]),
)
def test_any_split_gives_the_same_run(
    num_replicas: int,
    num_workers: int,
    rate_per_s: float,
    tokenize_s_per_token: float,
    way_in_s_per_request: float,
) -> None:
    sc = scenario(
        num_replicas,
        num_requests=120,
        rate_per_s=rate_per_s,
        frontend={
            "tokenize_s_per_token": tokenize_s_per_token,
            "way_in_s_per_request": way_in_s_per_request,
        },
    )
    same_runs(simulate(sc, 1)[0], simulate(sc, num_workers)[0])


def test_more_workers_than_replicas_use_one_per_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []
    real = workers_module.run_in_workers

    def spy(pool: Any, feeds: Any, num_workers: int, *rest: Any) -> list[CoreOutput]:
        used.append(num_workers)
        return real(pool, feeds, num_workers, *rest)

    monkeypatch.setattr(open_loop_module, "run_in_workers", spy)
    sc = scenario(2, num_requests=60)
    same_runs(simulate(sc, 1)[0], simulate(sc, 8)[0])
    assert used == [2]


@pytest.mark.parametrize("router", ["least_outstanding_requests", "central_queue"])
def test_routers_that_read_load_run_in_this_process(
    router: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("a load-aware router's replicas were split")

    monkeypatch.setattr(open_loop_module, "run_in_workers", refuse)
    result, _ = simulate(scenario(3, num_requests=60, router=router), 3)
    assert len(result.requests) == 60


def test_a_recorder_keeps_the_run_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("traced replicas were split")

    monkeypatch.setattr(open_loop_module, "run_in_workers", refuse)
    result = api.run(scenario(3, num_requests=60), trace_requests=5, workers=3)
    assert result.activity is not None and len(result.activity) > 0


def test_api_run_takes_workers_and_gives_the_same_result() -> None:
    sc = scenario(3, num_requests=90)
    alone, split = api.run(sc, workers=1), api.run(sc, workers=3)
    pd.testing.assert_frame_equal(alone.requests, split.requests, check_exact=True)
    assert alone.summary == split.summary


def test_workers_must_be_positive() -> None:
    sc = scenario(2)
    with pytest.raises(ValueError, match="workers: expected a positive count, got 0"):
        FastSimulation(engine_for(sc), cluster_for(sc, np.random.default_rng(0)), workers=0)


def plant(monkeypatch: pytest.MonkeyPatch, in_workers: bool, action: Callable[[], None]) -> None:
    """Make ``CoreOutput.of`` call ``action`` first: in the workers, or in this process."""
    parent = os.getpid()
    real = CoreOutput.of

    def planted(core: Any) -> CoreOutput:
        if (os.getpid() != parent) == in_workers:
            action()
        return real(core)

    monkeypatch.setattr(CoreOutput, "of", planted)


def test_a_failing_worker_fails_the_run_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail() -> None:
        raise RuntimeError("planted failure in a worker")

    plant(monkeypatch, True, fail)
    with pytest.raises(WorkerError, match=r"worker 1 failed:(.|\n)*planted failure in a worker"):
        simulate(scenario(2, num_requests=40), 2)
    assert no_children_left()


def test_a_worker_that_dies_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, True, lambda: os._exit(3))  # no reply at all, as when the OS kills it
    with pytest.raises(WorkerError, match="worker 1 ended without a result"):
        simulate(scenario(2, num_requests=40), 2)
    assert no_children_left()


def test_a_failure_here_stops_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt  # Ctrl-C while the workers still run

    plant(monkeypatch, False, interrupt)
    with pytest.raises(KeyboardInterrupt):
        simulate(scenario(3, num_requests=300), 3)
    assert no_children_left()


def test_the_bar_counts_the_workers_requests_and_ends_full(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress_module, "BAR_DELAY_S", 0.0)
    sc = scenario(2, num_requests=300)
    rng = np.random.default_rng(sc.seed)
    assert isinstance(sc.workload, SyntheticWorkload)
    work = generate_open_loop(sc.workload, rng)
    FastSimulation(engine_for(sc), cluster_for(sc, rng), workers=2).run(work, progress=True)
    assert "300/300" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("num_replicas", "num_workers"), [(1, 1), (4, 1), (4, 4), (5, 2), (16, 3), (3, 5)]
)
def test_shares_deal_every_replica_once_evenly(num_replicas: int, num_workers: int) -> None:
    dealt = shares(num_replicas, num_workers)
    assert len(dealt) == num_workers
    assert sorted(i for share in dealt for i in share) == list(range(num_replicas))
    sizes = [len(share) for share in dealt]
    assert max(sizes) - min(sizes) <= 1


def test_the_default_uses_the_cpus_when_there_is_enough_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers_module, "usable_cpus", lambda: 4)
    per = workers_module.MIN_REQUESTS_PER_WORKER
    assert default_num_workers(16, 100 * per) == 4  # the CPUs bound it
    assert default_num_workers(3, 100 * per) == 3  # the replicas bound it
    assert default_num_workers(16, 2 * per) == 2  # the work bounds it
    assert default_num_workers(16, per - 1) == 1  # too little to pay for a fork
    monkeypatch.setattr(workers_module, "usable_cpus", lambda: 1)
    assert default_num_workers(16, 100 * per) == 1


def test_the_default_is_one_process_inside_a_worker_or_without_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers_module, "usable_cpus", lambda: 8)
    many = 100 * workers_module.MIN_REQUESTS_PER_WORKER
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    assert default_num_workers(16, many) == 1
    monkeypatch.undo()
    monkeypatch.setattr(workers_module, "usable_cpus", lambda: 8)
    monkeypatch.delattr(os, "fork")
    assert default_num_workers(16, many) == 1


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_other_systems_run_in_one_process_even_when_asked_for_more(
    platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "usable_cpus", lambda: 8)
    monkeypatch.setattr(sys, "platform", platform)
    assert default_num_workers(16, 100 * workers_module.MIN_REQUESTS_PER_WORKER) == 1

    def refuse(*args: Any) -> None:
        raise AssertionError(f"workers forked on {platform}")

    monkeypatch.setattr(open_loop_module, "run_in_workers", refuse)
    result, _ = simulate(scenario(3, num_requests=60), 3)
    assert len(result.requests) == 60
