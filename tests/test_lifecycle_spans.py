"""Phase spans and trace events from hand-made logs: the recorder, the span rules, the writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from frontend_frames import step_table

from sim.engine.kv_cache import BlockPool
from sim.engine.lifecycle import ActivityRecorder
from sim.engine.records import RequestTable
from sim.engine.request import Request
from sim.engine.scheduler import ContinuousConfig, EngineCore, SchedulerOutput
from sim.metrics.lifecycle import SPAN_COLUMNS, SpanRow, reconstructed_spans, recorded_spans
from sim.metrics.trace import (
    MAX_STEPS,
    replica_events,
    request_events,
    steps_in,
    trace_document,
    write_trace,
)

NAN = float("nan")


def core() -> EngineCore:
    return EngineCore(ContinuousConfig().build(), BlockPool(100, 16), 4096)


def request_row(request_id: int = 0, **fields: Any) -> dict[str, Any]:
    row = {
        "request_id": request_id,
        "arrival_s": 0.0,
        "ready_s": 0.1,
        "first_scheduled_s": 0.2,
        "first_token_s": 0.5,
        "finish_s": 1.0,
        "num_prompt_tokens": 10,
        "num_output_tokens": 4,
        "num_generated_tokens": 4,
        "num_preemptions": 0,
        "num_swaps": 0,
        "replica": 0,
        "rejection_reason": None,
    }
    row.update(fields)
    return row


def activity_row(kind: str, start_s: float, end_s: float, **fields: Any) -> dict[str, Any]:
    row = {
        "request_id": 0,
        "replica": 0,
        "kind": kind,
        "start_s": start_s,
        "end_s": end_s,
        "num_tokens": 1,
        "num_preemptions": 0,
        "num_swaps": 0,
    }
    row.update(fields)
    return row


def spans_frame(rows: list[SpanRow]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=SPAN_COLUMNS)


def phases(spans: pd.DataFrame) -> list[tuple[str, float, float]]:
    return [
        (p, round(a, 9), round(b, 9)) for p, a, b in spans[["phase", "start_s", "end_s"]].values
    ]


# -- the recorder ---------------------------------------------------------------


def test_recorder_logs_a_chunk_then_the_decode_run_it_starts() -> None:
    engine = core()
    recorder = ActivityRecorder(2)
    recorder.attach([engine])
    first, other = Request(0, 0.0, 10, 5), Request(5, 0.0, 10, 5)  # id 5 is not tracked
    first.num_computed_tokens = 6  # 4 prompt tokens left: this chunk ends the prefill
    plan = SchedulerOutput(scheduled=[(first, 4), (other, 10)])
    recorder.on_commit(engine, plan, 1.0, [1.5, 1.6, 1.7])
    frame = recorder.frame()
    assert frame[["kind", "start_s", "end_s", "num_tokens"]].values.tolist() == [
        ["prefill", 1.0, 1.5, 4],
        ["decode", 1.5, 1.7, 2],
    ]
    assert set(frame["request_id"]) == {0}


def test_recorder_logs_a_decode_run_as_one_row() -> None:
    engine = core()
    recorder = ActivityRecorder(1)
    recorder.attach([engine])
    request = Request(0, 0.0, 10, 50)
    request.num_generated_tokens, request.num_computed_tokens = 3, 12  # decoding
    recorder.on_commit(engine, SchedulerOutput(scheduled=[(request, 1)]), 2.0, [2.1, 2.2, 2.3, 2.4])
    row = recorder.frame().iloc[0]
    assert (row["kind"], row["start_s"], row["end_s"], row["num_tokens"]) == ("decode", 2.0, 2.4, 4)


def test_recorder_keeps_preemption_counts_and_replica() -> None:
    engine = EngineCore(ContinuousConfig().build(), BlockPool(100, 16), 4096, replica=3)
    recorder = ActivityRecorder(1)
    recorder.attach([engine])
    request = Request(0, 0.0, 10, 50)
    request.num_preemptions, request.num_swaps = 2, 1
    recorder.on_commit(engine, SchedulerOutput(scheduled=[(request, 10)]), 0.0, [0.1])
    row = recorder.frame().iloc[0]
    assert (row["replica"], row["num_preemptions"], row["num_swaps"]) == (3, 2, 1)


def test_recorder_detaches_after_its_last_request_finished_and_skips_rejected_ones() -> None:
    engine = core()
    recorder = ActivityRecorder(2)
    recorder.attach([engine])
    engine.rejections[1] = "too long"  # request 1 will never be scheduled
    request = Request(0, 0.0, 10, 1)
    recorder.on_commit(engine, SchedulerOutput(scheduled=[(request, 10)]), 0.0, [0.1])
    assert recorder.attached
    request.finish_s = 0.1  # what the core's commit did
    recorder.on_commit(engine, SchedulerOutput(), 0.1, [0.2])
    assert not recorder.attached and engine.recorder is None


def test_recorder_stays_while_a_tracked_request_runs() -> None:
    engine = core()
    recorder = ActivityRecorder(1)
    recorder.attach([engine])
    request = Request(0, 0.0, 10, 5)
    for step in range(3):
        recorder.on_commit(engine, SchedulerOutput(scheduled=[(request, 1)]), step, [step + 1.0])
    assert recorder.attached and engine.recorder is recorder


# -- spans from a recorded log -------------------------------------------------


def test_recorded_spans_chunks_wait_and_merged_decode_runs() -> None:
    requests = pd.DataFrame([request_row(finish_s=1.01, engine_finish_s=1.0)])
    activity = pd.DataFrame(
        [
            activity_row("prefill", 0.2, 0.3, num_tokens=6),
            activity_row("prefill", 0.35, 0.5, num_tokens=4),  # a skipped step between chunks
            activity_row("decode", 0.5, 0.7, num_tokens=2),
            activity_row("decode", 0.7, 1.0, num_tokens=1),  # back to back: merged
        ]
    )
    spans = spans_frame(recorded_spans(RequestTable.from_frame(requests), activity, 10))
    assert phases(spans) == [
        ("way_in", 0.0, 0.1),
        ("waiting", 0.1, 0.2),
        ("prefill", 0.2, 0.3),
        ("waiting", 0.3, 0.35),
        ("prefill", 0.35, 0.5),
        ("decode", 0.5, 1.0),
        ("detokenize", 1.0, 1.01),
    ]
    assert spans["num_tokens"].tolist() == [0, 0, 6, 0, 4, 3, 0]


@pytest.mark.parametrize(("num_swaps", "label"), [(0, "preempted"), (1, "swapped")])
def test_recorded_spans_label_the_gap_after_a_preemption(num_swaps: int, label: str) -> None:
    requests = pd.DataFrame([request_row()])
    activity = pd.DataFrame(
        [
            activity_row("prefill", 0.2, 0.5, num_tokens=10),
            activity_row("decode", 0.5, 0.6),
            activity_row("prefill", 0.8, 0.9, num_preemptions=1, num_swaps=num_swaps),
            activity_row("decode", 0.9, 1.0, num_preemptions=1, num_swaps=num_swaps),
        ]
    )
    names = [
        p
        for p, _, _ in phases(
            spans_frame(recorded_spans(RequestTable.from_frame(requests), activity, 10))
        )
    ]
    assert names == ["way_in", "waiting", "prefill", "decode", label, "prefill", "decode"]


def test_recorded_spans_mark_a_move_to_another_replica_as_kv_transfer() -> None:
    requests = pd.DataFrame([request_row(replica=1)])
    activity = pd.DataFrame(
        [
            activity_row("prefill", 0.2, 0.5, num_tokens=10, replica=0),
            activity_row("decode", 0.6, 1.0, num_tokens=3, replica=1),
        ]
    )
    spans = spans_frame(recorded_spans(RequestTable.from_frame(requests), activity, 10))
    assert phases(spans)[3:] == [("kv_transfer", 0.5, 0.6), ("decode", 0.6, 1.0)]
    assert spans["replica"].tolist()[2:] == [0, 1, 1]


def test_recorded_spans_keep_only_the_first_requests() -> None:
    rows = [request_row(i, arrival_s=float(i), ready_s=i + 0.1) for i in (4, 2, 0, 1, 3)]
    requests = pd.DataFrame(rows).sort_values("request_id")  # a table is in id order
    spans = spans_frame(
        recorded_spans(
            RequestTable.from_frame(requests), pd.DataFrame([activity_row("decode", 0.5, 1.0)]), 3
        )
    )
    assert sorted(set(spans["request_id"])) == [0, 1, 2]


# -- spans rebuilt from the records ---------------------------------------------


def test_reconstructed_spans_of_a_plain_request() -> None:
    requests = pd.DataFrame(
        [
            request_row(
                first_token_s=0.52, finish_s=1.02, engine_first_token_s=0.5, engine_finish_s=1.0
            )
        ]
    )
    spans = spans_frame(
        reconstructed_spans(RequestTable.from_frame(requests), step_table({"end_s": []}), {}, 5)
    )
    assert phases(spans) == [
        ("way_in", 0.0, 0.1),
        ("waiting", 0.1, 0.2),
        ("prefill", 0.2, 0.5),
        ("decode", 0.5, 1.0),
        ("detokenize", 1.0, 1.02),
    ]
    assert spans["num_tokens"].tolist() == [0, 0, 10, 3, 0]


def test_reconstructed_spans_split_decode_at_a_preemption() -> None:
    # Steps end every 0.1 s; tokens at 0.5, 0.6 (run 1) and 0.9, 1.0 (run 2, after recompute).
    steps = step_table(
        {
            "start_s": np.arange(0.0, 1.0, 0.1),
            "end_s": np.arange(0.1, 1.05, 0.1),
            "replica": 0,
        }
    )
    requests = pd.DataFrame([request_row(num_preemptions=1)])
    spans = spans_frame(
        reconstructed_spans(RequestTable.from_frame(requests), steps, {0: [(0.9, 2)]}, 5)
    )
    assert phases(spans)[2:] == [
        ("prefill", 0.2, 0.5),
        ("decode", 0.5, 0.6),
        ("preempted", 0.6, 0.9),
        ("decode", 0.9, 1.0),
    ]


def test_reconstructed_spans_fall_back_to_one_decode_span_when_tokens_cannot_be_placed() -> None:
    requests = pd.DataFrame([request_row(num_preemptions=1)])
    steps = step_table({"start_s": [0.0], "end_s": [0.05], "replica": [0]})
    spans = spans_frame(
        reconstructed_spans(RequestTable.from_frame(requests), steps, {0: [(0.9, 2)]}, 5)
    )
    assert phases(spans)[-1] == ("decode", 0.5, 1.0)


# -- trace events ----------------------------------------------------------------


def test_request_events_in_microseconds_with_a_parent_and_a_ttft_instant() -> None:
    spans = spans_frame([(7, 0, "way_in", 1.0, 1.25, 0), (7, 0, "decode", 1.25, 2.0, 5)])
    row = request_row(7, arrival_s=1.0, first_token_s=1.5, finish_s=2.0)
    events = request_events(spans, RequestTable.from_frame(pd.DataFrame([row])))
    spans_out = [e for e in events if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"], e["tid"]) for e in spans_out] == [
        ("request 7", 1e6, 1e6, 7),
        ("way_in", 1e6, 0.25e6, 7),
        ("decode", 1.25e6, 0.75e6, 7),
    ]
    (instant,) = [e for e in events if e["ph"] == "i"]
    assert instant["ts"] == 1.5e6 and instant["args"]["ttft_ms"] == pytest.approx(500.0)
    names = {(e["name"], e["args"].get("name")) for e in events if e["ph"] == "M"}
    assert ("thread_name", "request 7") in names and ("process_name", "requests") in names


def test_request_without_a_first_token_has_no_instant() -> None:
    spans = spans_frame([(0, 0, "way_in", 0.0, 0.5, 0)])
    requests = RequestTable.from_frame(pd.DataFrame([request_row(first_token_s=NAN, finish_s=NAN)]))
    assert not [e for e in request_events(spans, requests) if e["ph"] == "i"]


def test_replica_events_keep_the_window_cap_and_sample_kv_at_each_step() -> None:
    steps = step_table(
        {
            "start_s": [0.0, 1.0, 2.0, 3.0],
            "end_s": [1.0, 2.0, 3.0, 4.0],
            "num_prefill_tokens": [100, 50, 0, 0],
            "num_decode_seqs": [0, 2, 2, 2],
            "replica": [0, 0, 0, 0],
        }
    )
    series = pd.DataFrame(
        {
            "time_s": [0.0, 1.0, 2.0, 3.0],
            "num_waiting": [3, 2, 1, 0],
            "num_running": [1, 2, 3, 3],
            "num_kv_blocks_used": [10, 20, 30, 40],
            "replica": [0, 0, 0, 0],
        }
    )
    events = replica_events(steps_in(steps, (0.5, 2.5), MAX_STEPS), series, (0.5, 2.5))
    steps_out = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in steps_out] == ["prefill", "mixed", "decode"]
    assert [e["args"]["num_kv_blocks_used"] for e in steps_out] == [10, 20, 30]
    assert all(e["pid"] == 2 for e in events)
    counters = [e for e in events if e["ph"] == "C"]
    assert [e["args"] for e in counters if e["name"] == "queue"] == [
        {"waiting": 2, "running": 2},
        {"waiting": 1, "running": 3},
    ]
    one = replica_events(steps_in(steps, (0.5, 2.5), 1), series, (0.5, 2.5), 1)
    capped = [e for e in one if e["ph"] == "X"]
    assert len(capped) == 1


def test_trace_document_round_trips_as_strict_json(tmp_path: Path) -> None:
    spans = spans_frame([(0, 0, "way_in", 0.0, 0.1, 0)])
    requests = RequestTable.from_frame(pd.DataFrame([request_row()]))
    steps = step_table(
        {"start_s": [0.0], "end_s": [0.1], "num_prefill_tokens": [1], "num_decode_seqs": [0]}
    )
    series = pd.DataFrame(
        {"time_s": [0.0], "num_waiting": [0], "num_running": [1], "num_kv_blocks_used": [1]}
    )
    document = trace_document(spans, requests, steps, series, {"scenario": "x"})
    path = write_trace(tmp_path / "trace.json", document)
    loaded = json.loads(path.read_text())
    assert loaded == document and loaded["otherData"]["scenario"] == "x"
    empty = trace_document(spans.iloc[0:0], requests, steps, series)
    assert [e["ph"] for e in empty["traceEvents"]] == ["M"]
