"""The step log by runs (``sim.engine.step_runs``).

It must expand to exactly the rows a log of one row per step held: checked
against such a log, kept here as the reference, for random sequences of
``add_step`` and ``add_decode_run``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import step_runs
from sim.engine.step_runs import STEP_COLUMNS, Delivered, StepLog, StepRuns, StepTable

Row = tuple[float, float, int, int, int, int]


class RowLog:
    """The former step log: one row per step, a run written as k rows."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add_step(self, start_s: float, end_s: float, *counts: int) -> None:
        prefill, decode, itl, outputs = counts
        self.rows.append((start_s, end_s, prefill, decode, itl, outputs))

    def add_decode_run(
        self, start_s: float, ends_s: list[float], num_decode_seqs: int, num_itl_tokens: int
    ) -> None:
        if not ends_s:  # (the former log wrote a lone start here; the engine never asks)
            return
        starts = [start_s, *ends_s[:-1]]
        for start, end in zip(starts, ends_s, strict=True):
            self.rows.append((start, end, 0, num_decode_seqs, num_itl_tokens, num_itl_tokens))

    def frame(self) -> pd.DataFrame:
        columns: list[tuple[Any, ...]] = list(zip(*self.rows, strict=True))
        columns = columns or [() for _ in STEP_COLUMNS]
        return pd.DataFrame(
            {
                name: np.asarray(values, dtype=dtype)
                for (name, dtype), values in zip(STEP_COLUMNS.items(), columns, strict=True)
            }
        )


counts = st.integers(0, 1000)
durations = st.floats(1e-4, 1.0)
# An action: ("step", gap before it, duration, 4 counts) or ("run", gap, durations, 2 counts).
actions = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.floats(0, 1), durations, st.tuples(*[counts] * 4)),
        st.tuples(
            st.just("run"),
            st.floats(0, 1),
            st.lists(durations, min_size=0, max_size=8),
            st.tuples(counts, counts),
        ),
    ),
    max_size=30,
)


def play(script: list[tuple[Any, ...]], logs: list[Any]) -> None:
    """Feed the same actions to every log, with times as an engine makes them."""
    now_s = 0.0
    for kind, gap_s, durations_s, numbers in script:
        start_s = now_s + gap_s
        if kind == "step":
            now_s = start_s + durations_s
            for log in logs:
                log.add_step(start_s, now_s, *numbers)
        else:
            ends = list(start_s + np.cumsum(durations_s)) if durations_s else []
            for log in logs:
                log.add_decode_run(start_s, list(ends), *numbers)
            now_s = ends[-1] if ends else start_s


@settings(max_examples=200, deadline=None)
@given(script=actions)
def test_the_compact_log_expands_to_the_rows_of_a_row_per_step_log(
    script: list[tuple[Any, ...]],
) -> None:
    log, rows = StepLog(), RowLog()
    play(script, [log, rows])
    got, want = log.frame(), rows.frame()
    assert len(log.ends) == len(want)
    assert list(got.columns) == list(STEP_COLUMNS)
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    runs = log.runs(replica=3)
    for name in ("num_prefill_tokens", "num_decode_seqs", "num_itl_tokens", "num_outputs"):
        assert runs.total(name) == int(want[name].sum())
    # One segment per add_step and per non-empty run.
    assert runs.segments["start_s"].size == sum(
        1 for kind, _, d, _ in script if kind == "step" or d
    )


def test_a_run_is_one_segment_whose_steps_start_where_the_last_ended() -> None:
    log = StepLog()
    log.add_step(0.0, 1.0, 16, 0, 0, 1)
    log.add_decode_run(1.0, [1.5, 2.25, 3.0], 1, 1)
    runs = log.runs()
    assert runs.segments["num_steps"].tolist() == [1, 3]
    assert runs.segments["start_s"].tolist() == [0.0, 1.0]
    assert runs.end_s.tolist() == [1.0, 1.5, 2.25, 3.0]
    assert runs.column("start_s").tolist() == [0.0, 1.0, 1.5, 2.25]
    assert runs.column("num_prefill_tokens").tolist() == [16, 0, 0, 0]
    assert runs.column("num_outputs").tolist() == [1, 1, 1, 1]
    assert runs.total("num_decode_seqs") == 3


def test_an_empty_run_logs_nothing() -> None:
    log = StepLog()
    log.add_decode_run(0.5, [], 4, 4)
    assert len(log.ends) == 0
    assert log.runs().segments["start_s"].size == 0
    assert len(log.frame()) == 0


def test_the_views_share_memory_with_the_log() -> None:
    log = StepLog()
    log.add_step(0.0, 1.0, 1, 0, 0, 1)
    runs = log.runs()
    assert not runs.end_s.flags.owndata
    assert np.shares_memory(runs.end_s, log.frame()["end_s"].to_numpy())


def test_unknown_columns_and_replicas_are_errors() -> None:
    runs = StepLog().runs()
    with pytest.raises(KeyError, match="no step column 'bogus'"):
        runs.column("bogus")
    with pytest.raises(KeyError, match="no steps of replica 5"):
        StepTable((runs,)).part(5)


def two_replicas() -> StepTable:
    a, b = StepLog(), StepLog()
    a.add_step(0.0, 1.0, 8, 0, 0, 1)
    a.add_decode_run(1.0, [2.0, 3.0], 1, 1)
    b.add_step(0.5, 0.75, 4, 0, 0, 1)
    return StepTable((a.runs(0), b.runs(1)))


def test_a_table_expands_replica_after_replica_with_a_replica_column() -> None:
    table = two_replicas()
    frame = table.frame()
    assert list(frame.columns) == [*STEP_COLUMNS, "replica"]
    assert frame["replica"].dtype == np.int32
    assert frame["replica"].tolist() == [0, 0, 0, 1]
    assert frame["end_s"].tolist() == [1.0, 2.0, 3.0, 0.75]
    assert frame.index.tolist() == [0, 1, 2, 3]
    assert table.num_steps == 4
    assert table.total("num_prefill_tokens") == 12
    assert table.part(1).end_s.tolist() == [0.75]


def test_delivery_times_come_last_in_the_frame() -> None:
    table = two_replicas()
    # Every step has one output: delivered 0.125 s after its end, 0.0625 s for the output.
    rule = Delivered(step_s=0.125, per_output_s=0.0625)
    delivered = StepTable(tuple(part.with_delivery(rule) for part in table.parts))
    frame = delivered.frame()
    assert list(frame.columns) == [*STEP_COLUMNS, "replica", "delivered_s"]
    assert frame["delivered_s"].tolist() == [1.1875, 2.1875, 3.1875, 0.9375]
    assert delivered.part(0).column("delivered_s").tolist() == [1.1875, 2.1875, 3.1875]


def test_lagged_steps_keep_their_own_times() -> None:
    rule = Delivered(0.5, 0.25, np.array([1, 3]), np.array([7.0, 9.0]))
    ends = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    outputs = np.array([1, 2, 0, 1, 4], dtype=np.int32)
    got = rule.times_s(ends, outputs)
    np.testing.assert_array_equal(got, [0.75, 7.0, np.nan, 9.0, 5.5])
    # A block from step 2 on: only the exceptions inside it apply, shifted.
    np.testing.assert_array_equal(rule.times_s(ends[2:], outputs[2:], 2), [np.nan, 9.0, 5.5])


def test_an_empty_table_has_the_columns_and_dtypes() -> None:
    frame = StepTable(()).frame()
    assert len(frame) == 0
    assert list(frame.columns) == [*STEP_COLUMNS, "replica"]
    assert frame["num_itl_tokens"].dtype == np.int32


def test_step_runs_are_frozen() -> None:
    runs: StepRuns = StepLog().runs()
    with pytest.raises(AttributeError):
        runs.replica = 2  # type: ignore[misc]


def test_delivery_times_by_slices_equal_those_in_one_go(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    ends = np.cumsum(rng.random(50) * 0.01)
    outputs = rng.integers(0, 4, 50).astype(np.int32)
    rule = Delivered(1e-3, 3e-4, np.array([4, 31]), np.array([1.0, 2.0]))
    whole = rule.times_s(ends, outputs)
    monkeypatch.setattr(step_runs, "SLICE_STEPS", 7)
    assert rule.times_s(ends, outputs).tobytes() == whole.tobytes()
    assert np.isnan(whole[outputs == 0]).all() and whole[31] == 2.0
