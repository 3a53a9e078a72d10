"""trace.json (``servesim run --trace``): the trace-event format, phases, nesting, bounds."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_checks import (
    DELIVERY_S,
    OVERHEAD_S,
    PER_DECODE_SEQ_S,
    PER_PREFILL_TOKEN_S,
    TOKENIZE_S,
    WAY_IN_S,
    check_format,
    check_nesting,
    doc,
    phases_of,
    traced,
)

from sim import api
from sim.engine.lifecycle import ActivityRecorder
from sim.engine.step_runs import StepTable
from sim.metrics.lifecycle import PHASES, SPAN_COLUMNS, reconstructed_spans
from sim.scenario import scenario_from_dict
from sim.serving.simulation import Simulation
from sim.workload.generate import generate_open_loop

# 24 KV blocks of 16 tokens, and requests as long as they hold (vLLM refuses a pool
# smaller than one max_model_len request).
POOL_24 = {"num_kv_blocks": 24, "max_model_len_tokens": 24 * 16}


def test_hand_traced_request_chunks_decode_and_detokenize() -> None:
    # One request: 100 prompt tokens in chunks of 64 and 36, then 4 decode steps.
    result, trace = traced(doc(num_requests=1, prompt=100, output=5, budget=64))
    check_format(trace)
    check_nesting(trace)
    arrival_s = float(result.requests["arrival_s"].iloc[0])
    phases = phases_of(trace, 0)
    assert [p["name"] for p in phases] == [
        "way_in",
        "prefill",
        "prefill",
        "decode",
        "detokenize",
    ]
    way_in, chunk1, chunk2, decode, detok = phases
    assert way_in["ts"] == pytest.approx(arrival_s * 1e6, abs=1e-3)
    assert way_in["dur"] == pytest.approx((WAY_IN_S + 100 * TOKENIZE_S) * 1e6, abs=1e-3)
    assert chunk1["args"]["num_tokens"] == 64 and chunk2["args"]["num_tokens"] == 36
    assert chunk1["dur"] == pytest.approx((OVERHEAD_S + 64 * PER_PREFILL_TOKEN_S) * 1e6, abs=1e-3)
    assert chunk2["dur"] == pytest.approx((OVERHEAD_S + 36 * PER_PREFILL_TOKEN_S) * 1e6, abs=1e-3)
    assert decode["args"]["num_tokens"] == 4
    assert decode["dur"] == pytest.approx(4 * (OVERHEAD_S + PER_DECODE_SEQ_S) * 1e6, abs=1e-3)
    # The frontend is idle: the last token reaches the client one delivery after its step.
    assert detok["dur"] == pytest.approx(DELIVERY_S * 1e6, abs=1e-3)
    ttft = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["tid"] == 0]
    assert len(ttft) == 1
    assert ttft[0]["ts"] == pytest.approx(chunk2["ts"] + chunk2["dur"] + DELIVERY_S * 1e6)
    assert ttft[0]["args"]["ttft_ms"] == pytest.approx(1e3 * result.requests["ttft_s"].iloc[0])
    (parent,) = [e for e in trace["traceEvents"] if e.get("cat") == "request"]
    assert parent["ts"] == way_in["ts"]
    assert parent["ts"] + parent["dur"] == pytest.approx(
        float(result.requests["finish_s"].iloc[0]) * 1e6, abs=1e-3
    )


def test_replica_steps_carry_batch_composition_and_counters() -> None:
    _result, trace = traced(doc(num_requests=1, prompt=100, output=5, budget=64))
    steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"]
    assert [s["args"]["num_prefill_tokens"] for s in steps] == [64, 36, 0, 0, 0, 0]
    assert [s["args"]["num_decode_seqs"] for s in steps] == [0, 0, 1, 1, 1, 1]
    assert [s["name"] for s in steps] == ["prefill"] * 2 + ["decode"] * 4
    assert all(s["pid"] == 2 for s in steps)
    # 100 tokens in 16-token blocks: 4 blocks after the first chunk, 7 by the end.
    kv = [s["args"]["num_kv_blocks_used"] for s in steps]
    assert kv[0] == 4 and kv[-1] == 7 and kv == sorted(kv)
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert names == {"queue", "KV cache"}
    meta = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert meta == {"requests", "replica 0"}


def test_bounded_to_the_first_requests_and_their_window() -> None:
    result, trace = traced(doc(num_requests=200, rate_per_s=50.0), num_traced=7)
    check_format(trace)
    tids = {e["tid"] for e in trace["traceEvents"] if e["pid"] == 1 and e["ph"] == "X"}
    assert tids == set(range(7))
    end_us = max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["pid"] == 1 and "dur" in e)
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "step"]
    assert steps and all(s["ts"] < end_us for s in steps)
    assert len(steps) < len(result.steps)  # the window, not the whole run
    assert result.activity is not None
    assert set(result.activity["request_id"]) <= set(range(7))


def test_recorder_detaches_once_its_requests_are_done() -> None:
    scenario = scenario_from_dict(doc(num_requests=100, rate_per_s=50.0))
    recorder = ActivityRecorder(3)
    simulation = Simulation(api.engine_for(scenario))
    assert simulation.core.recorder is None  # normal runs: no recorder
    recorder.attach(simulation.cores)
    assert recorder.attached and simulation.core.recorder is recorder
    work = generate_open_loop(scenario.workload, np.random.default_rng(0))
    simulation.run(work)
    assert not recorder.attached and simulation.core.recorder is None
    frame = recorder.frame()
    assert set(frame["request_id"]) == {0, 1, 2}
    # Every prompt token of every traced request was computed in a recorded chunk.
    prefill = frame[frame["kind"] == "prefill"].groupby("request_id")["num_tokens"].sum()
    assert prefill.to_dict() == {0: 100, 1: 100, 2: 100}
    assert frame["start_s"].max() < float(simulation.core.steps.frame()["end_s"].iloc[-1])


def test_zero_traced_requests_records_nothing() -> None:
    recorder = ActivityRecorder(0)
    recorder.attach([])
    assert not recorder.attached and len(recorder.frame()) == 0
    with pytest.raises(ValueError, match="num_requests"):
        ActivityRecorder(-1)


def test_recorded_and_reconstructed_spans_agree_without_preemption() -> None:
    result, _ = traced(doc(num_requests=40, rate_per_s=40.0), num_traced=40)
    recorded = result.spans(40)
    raw = result.raw  # reconstructed from the records alone:
    other = pd.DataFrame(
        reconstructed_spans(raw.records, raw.step_table, raw.later_runs, 40), columns=SPAN_COLUMNS
    )
    for frame in (recorded, other):
        bounds = frame.groupby("request_id").agg(start=("start_s", "min"), end=("end_s", "max"))
        requests = result.raw.requests.set_index("request_id").loc[bounds.index]
        assert bounds["start"].to_numpy() == pytest.approx(requests["arrival_s"].to_numpy())
        assert bounds["end"].to_numpy() == pytest.approx(requests["finish_s"].to_numpy())
    for phase in ("way_in", "detokenize"):
        a = recorded[recorded.phase == phase].set_index("request_id")
        b = other[other.phase == phase].set_index("request_id")
        assert (a["end_s"] - a["start_s"]).to_numpy() == pytest.approx(
            (b["end_s"] - b["start_s"]).to_numpy()
        )
    # The prefill of the rebuilt spans covers the recorded chunks (and any wait between them).
    chunks = recorded[recorded.phase == "prefill"].groupby("request_id")
    whole = other[other.phase == "prefill"].set_index("request_id")
    assert chunks["end_s"].max().to_numpy() == pytest.approx(whole["end_s"].to_numpy())


def test_preempted_requests_show_a_preemption_gap() -> None:
    # 24 KV blocks of 16 tokens for 8 requests of 100 + 100 tokens: preemptions.
    document = doc(num_requests=30, rate_per_s=200.0, output=100, engine=POOL_24)
    result, trace = traced(document, num_traced=30)
    check_format(trace)
    check_nesting(trace)
    preempted = result.requests.loc[result.requests["num_preemptions"] > 0, "request_id"]
    assert len(preempted) > 0
    for request_id in preempted.tolist():
        names = [p["name"] for p in phases_of(trace, request_id)]
        assert "preempted" in names
        after = names[names.index("preempted") + 1]
        assert after == "prefill"  # recompute: the prompt (and tokens so far) again
    assert set(result.spans(30)["phase"]) <= set(PHASES)
    # Rebuilt from the records alone, the gap (preemption and recompute) is there too.
    raw = result.raw
    rebuilt = pd.DataFrame(
        reconstructed_spans(raw.records, raw.step_table, raw.later_runs, 30), columns=SPAN_COLUMNS
    )
    for request_id in preempted.tolist():
        mine = rebuilt[rebuilt.request_id == request_id]
        if request_id in raw.later_runs:  # preempted after its first token
            assert "preempted" in set(mine.phase)
        ends = mine["end_s"].to_numpy()
        assert (mine["start_s"].to_numpy()[1:] == ends[:-1]).all()
        finish_s = float(raw.requests.set_index("request_id").loc[request_id, "finish_s"])
        assert ends[-1] == pytest.approx(finish_s)


def test_swap_preemption_is_labelled_swapped() -> None:
    document = doc(
        num_requests=30,
        rate_per_s=200.0,
        output=100,
        engine=POOL_24,
        scheduler={"preemption": "swap"},
    )
    result, trace = traced(document, num_traced=30)
    check_nesting(trace)
    swapped = result.requests.loc[result.requests["num_swaps"] > 0, "request_id"].tolist()
    assert swapped
    for request_id in swapped:
        assert "swapped" in [p["name"] for p in phases_of(trace, request_id)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 1000),
    rate=st.sampled_from([5.0, 40.0, 200.0]),
    blocks=st.sampled_from([None, 30]),
    asynchronous=st.booleans(),
)
def test_any_run_gives_a_well_formed_trace(
    seed: int, rate: float, blocks: int | None, asynchronous: bool
) -> None:
    document = doc(num_requests=25, rate_per_s=rate, output=40, seed=seed)
    document["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": rate}
    document["workload"]["prompt_tokens"] = {"kind": "uniform", "min_tokens": 10, "max_tokens": 200}
    document["engine"] = {"async_scheduling": asynchronous, "num_kv_blocks": blocks}
    if blocks is not None:  # vLLM refuses a pool smaller than one max_model_len request
        document["engine"]["max_model_len_tokens"] = 16 * blocks
    result, trace = traced(document, num_traced=25)
    check_format(trace)
    check_nesting(trace)
    done = result.requests[result.requests["finish_s"].notna()]
    for row in done.to_dict("records"):
        phases = phases_of(trace, int(row["request_id"]))
        assert phases[0]["ts"] == pytest.approx(row["arrival_s"] * 1e6, abs=1e-3)
        end = phases[-1]["ts"] + phases[-1]["dur"]
        assert end == pytest.approx(row["finish_s"] * 1e6, abs=1e-3)
        # Contiguous from arrival to the last streamed token: no hole, no overlap.
        for a, b in itertools.pairwise(phases):
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=1e-3)


@pytest.mark.parametrize(
    "extra",
    [
        {"engine": POOL_24},  # preemptions after the first token: later runs
        {"engine": POOL_24, "cluster": {"num_replicas": 2}},
        {
            "cluster": {
                "disaggregation": {"num_prefill_replicas": 1, "num_decode_replicas": 1},
            }
        },
    ],
)
def test_spans_from_the_compact_log_are_those_from_the_expanded_one(
    extra: dict[str, Any],
) -> None:
    document = doc(num_requests=30, rate_per_s=200.0, output=100, **dict(extra))
    result = api.run(scenario_from_dict(document, "test_request_trace"))
    raw = result.raw
    compact = pd.DataFrame(
        reconstructed_spans(raw.records, raw.step_table, raw.later_runs, 30), columns=SPAN_COLUMNS
    )
    rows = StepTable.from_frame(raw.steps)  # the expanded log, one segment per step
    expanded = pd.DataFrame(
        reconstructed_spans(raw.records, rows, raw.later_runs, 30), columns=SPAN_COLUMNS
    )
    pd.testing.assert_frame_equal(compact, expanded, check_exact=True)
    pd.testing.assert_frame_equal(result.spans(30), compact, check_exact=True)
    if "num_kv_blocks" in document["engine"]:
        assert raw.later_runs  # the token times were searched in the log
