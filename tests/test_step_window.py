"""The steps of a time window, read from the compact step log without expanding it.

``StepRuns.overlapping`` and ``StepRuns.rows`` against a filter of ``frame()``
on random logs; ``trace_document`` on the compact log and series columns
against the same on their frames (the steps read back by ``StepTable.from_frame``,
one segment per step), for real runs; ``Result.trace`` leaves the
step log compact.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_step_table import build, replica_script

from sim import api
from sim.engine.step_runs import COUNT_COLUMNS, StepLog, StepRuns, StepTable
from sim.metrics.trace import replica_events, steps_in, trace_document

SCENARIOS = Path(__file__).parent.parent / "scenarios"
ALL = ("start_s", "end_s", *COUNT_COLUMNS)


def frame_window(part: StepRuns, start_s: float, end_s: float) -> dict[str, np.ndarray]:
    """The reference: expand, then keep the rows that overlap the window."""
    frame = part.frame()
    keep = (frame["end_s"] > start_s) & (frame["start_s"] < end_s)
    return {name: frame[name].to_numpy()[keep.to_numpy()] for name in ALL}


@settings(max_examples=200, deadline=None)
@given(
    script=replica_script,
    bounds=st.tuples(st.floats(-0.1, 1.0), st.floats(0.0, 1.0)),
)
def test_the_window_of_the_compact_log_equals_that_of_its_frame(
    script: list[tuple[float, ...]], bounds: tuple[float, float]
) -> None:
    part = build([script]).parts[0]
    start_s, width_s = bounds
    index = part.overlapping(start_s, start_s + width_s)
    assert np.all(np.diff(index) > 0)  # in order, each once
    got = part.rows(index)
    want = frame_window(part, start_s, start_s + width_s)
    for name in ALL:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@settings(max_examples=100, deadline=None)
@given(script=replica_script, data=st.data())
def test_rows_at_any_steps_equal_the_frame_rows(
    script: list[tuple[float, ...]], data: st.DataObject
) -> None:
    part = build([script]).parts[0]
    picks = st.lists(st.integers(0, max(part.num_steps - 1, 0)), max_size=10)
    index = np.array(data.draw(picks) if part.num_steps else [], dtype=np.int64)
    frame = part.frame()
    got = part.rows(index)
    for name in ALL:
        np.testing.assert_array_equal(got[name], frame[name].to_numpy()[index], err_msg=name)


def test_a_window_by_hand() -> None:
    # A prefill step [0, 1), idle until 2, then a decode run ending at 2.5, 3, 3.5.
    log = StepLog()
    log.add_step(0.0, 1.0, 100, 0, 0, 1)
    log.add_step(2.0, 2.5, 0, 1, 1, 1)
    log.add_decode_run(2.5, [3.0, 3.5], 1, 1)
    part = log.runs()
    assert part.overlapping(0.5, 2.0).tolist() == [0]  # the idle gap holds no step
    assert part.overlapping(1.0, 2.01).tolist() == [1]
    assert part.overlapping(2.9, 3.2).tolist() == [2, 3]
    assert part.overlapping(4.0, 5.0).tolist() == []
    assert part.rows(np.array([3, 0]))["start_s"].tolist() == [3.0, 0.0]
    with pytest.raises(KeyError, match="no step column 'queue'"):
        part.rows(np.array([0]), ("queue",))


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("chat.yaml", ["workload.num_requests=200"]),
        ("replicas.yaml", ["workload.num_requests=200"]),
        ("disaggregated.yaml", ["workload.num_requests=120"]),
        # preempts (300 x 16 tokens: the longest request vLLM would take on such a pool)
        (
            "chat.yaml",
            [
                "workload.num_requests=300",
                "engine.num_kv_blocks=300",
                "engine.max_model_len_tokens=4800",
            ],
        ),
    ],
)
def test_the_trace_of_the_compact_log_equals_that_of_the_frames(
    name: str, overrides: list[str]
) -> None:
    result = api.run(SCENARIOS / name, overrides, trace_requests=40, workers=1)
    raw = result.raw
    compact = result.trace()
    assert "steps" not in vars(raw) and "timeseries" not in vars(raw)  # nothing expanded
    spans = result.spans(40)
    metadata = {"scenario": result.scenario.name, "num_traced_requests": 40}
    rows = StepTable.from_frame(raw.steps)
    assert trace_document(spans, raw.records, rows, raw.timeseries, metadata) == compact
    assert any(event.get("cat") == "step" for event in compact["traceEvents"])


def test_the_step_cap_holds_on_the_compact_log() -> None:
    result = api.run(SCENARIOS / "chat.yaml", ["workload.num_requests=100"], workers=1)
    raw = result.raw
    window = (0.0, float(np.max(raw.step_table.parts[0].end_s)))
    for cap in (1, 7):
        compact = replica_events(steps_in(raw.step_table, window, cap), raw.series, window, cap)
        expanded = replica_events(
            steps_in(StepTable.from_frame(raw.steps), window, cap), raw.timeseries, window, cap
        )
        assert compact == expanded
        assert sum(event["ph"] == "X" for event in compact) == cap
