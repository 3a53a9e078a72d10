"""``servesim serve --simulate``'s engine (``sim.serving.realtime.SimulatedEngine``).

The engine is driven on a clock of the test's own (``run_until``), so every
token's engine time is known exactly; the offline simulator, given the same
arrival times, must predict the same first-token and finish times for every
request (async scheduling on and off, with and without preemption). Then the
paths a request can end by (length, refused at admission, abort, a failing
sink), the token ids, and the real thread on the wall clock (counts only:
timing against the wall clock is ``benchmarks/simulated_server.py``'s).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from benchmark_module import load_benchmark
from cli_errors import one_line_error

from sim.api import engine_for
from sim.api.build import cluster_for
from sim.cost.label import cost_model_tag
from sim.scenario import load_scenario
from sim.serving import realtime
from sim.serving.realtime import SimulatedEngine, block_hashes, token_ids
from sim.serving.replica_config import ReplicaConfig
from sim.serving.routed import RoutedEngines
from sim.serving.router import make_router
from sim.serving.simulation import Simulation
from sim.serving.stream import Emitted, Sink, Submission
from sim.workload.generate import ClosedLoopWorkload, RequestArrays, generate_open_loop

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
WAIT_S = 30.0  # a bound for the engine thread, never reached when it works


def config_of(*sets: str) -> ReplicaConfig:
    """Llama-3-70B on 4 H100s (roofline): steps of ~15 ms, a fast cost model."""
    return engine_for(load_scenario(SCENARIOS / "llama70b_tp.yaml", list(sets)))


@dataclass
class Clock:
    """A clock the test sets (seconds)."""

    now_s: float = 0.0

    def __call__(self) -> float:
        return self.now_s


@dataclass
class Record:
    """What one request's sink got, with the engine time of each event."""

    events: list[Emitted] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)


def sink_for(engine: SimulatedEngine, record: Record) -> Sink:
    def sink(event: Emitted) -> None:
        record.events.append(event)
        record.times_s.append(engine.core.last_end_s)  # the step being committed
        if event.finish_reason is not None:
            record.finished.set()

    return sink


def unique_prompt(index: int, num_tokens: int) -> list[int]:
    """Token ids no other request's prompt starts with (no prefix-cache hit: the
    simulator's synthetic requests share nothing either)."""
    return [3 + index // 256, 3 + index % 256] + [65] * (num_tokens - 2)


def drive(
    config: ReplicaConfig, arrivals_s: list[float], prompts: list[int], outputs: list[int]
) -> tuple[SimulatedEngine, list[Record]]:
    """Submit each request at its arrival on a test clock, run everything to the end."""
    clock = Clock()
    engine = SimulatedEngine(config, clock)
    records = [Record() for _ in arrivals_s]
    for i, arrival_s in enumerate(arrivals_s):
        engine.run_until(arrival_s)  # everything due before the arrival
        clock.now_s = arrival_s
        engine.submit(
            Submission(unique_prompt(i, prompts[i]), outputs[i], True, sink_for(engine, records[i]))
        )
    assert engine.run_until(float("inf")) == float("inf")
    return engine, records


def workload(num: int, rate_per_s: float, seed: int) -> tuple[list[float], list[int], list[int]]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_per_s, num)).tolist()
    prompts = rng.integers(16, 900, num).tolist()
    outputs = rng.integers(1, 120, num).tolist()
    return arrivals, prompts, outputs


def offline_frame(
    config: ReplicaConfig, arrivals_s: list[float], prompts: list[int], outputs: list[int]
) -> pd.DataFrame:
    """The simulator's request records, by request id."""
    work = RequestArrays(
        np.asarray(arrivals_s, dtype=np.float64),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
    )
    return Simulation(config).run(work).requests.sort_values("request_id")


def offline(
    config: ReplicaConfig, arrivals_s: list[float], prompts: list[int], outputs: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The simulator's engine times of each request's first token and finish."""
    frame = offline_frame(config, arrivals_s, prompts, outputs)
    return frame["engine_first_token_s"].to_numpy(), frame["engine_finish_s"].to_numpy()


@pytest.mark.parametrize(
    ("scenario", "sets"),
    [
        ("llama70b_tp.yaml", ()),  # async scheduling (the scenario's vLLM version's default)
        ("llama70b_tp.yaml", ("engine.async_scheduling=false",)),
        # recompute preemptions (300 blocks of 16: 4800 tokens, the longest a request may be)
        ("llama70b_tp.yaml", ("engine.num_kv_blocks=300", "engine.max_model_len_tokens=4800")),
        ("speculative.yaml", ()),  # several tokens a step
        ("static_vs_continuous.yaml", ()),  # static batches: a policy that wakes itself
    ],
    ids=["async", "sync", "preempting", "speculative", "static"],
)
def test_every_token_comes_when_the_simulator_predicts(
    scenario: str, sets: tuple[str, ...]
) -> None:
    config = engine_for(load_scenario(SCENARIOS / scenario, list(sets)))
    arrivals, prompts, outputs = workload(120, 12.0, seed=len(sets))
    engine, records = drive(config, arrivals, prompts, outputs)
    frame = offline_frame(config, arrivals, prompts, outputs)
    first_s, finish_s = frame["engine_first_token_s"].to_numpy(), frame["engine_finish_s"]
    scheduled_s, ready_s = frame["first_scheduled_s"].to_numpy(), frame["ready_s"].to_numpy()
    for i, record in enumerate(records):
        # The engine's phases of the request (/metrics' queue, prefill, decode times).
        timing = record.events[-1].timing
        assert timing is not None and all(e.timing is not None for e in record.events)
        assert timing.queue_s == pytest.approx(scheduled_s[i] - ready_s[i], abs=1e-9)
        assert timing.prefill_s == pytest.approx(first_s[i] - scheduled_s[i], abs=1e-9)
        assert timing.decode_s == pytest.approx(finish_s.iloc[i] - first_s[i], abs=1e-9)
        assert timing.num_preemptions == frame["num_preemptions"].iloc[i]
        tokens = [t for e in record.events for t in e.token_ids]
        assert len(tokens) == outputs[i], i
        assert tokens == list(token_ids(0, outputs[i]))
        assert [e.finish_reason for e in record.events][-1] == "length"
        assert record.events[-1].num_generated_tokens == outputs[i]
        assert record.events[-1].num_prompt_tokens == prompts[i]
        assert record.times_s[0] == pytest.approx(first_s[i], abs=1e-9), i
        assert record.times_s[-1] == pytest.approx(finish_s.iloc[i], abs=1e-9), i
        # One event per step that produced tokens, at increasing times.
        assert all(e.token_ids for e in record.events)
        assert all(a < b for a, b in zip(record.times_s, record.times_s[1:], strict=False))
    if "engine.num_kv_blocks=300" in sets:
        assert int(engine.core.records.frame()["num_preemptions"].sum()) > 0
    if scenario == "speculative.yaml":
        assert max(len(e.token_ids) for r in records for e in r.events) > 1
    assert engine.core.kv.num_free_blocks == engine.core.kv.num_blocks


def test_the_way_in_delays_the_first_plan_by_the_scenarios_estimate() -> None:
    config = config_of()
    engine, records = drive(config, [1.0], [100], [2])
    way_in_s = config.frontend.way_in_one_s(100)
    assert way_in_s > 0
    first_step = engine.core.steps.frame().iloc[0]
    assert first_step["start_s"] == pytest.approx(1.0 + way_in_s, abs=1e-12)
    assert records[0].times_s[0] > 1.0 + way_in_s


def test_token_ids_are_letters_never_special() -> None:
    ids = token_ids(0, 60)
    assert bytes(i - 3 for i in ids).decode() == ("abcdefghijklmnopqrstuvwxyz" * 3)[:60]
    assert token_ids(25, 2) == ids[25:27]
    assert min(ids) > 2  # 0, 1, 2: padding, BOS, EOS


def test_prompt_blocks_hash_by_content_and_only_full_blocks() -> None:
    a = block_hashes(list(range(40)), 16)
    b = block_hashes([*range(32), 99, 98], 16)
    assert len(a) == 2 and a == b[:2]
    assert block_hashes(list(range(15)), 16) == ()
    assert block_hashes(list(range(16)), 16) != block_hashes(list(range(1, 17)), 16)


def test_shared_prompt_prefixes_hit_the_simulated_prefix_cache() -> None:
    config = config_of("engine.enable_prefix_caching=true", "engine.async_scheduling=false")
    clock = Clock()
    engine = SimulatedEngine(config, clock)
    records = [Record(), Record()]
    prompt = list(range(3, 3 + 256))
    engine.submit(Submission(prompt, 4, True, sink_for(engine, records[0])))
    engine.run_until(float("inf"))
    clock.now_s = 5.0
    engine.submit(Submission(prompt[:200] + [7] * 56, 4, True, sink_for(engine, records[1])))
    engine.run_until(float("inf"))
    cached = engine.core.records.frame().sort_values("request_id")["num_cached_tokens"].tolist()
    assert cached == [0, 192]  # 12 full blocks of 16 shared


def test_a_request_that_can_never_fit_is_refused_at_admission() -> None:
    # 128 tokens in all, the longest a request may be (vLLM refuses a smaller pool).
    config = config_of("engine.num_kv_blocks=8", "engine.max_model_len_tokens=128")
    engine, records = drive(config, [0.0, 0.5], [400, 50], [10, 10])
    refused, served = records
    assert [e.finish_reason for e in refused.events] == ["abort"]
    assert refused.events[0].token_ids == () and refused.events[0].num_generated_tokens == 0
    assert served.events[-1].finish_reason == "length"
    assert engine.core.rejections  # recorded as the simulator records it


def test_an_aborted_request_gets_nothing_more_and_frees_its_blocks() -> None:
    config = config_of()
    clock = Clock()
    engine = SimulatedEngine(config, clock)
    kept, gone = Record(), Record()
    engine.submit(Submission([65] * 100, 50, True, sink_for(engine, kept)))
    gone_id = engine.submit(Submission([65] * 100, 50, True, sink_for(engine, gone)))
    engine.run_until(0.3)
    assert gone.events and not gone.finished.is_set()
    num_before = len(gone.events)
    engine.abort(gone_id)
    assert engine.run_until(float("inf")) == float("inf")
    assert len(gone.events) <= num_before + 1  # at most the step already in flight
    assert all(e.finish_reason is None for e in gone.events)
    assert kept.events[-1].finish_reason == "length"
    assert sum(len(e.token_ids) for e in kept.events) == 50
    assert engine.core.kv.num_free_blocks == engine.core.kv.num_blocks
    assert engine.load().num_running == 0


def test_aborted_on_its_way_in_never_reaches_the_core() -> None:
    engine = SimulatedEngine(config_of(), Clock())
    record = Record()
    request_id = engine.submit(Submission([65] * 10, 5, True, sink_for(engine, record)))
    engine.abort(request_id)
    engine.run_until(float("inf"))
    assert record.events == [] and engine.core.num_done == 0


def test_a_failing_sink_ends_its_request_only() -> None:
    engine = SimulatedEngine(config_of(), Clock())
    kept = Record()
    calls = []

    def broken(event: Emitted) -> None:
        calls.append(event)
        raise ConnectionResetError("client gone")

    engine.submit(Submission([65] * 100, 40, True, broken))
    engine.submit(Submission([65] * 100, 40, True, sink_for(engine, kept)))
    engine.run_until(float("inf"))
    assert len(calls) <= 2  # the first token, and at most the step in flight
    assert sum(len(e.token_ids) for e in kept.events) == 40
    assert engine.core.kv.num_free_blocks == engine.core.kv.num_blocks


def test_load_counts_waiting_running_and_blocks() -> None:
    engine = SimulatedEngine(config_of("scheduler.max_num_seqs=1"), Clock())
    for _ in range(3):
        engine.submit(Submission([65] * 64, 8, True, lambda _: None))
    engine.run_until(0.02)  # past the way in: one admitted, two waiting
    load = engine.load()
    assert (load.num_running, load.num_waiting) == (1, 2)
    assert 0 < load.kv_cache_usage < 1


def test_the_thread_serves_requests_on_the_wall_clock() -> None:
    # The fastest steps this cost model takes (~15 ms); counts only, no timing.
    engine = SimulatedEngine(config_of())
    records = [Record() for _ in range(4)]
    engine.start()
    try:
        for i, record in enumerate(records):
            engine.submit(Submission([65] * (20 + i), 3 + i, False, sink_for(engine, record)))
        for record in records:
            assert record.finished.wait(WAIT_S)
    finally:
        engine.stop()
    assert engine.error is None
    for i, record in enumerate(records):
        assert sum(len(e.token_ids) for e in record.events) == 3 + i
        assert record.events[-1].finish_reason == "length"


# --- behind the OpenAI server, and the command line ----------------------------------------


def test_a_stream_through_the_openai_server_reads_its_letters() -> None:
    aiohttp_test = pytest.importorskip("aiohttp.test_utils")
    from sim.openai.server import make_app

    engine = SimulatedEngine(config_of())
    engine.start()

    async def go() -> tuple[str, dict[str, int]]:
        async with aiohttp_test.TestClient(
            aiohttp_test.TestServer(make_app(engine, "m"))
        ) as client:
            body = {"prompt": "hello", "max_tokens": 5, "stream": True}
            body["stream_options"] = {"include_usage": True}
            response = await client.post("/v1/completions", json=body)
            raw = await response.text()
        chunks = [json.loads(p[6:]) for p in raw.split("\n\n") if p.startswith("data: {")]
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        return text, chunks[-1]["usage"]

    try:
        text, usage = asyncio.run(go())
    finally:
        engine.stop()
    assert text == "abcde"
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (5, 5)


@pytest.mark.parametrize(
    ("scenario", "sets", "refused"),
    [
        ("replicas.yaml", ("cluster.router=central_queue",), "cluster.router: central_queue"),
        ("disaggregated.yaml", (), "cluster.disaggregation"),
        ("public/rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml", (), "cluster.lockstep"),
    ],
)
def test_the_cli_refuses_clusters_other_than_routed_replicas(
    capsys: pytest.CaptureFixture[str], scenario: str, sets: tuple[str, ...], refused: str
) -> None:
    argv = ["serve", "--simulate", str(SCENARIOS / scenario)]
    argv += [arg for value in sets for arg in ("--set", value)]
    err = one_line_error(capsys, argv)
    assert err.startswith(f"{refused}: servesim serve --simulate routes requests over replicas")


@pytest.mark.parametrize(
    "router",
    ["round_robin", "least_outstanding_requests", "least_outstanding_tokens", "power_of_two"],
)
def test_routed_replicas_serve_every_token_when_the_simulated_cluster_predicts(
    router: str,
) -> None:
    # No way in: the server routes a request when it takes it, the offline pool when
    # its way in ends (sim.serving.routed); with none the two are the same moment.
    seed = 7
    sets = [f"cluster={{num_replicas: 3, router: {router}}}", f"seed={seed}"]
    sets += ["frontend.way_in_s_per_request=0", "frontend.tokenize_s_per_token=0"]
    scenario = load_scenario(SCENARIOS / "llama70b_tp.yaml", sets)
    config = engine_for(scenario)
    assert scenario.cluster is not None
    arrivals, prompts, outputs = workload(150, 30.0, seed=3)
    # Online: three engines on one test clock behind the router, as the CLI builds them.
    clock = Clock()
    layout = cluster_for(scenario, np.random.default_rng(seed))
    assert layout is not None
    engines = [SimulatedEngine(config, clock) for _ in range(3)]
    routed = RoutedEngines(
        engines, make_router(scenario.cluster.router, layout.rng), config.core.block_size_tokens
    )
    records = [Record() for _ in arrivals]
    for i, arrival_s in enumerate(arrivals):
        for engine in engines:
            engine.run_until(arrival_s)
        clock.now_s = arrival_s
        routed.submit(
            Submission(unique_prompt(i, prompts[i]), outputs[i], True, records[i].events.append)
        )
    for engine in engines:
        assert engine.run_until(float("inf")) == float("inf")
    assert [load.num_requests for load in routed.loads] == [0, 0, 0]
    # Offline: the same requests through the simulator's pool of three.
    work = RequestArrays(
        np.asarray(arrivals, dtype=np.float64),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
    )
    cluster = cluster_for(scenario, np.random.default_rng(seed))
    frame = Simulation(config, cluster).run(work).requests.sort_values("request_id")
    finish_s = frame["engine_finish_s"].to_numpy()
    counts = frame["replica"].value_counts()
    assert len(counts) == 3  # every replica served some
    for i, record in enumerate(records):
        assert sum(len(e.token_ids) for e in record.events) == outputs[i]
        assert record.events[-1].finish_reason == "length"
        timing = record.events[-1].timing
        assert timing is not None
        assert timing.decode_s + timing.prefill_s == pytest.approx(
            finish_s[i] - frame["first_scheduled_s"].iloc[i], abs=1e-9
        )
        assert timing.queue_s == pytest.approx(
            frame["first_scheduled_s"].iloc[i] - frame["ready_s"].iloc[i], abs=1e-9
        )
        # Ready at arrival (no way in): the first token when the cluster predicts it.
        first_s = arrivals[i] + timing.queue_s + timing.prefill_s
        assert first_s == pytest.approx(frame["engine_first_token_s"].iloc[i], abs=1e-9)


def test_routed_abort_takes_the_request_off_its_replica_and_prefix_groups_stick() -> None:
    clock = Clock()
    config = config_of("engine.enable_prefix_caching=true")
    engines = [SimulatedEngine(config, clock) for _ in range(2)]
    routed = RoutedEngines(engines, make_router("prefix_affinity", np.random.default_rng(0)), 16)
    kept, gone = Record(), Record()
    shared = [70] * 32  # two full blocks: one prefix group
    routed.submit(Submission([*shared, 1, 2], 30, True, kept.events.append))
    gone_id = routed.submit(Submission([*shared, 3], 30, True, gone.events.append))
    assert [load.num_requests for load in routed.loads] in ([2, 0], [0, 2])
    for engine in engines:
        engine.run_until(0.2)
    routed.abort(gone_id)
    routed.abort(gone_id)  # twice: harmless
    assert sum(load.num_requests for load in routed.loads) == 1
    for engine in engines:
        engine.run_until(float("inf"))
    assert all(e.finish_reason is None for e in gone.events)
    assert kept.events[-1].finish_reason == "length"
    assert [load.num_requests for load in routed.loads] == [0, 0]
    load = routed.load()
    assert (load.num_running, load.num_waiting, load.kv_cache_usage) == (0, 0, 0.0)


def test_the_cli_serves_a_cluster_as_routed_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    from argparse import Namespace

    from sim.cli.serve import _engine

    path = SCENARIOS / "replicas.yaml"
    backend = _engine(Namespace(simulate=True, scenario=str(path)), load_scenario(path))
    assert isinstance(backend, RoutedEngines) and len(backend.engines) == 4
    assert "4 replicas (round_robin)" in capsys.readouterr().err
    records = [Record() for _ in range(8)]
    backend.start()
    try:
        for record in records:
            backend.submit(Submission([65] * 20, 3, False, record.events.append))
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not all(
            r.events and r.events[-1].finish_reason for r in records
        ):
            time.sleep(0.01)
    finally:
        backend.stop()
    assert backend.error is None
    assert all(sum(len(e.token_ids) for e in r.events) == 3 for r in records)
    assert [engine.core.num_done for engine in backend.engines] == [2, 2, 2, 2]


def test_the_cli_refuses_the_reference_engines_flags(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("calibration.cli")
    argv = ["serve", "--simulate", str(SCENARIOS / "llama70b_tp.yaml"), "--threads", "2"]
    assert one_line_error(capsys, argv).startswith("--threads: set the reference engine's model")


def test_the_cost_source_says_measured_or_guessed() -> None:
    # The serve line and a figure's caption read one function (sim.cost.label).
    assert cost_model_tag(config_of().cost.label).startswith("roofline (guess")
    chat = engine_for(load_scenario(SCENARIOS / "chat.yaml"))
    assert cost_model_tag(chat.cost.label).startswith("kernel tables (measured: ")
    assert "derived" not in cost_model_tag(chat.cost.label)


def test_measure_endpoint_against_serve_simulate_end_to_end(tmp_path: Path) -> None:
    # benchmarks/simulated_server.py's path on a small workload, in subprocesses:
    # what must hold on any machine (counts, lengths, one chunk a token); how
    # close the latencies come to the prediction is the benchmark's to print.
    bench = load_benchmark("simulated_server")
    sets = bench.layered_sets(
        bench.DEFAULT_SETS,
        [
            "workload.num_requests=30",
            "workload.arrival.rate_per_s=20",
            "workload.output_tokens.median_tokens=8",
            "workload.output_tokens.max_tokens=16",
        ],
    )
    server, url = bench.start_server(bench.SCENARIO, sets)
    try:
        summary = bench.measure(bench.SCENARIO, sets, url, tmp_path / "measured")
    finally:
        server.terminate()
        server.wait(timeout=30)
    requests = pd.read_parquet(tmp_path / "measured" / "requests.parquet")
    assert summary["completed"] == 30 and summary["num_failed"] == 0
    assert summary["prompt_tokens"].startswith("exact")
    assert (requests["num_generated_tokens"] == requests["num_output_tokens"]).all()
    assert (requests["num_chunks"] == requests["num_output_tokens"]).all()
    planned = load_scenario(SCENARIOS / "llama70b_tp.yaml", sets)
    assert not isinstance(planned.workload, ClosedLoopWorkload)
    work = generate_open_loop(planned.workload, np.random.default_rng(planned.seed))
    assert requests["num_prompt_tokens"].tolist() == work.num_prompt_tokens.tolist()
    # The benchmark's two predictions of the same requests, and its table.
    planned_summary, as_sent = bench.predictions(bench.SCENARIO, sets, requests)
    assert planned_summary["completed"] == as_sent["completed"] == 30
    assert bench.report(summary, planned_summary, as_sent) in (0, 1, 2)


def test_a_request_waiting_on_an_idle_engine_can_be_aborted() -> None:
    # Static batching holds a lone request for up to max_wait_s with nothing running.
    config = engine_for(
        load_scenario(SCENARIOS / "static_vs_continuous.yaml", ["scheduler.max_wait_s=10"])
    )
    engine = SimulatedEngine(config, Clock())
    record = Record()
    request_id = engine.submit(Submission([65] * 32, 4, True, sink_for(engine, record)))
    assert engine.run_until(1.0) > 1.0  # admitted, waiting for a batch
    assert len(engine.core.waiting) == 1
    engine.abort(request_id)
    engine.run_until(1.0)
    assert len(engine.core.waiting) == 0 and record.events == []
    assert engine.run_until(float("inf")) == float("inf")


def test_the_logs_are_dropped_once_idle_and_serving_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(realtime, "_LOG_STEPS", 5)
    config = config_of()
    arrivals, prompts, outputs = [0.0, 5.0], [50, 50], [20, 20]
    engine, records = drive(config, arrivals, prompts, outputs)
    assert engine.core.steps.frame().empty and engine.core.records.frame().empty
    first_s, finish_s = offline(config, arrivals, prompts, outputs)
    assert [r.times_s[0] for r in records] == pytest.approx(first_s.tolist(), abs=1e-9)
    assert [r.times_s[-1] for r in records] == pytest.approx(finish_s.tolist(), abs=1e-9)
    assert sum(len(e.token_ids) for e in records[1].events) == 20


def test_the_way_in_runs_from_the_servers_receipt() -> None:
    """A request the server received 5 ms before ``submit`` (``received_s``, on
    perf_counter's clock) is ready, and answered, 5 ms sooner than one received at
    ``submit``: the server's real parsing and tokenizing fall inside the modelled
    way in instead of adding to it. A receipt 'in the future' counts as now."""
    first_token_s = []
    for early_s in (None, 0.005, -1.0):
        clock = Clock()
        engine = SimulatedEngine(config_of(), clock)  # its clock reads 0 while built
        perf_at_build_s = time.perf_counter()  # a little after the engine's own reading
        record = Record()
        clock.now_s = 1.0
        received_s = None if early_s is None else perf_at_build_s + 1.0 - early_s
        engine.submit(
            Submission(unique_prompt(0, 100), 2, True, sink_for(engine, record), received_s)
        )
        assert engine.run_until(float("inf")) == float("inf")
        first_token_s.append(record.times_s[0])
    plain, early, future = first_token_s
    # perf_counter moves a little between the engine's reading and ours (µs).
    assert plain - early == pytest.approx(0.005, abs=2e-3)
    assert future == plain
