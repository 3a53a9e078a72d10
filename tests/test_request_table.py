"""A run's per-request columns (``RequestTable``) and its frame hold the same table.

The summary of a run is computed from the columns, before (and without) any
frame: each summary function must give, to the bit, what it gives on the
table read back from the frame the table builds (``RequestTable.from_frame``,
how a frame made elsewhere reaches the metrics). Random tables (hypothesis)
cover rejections, unfinished requests, single-token outputs, priorities and
replicas.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.api.result import _policy_summary
from sim.engine.kv_cache import prefix_cache_summary
from sim.engine.records import (
    RECORD_COLUMNS,
    RequestTable,
    completed_mask,
    floats,
    text_dtype,
)
from sim.engine.step_runs import StepTable
from sim.metrics.report import rejection_warning
from sim.metrics.stats import Slo, latency_columns, summarize
from sim.serving.cluster import ClusterConfig, cluster_summary

EXTRA = ("engine_first_token_s", "engine_finish_s")


def table(seed: int, num_rows: int, share_rejected: float, num_priorities: int) -> RequestTable:
    """Random records in the engine's dtypes, ids shuffled then sorted, as a run's."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(10 * num_rows + 1, size=num_rows, replace=False)).astype(np.int64)
    arrival = np.sort(rng.uniform(0, 100, num_rows))
    ready = arrival + rng.uniform(0, 0.01, num_rows)
    scheduled = ready + rng.exponential(0.2, num_rows)
    first = scheduled + rng.exponential(0.05, num_rows)
    finish = first + rng.exponential(2.0, num_rows)
    unfinished = rng.random(num_rows) < 0.1
    finish[unfinished] = np.nan
    first[unfinished & (rng.random(num_rows) < 0.5)] = np.nan
    rejected = rng.random(num_rows) < share_rejected
    for column in (scheduled, first, finish):
        column[rejected] = np.nan
    output = rng.integers(1, 50, num_rows)
    columns: dict[str, Any] = {}
    for name, dtype in RECORD_COLUMNS.items():
        columns[name] = np.zeros(num_rows, dtype=dtype)
    columns |= {
        "request_id": ids,
        "arrival_s": arrival,
        "ready_s": ready,
        "first_scheduled_s": scheduled,
        "first_token_s": first,
        "finish_s": finish,
        "num_prompt_tokens": rng.integers(1, 4000, num_rows),
        "num_output_tokens": output,
        "num_generated_tokens": np.where(rejected, 0, output),
        "num_preemptions": rng.integers(0, 3, num_rows),
        "replica": rng.integers(0, 4, num_rows).astype(np.int32),
        "num_swaps": rng.integers(0, 2, num_rows),
        "priority": rng.integers(0, num_priorities, num_rows),
        "num_prefix_lookups": rng.integers(0, 3, num_rows),
        "num_prefix_query_tokens": rng.integers(0, 5000, num_rows),
        "num_prefix_hit_tokens": rng.integers(0, 500, num_rows),
    }
    reasons = {int(i): f"reason {int(i) % 3}" for i in ids[rejected]}
    requests = RequestTable(columns, reasons)
    requests["engine_first_token_s"] = first - 0.001  # added after, as a run's client times
    requests["engine_finish_s"] = finish - 0.001
    return requests


tables = st.builds(
    table,
    seed=st.integers(0, 2**32 - 1),
    num_rows=st.integers(0, 60),
    share_rejected=st.sampled_from([0.0, 0.2, 0.9]),
    num_priorities=st.integers(1, 3),
)


def no_steps() -> StepTable:
    return StepTable(())


@settings(max_examples=40, deadline=None)
@given(tables)
def test_a_table_summarises_as_its_frame(requests: RequestTable) -> None:
    frame = RequestTable.from_frame(requests.frame())
    slo = Slo(ttft_ms=300, tpot_ms=40)
    assert summarize(requests, no_steps(), [], slo) == summarize(frame, no_steps(), [], slo)
    assert prefix_cache_summary(requests) == prefix_cache_summary(frame)
    assert _policy_summary(requests) == _policy_summary(frame)
    config = ClusterConfig(num_replicas=4)
    assert cluster_summary(requests, config) == cluster_summary(frame, config)
    assert rejection_warning(requests) == rejection_warning(frame)


@settings(max_examples=40, deadline=None)
@given(tables)
def test_masks_and_latencies_are_those_of_the_frame(requests: RequestTable) -> None:
    frame = RequestTable.from_frame(requests.frame())
    assert requests.rejected.tolist() == frame.rejected.tolist()
    assert completed_mask(requests).tolist() == completed_mask(frame).tolist()
    from_frame = latency_columns(frame)
    for name, values in latency_columns(requests).items():
        np.testing.assert_array_equal(values, from_frame[name])


@settings(max_examples=20, deadline=None)
@given(tables)
def test_the_frame_has_the_record_columns_then_the_reason_then_the_engine_times(
    requests: RequestTable,
) -> None:
    frame = requests.frame()
    names = [*RECORD_COLUMNS, "rejection_reason", *EXTRA]
    assert list(frame.columns) == names == requests.columns
    assert len(frame) == len(requests)
    for name in RECORD_COLUMNS:
        assert frame[name].dtype == np.dtype(RECORD_COLUMNS[name])
    # The reason where there is one, missing elsewhere, as text (even with no reason).
    expected = pd.Series(
        [requests.rejections.get(i) for i in frame["request_id"]], dtype=object
    ).astype(text_dtype())
    pd.testing.assert_series_equal(frame["rejection_reason"], expected, check_names=False)
    reasons = requests["rejection_reason"]
    assert list(reasons) == [requests.rejections.get(i) for i in frame["request_id"]]


def test_membership_and_missing_columns() -> None:
    requests = table(0, 5, 0.2, 1)
    assert "rejection_reason" in requests and "arrival_s" in requests
    assert "nonsense" not in requests
    with pytest.raises(ValueError, match=r"requests frame lacks columns \['arrival_s'\]"):
        RequestTable.from_frame(requests.frame().drop(columns="arrival_s"))


def test_an_empty_reason_is_not_a_rejection() -> None:
    requests = table(1, 4, 0.0, 1)
    first = int(requests["request_id"][0])
    second = int(requests["request_id"][1])
    requests.rejections = {first: "", second: "too long"}
    assert requests.rejected.tolist() == [False, True, False, False]
    framed = RequestTable.from_frame(requests.frame())
    assert framed.rejected.tolist() == [False, True, False, False]


def test_numbers_pass_through_floats_without_pandas_and_others_are_coerced() -> None:
    ints = np.array([1, 2, 3], dtype=np.int32)
    assert floats(ints).dtype == np.float64 and floats(ints).tolist() == [1.0, 2.0, 3.0]
    same = np.array([0.5, np.nan])
    assert floats(same) is same  # already float64: no copy
    mixed = np.array(["1.5", "x", None], dtype=object)
    assert np.isnan(floats(mixed)[1:]).all() and floats(mixed)[0] == 1.5


ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=ROOT,
    )
    return done.stdout.strip()


@pytest.mark.parametrize("cluster", [[], ["cluster.num_replicas=3"]])
def test_a_run_summarises_without_pandas_and_builds_its_frames_when_asked(
    cluster: list[str],
) -> None:
    code = (
        "import sys\n"
        "from sim import api\n"
        # cost: roofline, as chat.yaml's H100 kernel tables are pandas frames.
        "r = api.run('scenarios/chat.yaml', "
        f"['workload.num_requests=60', 'cost.kind=roofline', *{cluster!r}])\n"
        "print('pandas' in sys.modules, r.summary['completed'], end=' ')\n"
        "print(len(r.requests), len(r.timeseries) > 0, 'pandas' in sys.modules)\n"
    )
    assert run_python(code) == "False 60 60 True True"


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload.num_requests=120"],
        # Preempted requests (token runs broken), and some turned away (no tokens).
        [
            "workload.num_requests=200",
            "engine.num_kv_blocks=300",
            "engine.max_model_len_tokens=1500",
        ],
    ],
)
def test_token_times_from_the_columns_are_those_from_the_frame(overrides: list[str]) -> None:
    scenarios = Path(__file__).parent.parent / "scenarios"
    result = api.run(scenarios / "chat.yaml", overrides, workers=1)
    assert isinstance(result.raw.records, RequestTable)
    framed = api.Result(
        result.scenario,
        result.summary,
        dataclasses.replace(result.raw, records=RequestTable.from_frame(result.raw.requests)),
    )
    assert framed.raw.records is not result.raw.records
    ids = result.raw.records["request_id"].tolist()
    for request_id in ids[::7]:
        ours = result.token_times_s(request_id)
        np.testing.assert_array_equal(ours, framed.token_times_s(request_id))
    if result.raw.records.rejections:  # a rejected request streams no token
        rejected = next(iter(result.raw.records.rejections))
        assert result.token_times_s(rejected).size == framed.token_times_s(rejected).size == 0
    for missing in (max(ids) + 1, -1):
        with pytest.raises(KeyError, match=f"no request {missing}"):
            result.token_times_s(missing)
        with pytest.raises(KeyError, match=f"no request {missing}"):
            framed.token_times_s(missing)


def test_find_gives_each_id_its_row_and_says_which_are_missing() -> None:
    ids = np.array([2, 5, 9], dtype=np.int64)
    columns = {name: np.zeros(3, dtype=dtype) for name, dtype in RECORD_COLUMNS.items()}
    columns["request_id"] = ids
    found_table = RequestTable(columns, {})
    rows, found = found_table.find([9, 2, 5, 0, 6, 10])
    assert found.tolist() == [True, True, True, False, False, False]
    assert rows[found].tolist() == [2, 0, 1]
    assert all(0 <= row < 3 for row in rows.tolist())  # missing ids still index a row
    rows, found = found_table.find(5)
    assert bool(found) and int(rows) == 1
    empty = {name: np.zeros(0, dtype=dtype) for name, dtype in RECORD_COLUMNS.items()}
    rows, found = RequestTable(empty, {}).find([1, 2])
    assert found.tolist() == [False, False]
