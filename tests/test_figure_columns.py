"""A run's figures cut from its columns are those cut from its frames.

``servesim run`` hands its figures over before it imports pandas: their
arrays come from the run's columns (``RequestTable``, the series' arrays, span
rows searched in the compact step log). Each run here compares them with
the arrays the frames give, pickled byte for byte, on runs with one replica,
several, preemptions after the first token (later runs of tokens) and a
load-aware router.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim import api
from sim.api.result import Result
from sim.engine.records import RequestTable
from sim.engine.step_runs import StepTable
from sim.metrics.figure_data import NUM_WATERFALL_REQUESTS, figure_caption
from sim.metrics.lifecycle import reconstructed_spans
from sim.metrics.plots import timeseries_data, waterfall_data
from sim.metrics.report import FigureJob, prepare_figures

ROOT = Path(__file__).resolve().parent.parent
CHAT = str(ROOT / "scenarios" / "chat.yaml")
REPLICAS = str(ROOT / "scenarios" / "replicas.yaml")
RUNS = {
    "one replica": (CHAT, ["workload.num_requests=300"]),
    "preemptions": (
        CHAT,
        [
            "workload.num_requests=300",
            "engine.num_kv_blocks=600",
            "workload.arrival.rate_per_s=30",
        ],
    ),
    "round robin": (REPLICAS, ["workload.num_requests=400"]),
    "least outstanding": (
        REPLICAS,
        ["workload.num_requests=400", "cluster.router=least_outstanding_requests"],
    ),
}


def same(a: Any, b: Any) -> None:
    """``a`` and ``b`` hold the same values: arrays of one dtype equal to the bit (NaN too)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b)
        for field in dataclasses.fields(a):
            same(getattr(a, field.name), getattr(b, field.name))
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    elif isinstance(a, tuple | list):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    else:
        assert type(a) is type(b) and a == b, (a, b)


@pytest.fixture(scope="module", params=sorted(RUNS))
def result(request: pytest.FixtureRequest) -> Result:
    path, overrides = RUNS[request.param]
    return api.run(path, overrides, workers=1)


def test_the_run_keeps_columns_until_a_frame_is_asked_for(result: Result) -> None:
    assert isinstance(result.raw.records, RequestTable)
    assert isinstance(result.raw.series, dict)


def test_figures_from_columns_are_those_from_frames(result: Result, tmp_path: Path) -> None:
    from_columns = prepare_figures(result.figure_job(tmp_path))
    framed = RequestTable.from_frame(result.requests)  # the frames, read back at their edge
    frames = FigureJob(
        tmp_path,
        framed,
        result.timeseries,
        result.scenario.slo,
        (result.spans(), framed),
        figure_caption(result.summary),
    )
    from_frames = prepare_figures(frames)
    same(from_columns, from_frames)


def test_span_rows_from_columns_are_the_spans_frame(result: Result) -> None:
    raw = result.raw
    num = NUM_WATERFALL_REQUESTS
    rows = reconstructed_spans(raw.records, raw.step_table, raw.later_runs, num)
    framed = RequestTable.from_frame(raw.requests)
    assert rows == reconstructed_spans(framed, StepTable.from_frame(raw.steps), raw.later_runs, num)
    assert rows == list(result.spans(num).itertuples(index=False, name=None))
    assert len(rows) > 0


def test_the_preempted_run_has_later_runs_in_its_waterfall() -> None:
    path, overrides = RUNS["preemptions"]
    raw = api.run(path, overrides).raw
    shown = reconstructed_spans(raw.records, raw.step_table, raw.later_runs, NUM_WATERFALL_REQUESTS)
    assert {row[0] for row in shown} & set(raw.later_runs)
    assert "preempted" in {row[2] for row in shown}


def test_unsorted_samples_are_put_in_time_order_as_the_frame_is() -> None:
    rng = np.random.default_rng(3)
    series = {
        "time_s": rng.permutation(np.repeat(np.arange(5.0), 2)),
        "num_waiting": rng.integers(0, 9, 10).astype(np.int32),
        "num_running": rng.integers(0, 9, 10).astype(np.int32),
        "kv_cache_usage": rng.random(10),
        "replica": np.zeros(10, dtype=np.int32),
    }
    import pandas as pd

    from_columns = timeseries_data(series)
    from_frame = timeseries_data(pd.DataFrame(series))
    same(from_columns, from_frame)
    assert (np.diff(from_columns.time_s) >= 0).all()


def test_a_first_token_time_is_found_by_id_and_a_missing_id_is_nan() -> None:
    columns = {
        "request_id": np.array([2, 5, 9], dtype=np.int64),
        "first_token_s": np.array([0.5, 1.5, 2.5]),
    }
    table = RequestTable(columns, {})
    rows = [(5, 0, "prefill", 0.0, 1.0, 10), (9, 0, "prefill", 1.0, 2.0, 10)]
    rows += [(11, 0, "prefill", 1.0, 2.0, 10)]  # not in the table
    data = waterfall_data(rows, table)
    assert data.ids == (5, 9, 11)
    assert data.first_token_s[:2].tolist() == [1.5, 2.5] and np.isnan(data.first_token_s[2])


def test_servesim_runs_figures_are_cut_without_pandas(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from sim import api\n"
        "from sim.metrics.report import prepare_figures\n"
        # cost: roofline, as chat.yaml's H100 kernel tables are pandas frames.
        f"r = api.run({CHAT!r}, ['workload.num_requests=80', 'cost.kind=roofline'])\n"
        f"figures = prepare_figures(r.figure_job({str(tmp_path)!r}))\n"
        "print(figures.waterfall is not None, 'pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["True", "False"]
