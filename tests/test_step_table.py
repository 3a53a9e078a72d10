"""Post-processing on the compact step log gives what it gave on the expanded one.

Delivery times (``deliver`` against ``add_delivery``), client-time lookups
(``Delivery.of``), ITL pairs and statistics (``sim.metrics.itl``), the
speculative summary and token times, each computed on a random
several-replica ``StepTable`` and on its ``frame()`` (read off its rows, or as
``StepTable.from_frame``, one segment per step): the same numbers, to the bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from frontend_frames import add_delivery, frame_delivery, frame_itl_gaps_s
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.records import RequestTable
from sim.engine.speculative import SpeculativeConfig, speculative_summary
from sim.engine.step_runs import StepLog, StepTable
from sim.metrics import itl
from sim.metrics.itl import itl_distribution, step_itl_gaps_s
from sim.serving.cluster import request_token_times_s
from sim.serving.frontend import Delivery, deliver

# A replica's script: per segment (duration of its first step, run length, counts).
segment = st.tuples(
    st.floats(1e-3, 0.05),  # first step
    st.lists(st.floats(1e-3, 0.05), max_size=6),  # the decode run after it
    st.integers(0, 300),  # prefill tokens
    st.integers(0, 8),  # decode seqs / ITL tokens / outputs of the run
    st.integers(0, 8),  # outputs of the first step
    st.floats(0, 0.02),  # idle time before it
)
replica_script = st.lists(segment, max_size=12)


def build(scripts: list[list[tuple[Any, ...]]]) -> StepTable:
    parts = []
    for replica, script in enumerate(scripts):
        log = StepLog()
        now_s = 0.01 * replica  # replicas interleave in time
        for first_s, run_s, prefill, seqs, outputs, idle_s in script:
            start_s = now_s + idle_s
            now_s = start_s + first_s
            log.add_step(start_s, now_s, prefill, seqs, min(seqs, outputs), outputs)
            ends = list(now_s + np.cumsum(run_s)) if run_s else []
            log.add_decode_run(now_s, ends, seqs, seqs)
            now_s = ends[-1] if ends else now_s
        parts.append(log.runs(replica))
    return StepTable(tuple(parts))


frontends = st.sampled_from([(0.0, 0.0), (1e-4, 1e-5), (2e-3, 5e-4), (0.02, 0.01)])


@settings(max_examples=150, deadline=None)
@given(scripts=st.lists(replica_script, min_size=1, max_size=3), frontend=frontends)
def test_delivery_and_itl_on_the_table_equal_those_on_its_frame(
    scripts: list[list[tuple[Any, ...]]],
    frontend: tuple[float, float],
) -> None:
    table = build(scripts)
    step_s, per_output_s = frontend
    # The engine's own log (durations), then the client's (delivery times).
    extra = np.array([0.004, 0.25])
    for steps in (table, deliver(table, step_s, per_output_s)):
        frame = steps.frame()
        got, want = step_itl_gaps_s(steps, extra), frame_itl_gaps_s(frame, extra)
        assert got[0].tobytes() == want[0].tobytes()
        assert got[1].tobytes() == want[1].tobytes()
        rows = StepTable.from_frame(frame)
        assert itl_distribution(steps, extra) == itl_distribution(rows, extra)
        if len(frame):  # an empty frame is an empty table, whatever its columns
            pd.testing.assert_frame_equal(rows.frame(), frame, check_exact=True)
    delivered = deliver(table, step_s, per_output_s).frame()
    expected = add_delivery(table.frame(), step_s, per_output_s)
    pd.testing.assert_frame_equal(delivered, expected, check_exact=True)
    # Client times of every step end, asked of its own replica and of another.
    by_table = Delivery.of(deliver(table, step_s, per_output_s))
    by_frame = frame_delivery(expected)
    has = expected["num_outputs"].to_numpy() > 0
    times = expected["end_s"].to_numpy()[has]
    owners = expected["replica"].to_numpy()[has]
    for asked in (owners, np.zeros_like(owners)):
        a, b = by_table.client_s(times, asked), by_frame.client_s(times, asked)
        assert a.tobytes() == b.tobytes()


def test_small_blocks_give_the_same_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    table = deliver(
        build([[(0.01, [0.01, 0.02], 64, 3, 1, 0.0)] * 5, [(0.02, [0.01], 32, 2, 2, 0.001)] * 4]),
        1e-3,
        1e-4,
    )
    whole = step_itl_gaps_s(table)
    monkeypatch.setattr(itl, "_SEGMENTS_PER_BLOCK", 1)
    blocked = step_itl_gaps_s(table)
    assert whole[0].tobytes() == blocked[0].tobytes()
    assert whole[1].tobytes() == blocked[1].tobytes()
    # 15 + 8 steps, all with ITL tokens; unused: the very first step (no step
    # before it) and replica 1's first (its row before is replica 0's last, later).
    assert whole[0].size == 15 - 1 + 8 - 1


def test_itl_pairs_by_hand() -> None:
    log = StepLog()
    log.add_step(0.0, 1.0, 8, 0, 0, 2)  # two first tokens
    log.add_decode_run(1.0, [1.5, 2.5], 2, 2)  # two gaps of 0.5 s, then two of 1.0 s
    table = StepTable((log.runs(),))
    gaps, weights = step_itl_gaps_s(table, [0.25])
    assert gaps.tolist() == [0.5, 1.0, 0.25]
    assert weights.tolist() == [2.0, 2.0, 1.0]
    # Delivered 0.125 s after each end (no lag): the gaps between deliveries are the same.
    gaps, weights = step_itl_gaps_s(deliver(table, 0.125, 0.0))
    assert gaps.tolist() == [0.5, 1.0] and weights.tolist() == [2.0, 2.0]


def test_delivery_needs_delivery_times() -> None:
    with pytest.raises(ValueError, match="replica 0's steps have no delivery times"):
        Delivery.of(StepTable((StepLog().runs(),)))


def test_delivery_looks_elsewhere_only_when_its_replica_lacks_the_time() -> None:
    table = deliver(build([[(0.5, [], 8, 1, 1, 0.0)], [(0.25, [], 8, 1, 1, 0.0)]]), 0.0, 0.0)
    delivery = Delivery.of(table)
    assert delivery._everywhere is None
    ends = [table.part(0).end_s[0], table.part(1).end_s[0]]
    assert delivery.client_s(ends, [0, 1]).tolist() == ends
    assert delivery._everywhere is None  # nothing copied for the usual lookups
    assert delivery.client_s([ends[1]], [0]).tolist() == [ends[1]]  # found on replica 1
    assert delivery._everywhere is not None


def test_speculative_summary_counts_decode_slots_without_expanding() -> None:
    table = build([[(0.01, [0.01] * 4, 10, 3, 2, 0.0)] * 2])
    requests = RequestTable(
        {"request_id": np.arange(3), "num_generated_tokens": np.array([20, 11, 0])}, {}
    )
    config = SpeculativeConfig(num_draft_tokens=3, acceptance_rate=0.7, draft_cost_fraction=0.1)
    slots = int(table.frame()["num_decode_seqs"].sum())  # expanded, one row per step
    summary = speculative_summary(config, requests, table)
    assert summary["speculative_tokens_per_step"] == (20 - 1 + 11 - 1) / slots
    assert table.total("num_decode_seqs") == 2 * 5 * 3


def test_token_times_from_the_table_equal_those_from_its_frame() -> None:
    table = build([[(0.01, [0.01] * 4, 10, 1, 1, 0.0)] * 3, [(0.02, [0.02] * 3, 5, 1, 1, 0.0)]])
    frame = table.frame()
    first_s = float(table.part(0).end_s[0])
    runs = [(float(table.part(0).end_s[5]), 3)]
    for replica, prefill in ((0, None), (1, 0)):
        count = 6 if prefill is None else 4
        later = runs if prefill is None else [(float(table.part(1).end_s[0]), 1)]
        a = request_token_times_s(table, first_s, count, later, replica, prefill)
        b = request_token_times_s(
            StepTable.from_frame(frame), first_s, count, later, replica, prefill
        )
        assert a.tobytes() == b.tobytes() and a.size == count


def test_a_lagging_frontend_stores_only_the_lagged_steps() -> None:
    # Steps of 10 ms with 8 outputs, the frontend needs 2 + 8 * 1 ms = 10 ms each: it
    # keeps up; then a burst of 1 ms steps it cannot follow (a busy period).
    scripts = [[(0.01, [0.01] * 5, 0, 8, 8, 0.0), (0.001, [0.001] * 5, 0, 8, 8, 0.5)]]
    table = build(scripts)
    delivered = deliver(table, 0.002, 0.001)
    delivery = delivered.part(0).delivery
    assert delivery is not None
    lagged = delivery.lagged_steps.tolist()
    assert lagged and lagged[0] >= 6  # none among the first six steps
    expected = add_delivery(table.frame(), 0.002, 0.001)
    pd.testing.assert_frame_equal(delivered.frame(), expected, check_exact=True)
    # A frontend that keeps up stores no exception.
    easy = deliver(table, 1e-5, 1e-6).part(0).delivery
    assert easy is not None and easy.lagged_steps.size == 0
