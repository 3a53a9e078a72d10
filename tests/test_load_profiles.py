"""Load profiles and capped concurrency (issue 31, item 3): the benchmark tools' loads.

Properties, not golden numbers: never more than ``max_concurrency`` in flight;
a cap that cannot bind is the plain open loop to the bit; ``synchronous`` has
no overlap; a closed loop with prefix groups hits the prefix cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.errors import ConfigError
from sim.scenario import Scenario, scenario_from_dict
from sim.serving.progress import Progress
from sim.serving.simulation import Simulation
from sim.workload.arrivals import PoissonArrival
from sim.workload.generate import SyntheticWorkload, generate_open_loop
from sim.workload.listed_loop import ListedClosedLoop
from sim.workload.profiles import expand_profile, sweep_rates_per_s

LENGTHS = {
    "prompt_tokens": {"kind": "uniform", "min_tokens": 50, "max_tokens": 400},
    "output_tokens": {"kind": "uniform", "min_tokens": 10, "max_tokens": 120},
}


def scenario(workload: dict[str, Any], **engine: Any) -> Scenario:
    return scenario_from_dict(
        {
            "name": "loads",
            "seed": 3,
            "model": "llama-3-8b",
            "hardware": "l4",
            "cost": {"kind": "roofline"},
            "scheduler": {"kind": "continuous", "max_num_seqs": 64},
            "engine": engine,
            "workload": workload,
        }
    )


def open_loop(rate_per_s: float = 30.0, num: int = 150, **extra: Any) -> dict[str, Any]:
    arrival = {"kind": "poisson", "rate_per_s": rate_per_s}
    return {"kind": "synthetic", "arrival": arrival, "num_requests": num} | LENGTHS | extra


def answered_s(requests: pd.DataFrame, sc: Scenario) -> np.ndarray:
    """When the client counts a request answered: the engine's finish plus the
    frontend's no-queue time for one output (what frees a slot)."""
    frontend = api.engine_for(sc).frontend
    extra = frontend.output_step_s + frontend.detokenize_s_per_token
    return requests["engine_finish_s"].to_numpy() + extra


def max_in_flight(sent_s: np.ndarray, done_s: np.ndarray) -> int:
    """Most requests sent and not answered at one time (an answer frees its slot
    before a send at the same instant takes it; "the same" within 1 ns, as the
    answer times here are summed in another order than the simulation's clock)."""
    events = sorted([(t, 1) for t in sent_s] + [(t - 1e-9, -1) for t in done_s])
    return int(np.max(np.cumsum([step for _, step in events])))


@pytest.mark.parametrize("limit", [1, 3, 8])
@pytest.mark.parametrize("rate_per_s", [5.0, float("inf")])
def test_never_more_than_max_concurrency_in_flight(limit: int, rate_per_s: float) -> None:
    sc = scenario(open_loop(rate_per_s, max_concurrency=limit))
    result = api.run(sc)
    requests = result.raw.requests
    assert len(requests) == 150 and requests["rejection_reason"].isna().all()
    assert max_in_flight(requests["arrival_s"].to_numpy(), answered_s(requests, sc)) == limit


def test_a_waiting_request_is_sent_when_a_slot_frees_and_ttft_counts_from_then() -> None:
    sc = scenario(open_loop(float("inf"), num=40, max_concurrency=4))
    requests = api.run(sc).raw.requests.sort_values("request_id")
    sent = requests["arrival_s"].to_numpy()
    assert np.all(sent[:4] == 0.0)  # the first four go at once
    done = np.sort(answered_s(requests, sc))
    # FIFO semaphore: the k-th waiting request goes at the k-th answer.
    np.testing.assert_array_equal(sent[4:], done[: len(sent) - 4])
    assert np.all(np.diff(sent) >= 0)  # sends keep arrival order
    assert (requests["first_token_s"] - requests["arrival_s"]).max() < 1.0  # no queue at the server


def test_a_cap_that_cannot_bind_is_the_plain_open_loop_to_the_bit() -> None:
    plain = api.run(scenario(open_loop()), compiled=False).raw
    for compiled in (False, True):
        capped = api.run(scenario(open_loop(max_concurrency=150)), compiled=compiled).raw
        pd.testing.assert_frame_equal(capped.requests, plain.requests)
        pd.testing.assert_frame_equal(capped.step_table.frame(), plain.step_table.frame())
    assert capped.accelerator == "compiled loop"  # the speed paths took the loose cap


def test_the_capped_path_with_a_loose_cap_agrees_with_the_open_loop() -> None:
    """The capped path itself (interrupt-driven, no horizon), forced with a cap
    that never binds: the same runs as the open loop's horizon path, to rounding."""
    sc = scenario(open_loop())
    work = generate_open_loop(sc.workload, np.random.default_rng(sc.seed))  # type: ignore[arg-type]
    engine = api.engine_for(sc)
    plain = Simulation(engine).run(work).requests
    simulation = Simulation(engine)
    raw = simulation.simulate(work, Progress(len(work), False, lambda: 0), limit=len(work))
    capped = raw.requests
    for column in ("arrival_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(capped[column], plain[column], rtol=0, atol=1e-9)


def test_a_binding_cap_is_declined_by_the_speed_paths() -> None:
    sc = scenario(open_loop(max_concurrency=4))
    fast = api.run(sc, compiled=True).raw
    reference = api.run(sc, compiled=False).raw
    assert fast.accelerator is None
    pd.testing.assert_frame_equal(fast.requests, reference.requests)


def test_synchronous_profile_has_no_overlap_and_concurrent_keeps_n_in_flight() -> None:
    workload = {"profile": "synchronous", "num_requests": 30} | LENGTHS
    sc = scenario(workload)
    assert sc.workload.kind == "closed_loop"
    requests = api.run(sc).raw.requests.sort_values("arrival_s")
    sent, done = requests["arrival_s"].to_numpy(), answered_s(requests, sc)
    assert np.all(sent[1:] >= done[:-1])  # each is sent once the last is answered
    assert max_in_flight(sent, done) == 1
    sc = scenario({"profile": "concurrent", "streams": 5, "num_requests": 60} | LENGTHS)
    requests = api.run(sc).raw.requests
    assert max_in_flight(requests["arrival_s"].to_numpy(), answered_s(requests, sc)) == 5


def test_rate_profiles_expand_to_the_arrival_processes() -> None:
    throughput = scenario(
        {"profile": "throughput", "num_requests": 20, "max_concurrency": 4} | LENGTHS
    ).workload
    assert isinstance(throughput, SyntheticWorkload)
    assert throughput.arrival.rate_per_s == float("inf")
    assert throughput.max_concurrency == 4
    poisson = scenario({"profile": "poisson", "rate_per_s": 2.0, "num_requests": 20} | LENGTHS)
    assert isinstance(poisson.workload, SyntheticWorkload)
    assert isinstance(poisson.workload.arrival, PoissonArrival)
    assert poisson.workload.arrival.spacing == "renewal"  # as GuideLLM draws it
    constant = scenario({"profile": "constant", "rate_per_s": 4.0, "num_requests": 8} | LENGTHS)
    work = generate_open_loop(constant.workload, np.random.default_rng(0))  # type: ignore[arg-type]
    np.testing.assert_allclose(np.diff(work.arrival_s), 0.25)


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"profile": "synchronous", "streams": 2}, "streams does not apply to profile synchronous"),
        ({"profile": "concurrent"}, "profile concurrent needs streams"),
        ({"profile": "constant"}, "profile constant needs rate_per_s"),
        ({"profile": "sweep"}, "profile sweep is several runs"),
        ({"profile": "burst"}, "unknown profile 'burst'"),
        ({"profile": "throughput", "kind": "synthetic"}, "give profile or kind, not both"),
        ({"profile": "concurrent", "streams": 0}, "num_users"),
        ({"profile": "throughput", "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_profile_errors_are_one_line(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        scenario(workload | {"num_requests": 10} | LENGTHS)
    assert "\n" not in str(error.value)


def test_expand_profile_leaves_other_workloads_alone() -> None:
    plain = open_loop()
    assert expand_profile(plain) is plain


def test_sweep_rates_are_evenly_spaced_between_synchronous_and_throughput() -> None:
    assert sweep_rates_per_s(1.0, 9.0, 6) == [3.0, 5.0, 7.0, 9.0]
    assert sweep_rates_per_s(1.0, 9.0, 2) == []
    with pytest.raises(ValueError, match="sweep_size"):
        sweep_rates_per_s(1.0, 9.0, 1)


def test_closed_loop_with_prefix_groups_gets_prefix_hits() -> None:
    groups = {"num_groups": 2, "shared_prefix_tokens": 512}
    workload = {
        "kind": "closed_loop",
        "num_users": 4,
        "num_requests": 60,
        "think_time_s": {"kind": "fixed", "value_s": 0.0},
        "prefix_groups": groups,
    } | LENGTHS
    with_groups = api.run(scenario(workload)).raw.requests
    without = api.run(scenario(workload | {"prefix_groups": None})).raw.requests
    hits = with_groups["num_prefix_hit_tokens"].to_numpy()
    assert hits.sum() >= (60 - 2) * 512 * 0.9  # all but each group's first reuse the prefix
    assert without["num_prefix_hit_tokens"].sum() < hits.sum() / 10
    # The groups' stream is a fourth one: lengths are drawn as without groups, plus the prefix.
    np.testing.assert_array_equal(
        np.sort(with_groups["num_prompt_tokens"].to_numpy()),
        np.sort(without["num_prompt_tokens"].to_numpy() + 512),
    )


def test_listed_closed_loop_replays_the_given_requests_in_order() -> None:
    prompts = np.array([100, 200, 300, 400], dtype=np.int64)
    outputs = np.array([10, 20, 30, 40], dtype=np.int64)
    loop = ListedClosedLoop(1, prompts, outputs)
    sc = scenario(open_loop())
    requests = Simulation(api.engine_for(sc)).run(loop).requests
    requests = requests.sort_values("request_id")
    np.testing.assert_array_equal(requests["num_prompt_tokens"], prompts)
    assert np.all(
        requests["arrival_s"].to_numpy()[1:] >= requests["finish_s"].to_numpy()[:-1] - 1e-3
    )


def test_profile_sweep_runs_synchronous_throughput_then_rates_between() -> None:
    from sim.planning.profile_sweep import profile_sweep

    sc = scenario(open_loop(num=40, max_concurrency=16))
    phases = profile_sweep(sc, sweep_size=5)
    profiles = [phase.load["profile"] for phase in phases]
    assert profiles == ["synchronous", "throughput", "constant", "constant", "constant"]
    assert phases[1].load["max_concurrency"] == 16  # the workload's cap, kept
    synchronous, throughput = phases[0].rate_per_s, phases[1].rate_per_s
    assert throughput > synchronous  # batching pays
    rates = [phase.load["rate_per_s"] for phase in phases[2:]]
    np.testing.assert_allclose(np.diff([synchronous, *rates]), (throughput - synchronous) / 3)
    assert rates[-1] == pytest.approx(throughput)
    for phase in phases:  # every phase serves the scenario's requests
        assert phase.summary["completed"] == 40


def test_profile_sweep_refuses_a_trace_in_one_line() -> None:
    from sim.planning.profile_sweep import profile_sweep

    trace = {"kind": "trace", "format": "csv", "path": "x.csv"}
    with pytest.raises(ConfigError, match=r"^sweep, synchronous: a trace keeps its own arrivals"):
        profile_sweep(scenario(trace))


@pytest.mark.parametrize("path", ["scenarios/replicas.yaml", "scenarios/disaggregated.yaml"])
def test_a_cap_holds_across_replicas_and_disaggregated_pools(path: str) -> None:
    from sim.scenario import load_scenario

    root = Path(__file__).resolve().parent.parent
    sc = load_scenario(root / path, ["workload.num_requests=200", "workload.max_concurrency=5"])
    requests = api.run(sc).raw.requests
    assert len(requests) == 200 and requests["rejection_reason"].isna().all()
    assert max_in_flight(requests["arrival_s"].to_numpy(), answered_s(requests, sc)) <= 5


@settings(max_examples=15, deadline=None)
@given(
    limit=st.integers(1, 8),
    num=st.integers(2, 50),
    rate_per_s=st.sampled_from([2.0, 30.0, float("inf")]),
    seed=st.integers(0, 2**16),
)
def test_sends_follow_the_semaphore_recurrence(
    limit: int, num: int, rate_per_s: float, seed: int
) -> None:
    """Request i is sent at max(its arrival, request i-1's send, the (i - limit)-th
    answer): a FIFO semaphore of ``limit`` slots, released by answers."""
    sc = scenario(open_loop(rate_per_s, num=num, max_concurrency=limit)).model_copy(
        update={"seed": seed}
    )
    work = generate_open_loop(sc.workload, np.random.default_rng(seed))  # type: ignore[arg-type]
    requests = api.run(sc).raw.requests.sort_values("request_id")
    sent = requests["arrival_s"].to_numpy()
    answers = np.sort(answered_s(requests, sc))
    expected = work.arrival_s.copy()
    for i in range(1, num):
        expected[i] = max(expected[i], sent[i - 1])
        if i >= limit:
            expected[i] = max(expected[i], answers[i - limit])
    np.testing.assert_allclose(sent, expected, rtol=0, atol=1e-9)
    assert max_in_flight(sent, answered_s(requests, sc)) <= limit


def test_the_compiled_loop_says_why_it_declines_a_binding_cap() -> None:
    from dataclasses import replace

    from sim.fast.compiled import path

    sc = scenario(open_loop())
    work = generate_open_loop(sc.workload, np.random.default_rng(0))  # type: ignore[arg-type]
    engine = api.engine_for(sc)
    cores = Simulation(engine).cores
    assert path.why_not(cores, engine.cost, True, work) is None
    capped = replace(work, max_concurrency=len(work) - 1)
    assert (
        path.why_not(cores, engine.cost, True, capped)
        == "capped requests in flight (max_concurrency)"
    )
    loose = replace(work, max_concurrency=len(work))
    assert path.why_not(cores, engine.cost, True, loose) is None
