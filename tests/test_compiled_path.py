"""When one replica's run is compiled, and what it then gives (``sim.fast.compiled``).

The property test (``tests/properties/test_compiled_equivalence.py``) compares
random runs; here fixed ones: runs the loop must play (not fall back) with
every setting it plays, runs it must hand to the Python path, the loop's
stops to empty its buffers, its arguments, and the choice of loop.
"""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import fields, replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from compiled_runs import assert_identical, record_plays, simulate

from sim.cli import main
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.linear import LinearCost
from sim.cost.roofline import RooflineCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig, StaticConfig
from sim.errors import ConfigError
from sim.fast import open_loop
from sim.fast.compiled import loop, path
from sim.hardware.specs import hardware_preset, model_preset
from sim.planning.sweep_exec import run_point
from sim.scenario import scenario_from_dict
from sim.serving.cluster import Cluster, ClusterConfig, RouterKind
from sim.serving.replica_config import NO_FRONTEND, FrontendConfig, ReplicaConfig
from sim.serving.simulation import OpenLoop, Simulation
from sim.workload.generate import RequestArrays

HAS_NUMBA = importlib.util.find_spec("numba") is not None
# The engine's CPU work around a cost model the loop cannot play (why_not).
CPU = EngineCpu(
    EngineCpuConfig(
        per_step_s=4e-4,
        scheduler_per_seq_s=1e-5,
        sampling_per_seq_s=0.0,
        per_token_s=1e-7,
        non_overlapped_s=1e-4,
    ),
    async_scheduling=True,
    source="test",
)
MODEL, H100 = model_preset("llama-3-8b"), hardware_preset("h100")


def poisson(num: int, rate_per_s: float, seed: int = 0, **extra: Any) -> RequestArrays:
    """``num`` requests at ``rate_per_s``, prompts 20-600 and outputs 1-80 tokens."""
    rng = np.random.default_rng(seed)
    return RequestArrays(
        np.cumsum(rng.exponential(1 / rate_per_s, num)),
        rng.integers(20, 600, num),
        rng.integers(1, 80, num),
        **extra,
    )


def engine(
    async_scheduling: bool = True,
    caching: bool = True,
    num_kv_blocks: int = 100_000,
    frontend: FrontendConfig = NO_FRONTEND,
    **policy: Any,
) -> ReplicaConfig:
    settings = {"max_num_seqs": 32, "max_num_batched_tokens": 2048, **policy}
    make_policy = ContinuousConfig(**settings).build
    return ReplicaConfig(
        core=CoreConfig(
            make_policy=partial(make_policy, async_scheduling=True)
            if async_scheduling
            else make_policy,
            num_kv_blocks=num_kv_blocks,
            block_size_tokens=16,
            max_model_len_tokens=1024,
            enable_prefix_caching=caching,
        ),
        cost=RooflineCost(MODEL, H100),
        frontend=frontend,
    )


PLAYED = {
    "vLLM's defaults (async scheduling, prefix caching)": engine(),
    "no async scheduling, no prefix caching": engine(False, False),
    "near saturation, a sequence limit": engine(max_num_seqs=4),
    "small budget, long-prefill cap": engine(
        max_num_batched_tokens=300, long_prefill_token_threshold=64
    ),
    "no chunked prefill": engine(chunked_prefill=False, max_num_batched_tokens=1024),
    "the way in and out": engine(
        frontend=FrontendConfig(
            way_in_s_per_request=3e-3,
            tokenize_s_per_token=1.7e-5,
            detokenize_s_per_token=2.3e-4,
            output_step_s=0.0,
        )
    ),
}


@pytest.mark.parametrize("rate_per_s", [5.0, 60.0])
@pytest.mark.parametrize("name", PLAYED)
def test_the_loop_plays_these_runs_to_the_bit(name: str, rate_per_s: float) -> None:
    work = poisson(300, rate_per_s)
    reference, reference_order, played = simulate(work, PLAYED[name], "never")
    assert not played
    raw, order, played = simulate(work, PLAYED[name], "python")
    assert played
    assert_identical(raw, reference)
    assert order == reference_order
    assert len(raw.requests) == 300 and raw.requests["finish_s"].notna().all()


def test_runs_longer_than_the_longest_skip_ahead_are_cut_as_on_the_python_path() -> None:
    # Few requests, long answers: decode runs reach MAX_RUN_STEPS (4,096 steps).
    work = RequestArrays(
        np.array([0.0, 0.5, 300.0]),
        np.array([100, 2000, 50], dtype=np.int64),
        np.array([9000, 5000, 7000], dtype=np.int64),
    )
    long = replace(engine(), core=replace(engine().core, max_model_len_tokens=10_000))
    reference, reference_order, _ = simulate(work, long, "never")
    raw, order, played = simulate(work, long, "python")
    assert played
    assert_identical(raw, reference)
    assert order == reference_order
    assert raw.steps["num_decode_seqs"].size > 9000  # a step per token, logged by runs


def test_priorities_are_recorded_as_given() -> None:
    work = poisson(200, 20.0, priority=np.arange(200, dtype=np.int64) % 3)
    reference, _, _ = simulate(work, engine(), "never")
    raw, _, played = simulate(work, engine(), "python")
    assert played
    assert_identical(raw, reference)
    assert raw.requests["priority"].tolist() == (np.arange(200) % 3).tolist()


def test_a_preemption_sends_the_run_to_the_python_path() -> None:
    work = poisson(200, 40.0)
    small = engine(num_kv_blocks=60)  # a few requests' worth
    reference, reference_order, _ = simulate(work, small, "never")
    assert reference.requests["num_preemptions"].sum() > 0
    raw, order, played = simulate(work, small, "python")
    assert not played
    assert_identical(raw, reference)
    assert order == reference_order


def test_a_token_that_breaks_its_run_stops_the_loop() -> None:
    """Plain continuous batching never skips a decoder without preempting (the
    requests ahead of it took no more at its admission, and the budget then
    sufficed), so the loop's check is a safety net: planted here."""
    state = np.zeros(loop.STATE_SIZE, dtype=np.int64)
    state[loop.NUM_STEPS] = 10
    counts = np.zeros((loop.NUM_COUNTS, 1), dtype=np.int64)
    counts[loop.PROMPT], counts[loop.OUTPUT], counts[loop.COMP], counts[loop.GEN] = 5, 9, 5, 1
    counts[loop.BLOCKS] = 1
    counts[loop.LAST_STEP] = 7  # its last token came three steps ago
    times = np.zeros((loop.NUM_TIMES, 1))
    times[loop.FINISH_S] = np.nan
    slots = np.zeros((loop.NUM_SLOTS, 1), dtype=np.int64)
    slots[loop.SCHED_NEW] = 1
    logs = (
        np.ones(4), np.zeros(4), np.zeros((4, 5), dtype=np.int32), np.zeros(4),
        np.zeros((4, 3), dtype=np.int32), np.zeros(1, dtype=np.int64),
    )  # fmt: skip
    status = loop.commit(counts, times, slots, 1, False, state, logs, 0, 1, 0.0, 16)
    assert status == loop.UNSUPPORTED
    counts[loop.LAST_STEP] = 9  # the step before: the run goes on
    assert loop.commit(counts, times, slots, 1, False, state, logs, 0, 1, 0.0, 16) == loop.DONE
    assert state[loop.NUM_STEPS] == 11


def test_buffers_emptied_midway_give_the_same_run(monkeypatch: pytest.MonkeyPatch) -> None:
    work = poisson(400, 30.0)
    reference, _, _ = simulate(work, engine(), "never")
    monkeypatch.setattr(path, "CHUNK_STEPS", 64)  # a flush every few dozen steps
    monkeypatch.setattr(path, "CHUNK_ROWS", 8)
    calls = []
    run = loop.run

    def counting(*args: Any) -> int:
        calls.append(1)
        return run(*args)

    monkeypatch.setattr(loop, "run", counting)
    raw, _, played = simulate(work, engine(), "python")
    assert played and len(calls) > 20
    assert_identical(raw, reference)


def pool(num_replicas: int, router: RouterKind = "round_robin") -> Cluster:
    return Cluster(
        ClusterConfig(num_replicas=num_replicas, router=router), np.random.default_rng(0)
    )


@pytest.mark.parametrize("num_replicas", [1, 3])
def test_a_round_robin_pool_plays_each_replica_to_the_bit(num_replicas: int) -> None:
    work = poisson(300, 90.0)
    reference, reference_order, _ = simulate(work, engine(), "never", pool(num_replicas))
    raw, order, played = simulate(work, engine(), "python", pool(num_replicas))
    assert played
    assert_identical(raw, reference)
    assert order == reference_order
    assert sorted(set(raw.requests["replica"])) == list(range(num_replicas))


def test_a_pool_with_a_replica_the_loop_cannot_play_goes_to_the_python_path() -> None:
    # Three replicas, the third's share preempts: the first two, played, are dropped.
    base = poisson(300, 90.0)
    prompts = base.num_prompt_tokens.copy()
    prompts[2::3] = 900  # ~57 blocks each: a few fill the pool
    work = RequestArrays(base.arrival_s, prompts, base.num_output_tokens)
    small = engine(num_kv_blocks=130)
    reference, reference_order, _ = simulate(work, small, "never", pool(3))
    assert reference.requests["num_preemptions"].sum() > 0
    raw, order, played = simulate(work, small, "python", pool(3))
    assert not played
    assert_identical(raw, reference)
    assert order == reference_order


def test_routers_that_read_the_load_stay_on_the_python_path() -> None:
    work = poisson(100, 30.0)
    reference, _, _ = simulate(work, engine(), "never", pool(2, "least_outstanding_requests"))
    raw, _, played = simulate(work, engine(), "python", pool(2, "least_outstanding_requests"))
    assert not played
    assert_identical(raw, reference)


def test_the_loop_takes_the_arrays_in_their_order() -> None:
    names = list(inspect.signature(loop.run).parameters)
    assert names == [field.name for field in fields(path.LoopArrays)]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"make_policy": StaticConfig(max_batch_size=4).build}, "not plain continuous batching"),
        (
            {"cost": LinearCost(step_overhead_s=1e-3, per_decode_seq_s=1e-3)},
            "not a roofline or kernel-table cost",
        ),
        (
            {"cost": EngineCpuCost(LinearCost(step_overhead_s=1e-3, per_decode_seq_s=1e-3), CPU)},
            "not a roofline or kernel-table cost",
        ),
        ({"skip_ahead": False}, "step by step, or recorded"),
        ({"max_model_len_tokens": 100}, "no requests, or some rejected"),
        ({"num_kv_blocks": 10}, "some requests rejected"),
    ],
)
def test_why_not_names_what_the_loop_cannot_play(change: dict[str, Any], reason: str) -> None:
    base = engine()
    outer = {name: value for name, value in change.items() if name in ("cost", "skip_ahead")}
    core = {name: value for name, value in change.items() if name not in outer}
    changed = replace(base, core=replace(base.core, **core), **outer)
    cores = Simulation(changed).cores
    work = cast(OpenLoop, poisson(50, 10.0))
    assert path.why_not(cores, changed.cost, changed.skip_ahead, work) == reason
    cores = Simulation(engine()).cores
    assert path.why_not(cores, engine().cost, True, work) is None


def test_shared_prefixes_stay_on_the_python_path() -> None:
    work = poisson(50, 10.0, prefix_group=np.zeros(50, np.int64),
                   num_shared_prefix_tokens=np.full(50, 16, np.int64))  # fmt: skip
    cores = Simulation(engine()).cores
    assert path.why_not(cores, engine().cost, True, cast(OpenLoop, work)) == "shared prefixes"


def test_the_choice_of_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVESIM_COMPILED", "never")
    assert open_loop.choose_loop(10**7, True) is None
    monkeypatch.setenv("SERVESIM_COMPILED", "python")
    assert open_loop.choose_loop(1) is loop.run
    monkeypatch.setenv("SERVESIM_COMPILED", "auto")
    assert open_loop.choose_loop(open_loop.MIN_REQUESTS - 1) is None  # not worth numba's start-up
    assert open_loop.choose_loop(open_loop.MIN_REQUESTS) is path.compiled()
    assert open_loop.choose_loop(1, True) is path.compiled()  # asked for: a sweep's points
    assert open_loop.choose_loop(10**7, False) is None
    monkeypatch.setattr(path, "compiled", lambda: None)  # numba missing
    assert open_loop.choose_loop(open_loop.MIN_REQUESTS) is None
    monkeypatch.setenv("SERVESIM_COMPILED", "sometimes")
    with pytest.raises(ConfigError, match="SERVESIM_COMPILED"):
        open_loop.choose_loop(1)


@pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")
def test_a_sweep_point_takes_the_compiled_loop_at_any_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SERVESIM_COMPILED", "auto")
    played = record_plays(monkeypatch)
    workload = {
        "kind": "synthetic",
        "num_requests": 300,
        "arrival": {"kind": "poisson", "rate_per_s": 8},
        "prompt_tokens": {"kind": "fixed", "tokens": 512},
        "output_tokens": {"kind": "fixed", "tokens": 128},
    }
    scenario = {"model": "llama-3-8b", "hardware": "h100", "cost": {"kind": "roofline"},
                "workload": workload}  # fmt: skip
    task = {"scenario": scenario_from_dict(scenario, "test").model_dump(), "base_dir": "."}
    record = run_point(task)
    assert played == [True]  # 300 requests: a single run would not have taken it
    monkeypatch.setenv("SERVESIM_COMPILED", "never")
    assert run_point(task) == record
    assert played == [True]


@pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")
@pytest.mark.parametrize("name", PLAYED)
def test_the_compiled_loop_plays_these_runs_to_the_bit(name: str) -> None:
    work = poisson(2000, 40.0)
    reference, reference_order, _ = simulate(work, PLAYED[name], "never")
    raw, order, played = simulate(work, PLAYED[name], "always")
    assert played
    assert_identical(raw, reference)
    assert order == reference_order


@pytest.mark.parametrize(("mode", "note"), [("python", True), ("never", False)])
def test_servesim_run_says_when_the_compiled_loop_ran(
    mode: str, note: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("SERVESIM_COMPILED", mode)
    chat = Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml"
    # chat.yaml's auto picks H100 kernel tables (aiconfigurator's), which the loop plays.
    pins = ["--set", "workload.num_requests=50"]
    args = ["run", str(chat), *pins, "--out", str(tmp_path)]
    assert main([*args, "--figure-process", "no"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("simulated 50 requests in ")
    assert ("(compiled loop); wrote" in last) == note
