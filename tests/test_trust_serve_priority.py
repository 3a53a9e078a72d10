"""``servesim serve --simulate`` honours request priorities as the offline simulator does.

The offline simulator's requests carry the workload's priority classes
(``RequestArrays.priority``); the online engine's carry the ``priority`` a
client sends (vLLM's extension to the OpenAI API, lower is more urgent). The
same prioritised workload, driven through the online engine on a clock of the
test's own (``tests/test_serve_simulate.py``'s helpers), must get every first
token and finish at the offline simulator's times, in strict and weighted
mode, with async scheduling on and off. Strict priority is also checked
against its definition, independently of the simulator: a request is never
admitted while a more urgent one is waiting. Then the HTTP server: it hands the
request's ``priority`` to the engine, and refuses one other than 0 when the
scenario's policy does not schedule by priority, with vLLM's message.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scripted_backend import ScriptedBackend
from test_serve_simulate import Clock, Record, sink_for, unique_prompt, workload

from sim.api import engine_for
from sim.api.build import cluster_for
from sim.scenario import load_scenario
from sim.serving.realtime import SimulatedEngine
from sim.serving.replica_config import ReplicaConfig
from sim.serving.routed import RoutedEngines
from sim.serving.router import make_router
from sim.serving.simulation import Simulation
from sim.serving.stream import Submission
from sim.workload.generate import RequestArrays

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
# Eight seats for ~12 requests a second of ~1 s each: a queue forms, so the order matters.
SEATS = "scheduler.max_num_seqs=8"


def config_of(*sets: str) -> ReplicaConfig:
    return engine_for(load_scenario(SCENARIOS / "llama70b_tp.yaml", [SEATS, *sets]))


def drive_online(
    config: ReplicaConfig,
    arrivals_s: list[float],
    prompts: list[int],
    outputs: list[int],
    priorities: list[int],
) -> list[Record]:
    """Each request submitted at its arrival with its priority, on a test clock."""
    clock = Clock()
    engine = SimulatedEngine(config, clock)
    records = [Record() for _ in arrivals_s]
    for i, arrival_s in enumerate(arrivals_s):
        engine.run_until(arrival_s)
        clock.now_s = arrival_s
        sink = sink_for(engine, records[i])
        engine.submit(
            Submission(unique_prompt(i, prompts[i]), outputs[i], True, sink, None, priorities[i])
        )
    assert engine.run_until(float("inf")) == float("inf")
    assert engine.core.kv.num_free_blocks == engine.core.kv.num_blocks
    return records


def offline_frame(
    config: ReplicaConfig,
    arrivals_s: list[float],
    prompts: list[int],
    outputs: list[int],
    priorities: list[int] | None,
) -> pd.DataFrame:
    work = RequestArrays(
        np.asarray(arrivals_s, dtype=np.float64),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        priority=None if priorities is None else np.asarray(priorities, dtype=np.int64),
    )
    return Simulation(config).run(work).requests.sort_values("request_id")


def prioritised_workload(seed: int) -> tuple[list[float], list[int], list[int], list[int]]:
    arrivals, prompts, outputs = workload(120, 12.0, seed=seed)
    priorities = np.random.default_rng(seed + 100).integers(0, 3, len(arrivals)).tolist()
    return arrivals, prompts, outputs, priorities


@pytest.mark.parametrize(
    "sets",
    [
        ("scheduler.kind=priority",),  # strict, async scheduling (the scenario's default)
        ("scheduler.kind=priority", "engine.async_scheduling=false"),
        ("scheduler.kind=priority", "scheduler.mode=weighted", "scheduler.weights={0: 4, 1: 2}"),
        # Preempts the least urgent; max_model_len is what the pool holds (150 * 16).
        ("scheduler.kind=priority", "engine.num_kv_blocks=150", "engine.max_model_len_tokens=2400"),
    ],
    ids=["strict-async", "strict-sync", "weighted", "preempting"],
)
def test_a_prioritised_workload_gets_the_offline_simulators_times(sets: tuple[str, ...]) -> None:
    config = config_of(*sets)
    arrivals, prompts, outputs, priorities = prioritised_workload(seed=len(sets))
    records = drive_online(config, arrivals, prompts, outputs, priorities)
    frame = offline_frame(config, arrivals, prompts, outputs, priorities)
    first_s = frame["engine_first_token_s"].to_numpy()
    finish_s = frame["engine_finish_s"].to_numpy()
    for i, record in enumerate(records):
        assert record.events[-1].finish_reason == "length"
        assert record.times_s[0] == pytest.approx(first_s[i], abs=1e-9), i
        assert record.times_s[-1] == pytest.approx(finish_s[i], abs=1e-9), i
    # The priorities changed the schedule (else the test would hold without them).
    fcfs = offline_frame(config, arrivals, prompts, outputs, None)
    assert not np.allclose(fcfs["engine_first_token_s"].to_numpy(), first_s)
    if "engine.num_kv_blocks=150" in sets:
        assert int(frame["num_preemptions"].sum()) > 0


def test_strict_priority_never_admits_a_request_while_a_more_urgent_one_waits() -> None:
    # Synchronous scheduling: every plan sees every request ready by its start.
    config = config_of("scheduler.kind=priority", "engine.async_scheduling=false")
    arrivals, prompts, outputs, priorities = prioritised_workload(seed=5)
    records = drive_online(config, arrivals, prompts, outputs, priorities)
    timings = [r.events[-1].timing for r in records]
    assert all(t is not None for t in timings)
    way_in_s = [config.frontend.way_in_one_s(n) for n in prompts]
    # Ready (handed to the core) at arrival + way in; first scheduled queue_s later.
    ready_s = [a + w for a, w in zip(arrivals, way_in_s, strict=True)]
    scheduled_s = [r + t.queue_s for r, t in zip(ready_s, timings, strict=True) if t is not None]
    num_waited = 0
    for j in range(len(records)):
        for i in range(len(records)):
            # i was waiting when j was admitted: ready by then, admitted later.
            if ready_s[i] <= scheduled_s[j] - 1e-9 and scheduled_s[i] > scheduled_s[j] + 1e-9:
                num_waited += 1
                assert priorities[i] >= priorities[j], (i, j)
    assert num_waited > 100  # a queue formed: the rule was put to the test


def test_routed_replicas_hand_each_replica_its_requests_priority() -> None:
    # No way in: the server routes a request when it takes it, the offline pool when
    # its way in ends (sim.serving.routed); with none the two are the same moment.
    sets = [SEATS, "scheduler.kind=priority", "cluster={num_replicas: 2, router: round_robin}"]
    sets += ["frontend.way_in_s_per_request=0", "frontend.tokenize_s_per_token=0"]
    scenario = load_scenario(SCENARIOS / "llama70b_tp.yaml", sets)
    config = engine_for(scenario)
    arrivals, prompts, outputs, priorities = prioritised_workload(seed=9)
    arrivals = [a / 2 for a in arrivals]  # twice the rate for twice the seats: a queue
    clock = Clock()
    engines = [SimulatedEngine(config, clock) for _ in range(2)]
    routed = RoutedEngines(engines, make_router("round_robin", np.random.default_rng(0)), 16)
    records = [Record() for _ in arrivals]
    for i, arrival_s in enumerate(arrivals):
        for engine in engines:
            engine.run_until(arrival_s)
        clock.now_s = arrival_s
        sink = records[i].events.append
        routed.submit(
            Submission(unique_prompt(i, prompts[i]), outputs[i], True, sink, None, priorities[i])
        )
    for engine in engines:
        assert engine.run_until(float("inf")) == float("inf")
    work = RequestArrays(
        np.asarray(arrivals, dtype=np.float64),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        priority=np.asarray(priorities, dtype=np.int64),
    )
    cluster = cluster_for(scenario, np.random.default_rng(scenario.seed))
    frame = Simulation(config, cluster).run(work).requests.sort_values("request_id")
    for i, record in enumerate(records):
        timing = record.events[-1].timing
        assert timing is not None and record.events[-1].finish_reason == "length"
        # Ready at arrival (no way in): first token and finish when the cluster predicts.
        first_s = arrivals[i] + timing.queue_s + timing.prefill_s
        assert first_s == pytest.approx(frame["engine_first_token_s"].iloc[i], abs=1e-9), i
        assert first_s + timing.decode_s == pytest.approx(
            frame["engine_finish_s"].iloc[i], abs=1e-9
        ), i
    # The priorities changed the schedule (else the test would hold without them).
    fcfs_work = RequestArrays(work.arrival_s, work.num_prompt_tokens, work.num_output_tokens)
    cluster = cluster_for(scenario, np.random.default_rng(scenario.seed))
    fcfs = Simulation(config, cluster).run(fcfs_work).requests
    fcfs_first_s = fcfs.sort_values("request_id")["engine_first_token_s"].to_numpy()
    assert not np.allclose(fcfs_first_s, frame["engine_first_token_s"].to_numpy())


# --- the HTTP server ---------------------------------------------------------------------


def post(app: Any, body: dict[str, Any]) -> tuple[int, Any]:
    aiohttp_test = pytest.importorskip("aiohttp.test_utils")

    async def go() -> tuple[int, Any]:
        async with aiohttp_test.TestClient(aiohttp_test.TestServer(app)) as client:
            response = await client.post("/v1/completions", json=body)
            return response.status, json.loads(await response.text())

    return asyncio.run(go())


def test_the_server_hands_the_requests_priority_to_the_engine() -> None:
    pytest.importorskip("aiohttp")
    from sim.cli.serve import app_for

    scenario = load_scenario(SCENARIOS / "priority.yaml")
    assert scenario.scheduler.kind == "priority"
    backend = ScriptedBackend()
    for priority in (1, -3):
        status, _ = post(app_for(backend, scenario), {"prompt": "ab", "priority": priority})
        assert status == 200
    status, _ = post(app_for(backend, scenario), {"prompt": "ab"})
    assert status == 200
    assert backend.priorities == [1, -3, 0]  # vLLM's default class: 0


def test_a_priority_without_priority_scheduling_is_vllms_400() -> None:
    pytest.importorskip("aiohttp")
    from sim.cli.serve import app_for

    scenario = load_scenario(SCENARIOS / "llama70b_tp.yaml")  # continuous: FCFS
    backend = ScriptedBackend()
    status, body = post(app_for(backend, scenario), {"prompt": "ab", "priority": 2})
    assert status == 400 and backend.submitted == []
    assert body["error"]["message"] == "Got priority 2 but Priority scheduling is not enabled."
    assert body["error"]["param"] == "priority"
    status, _ = post(app_for(backend, scenario), {"prompt": "ab", "priority": 0})
    assert status == 200 and backend.priorities == [0]
