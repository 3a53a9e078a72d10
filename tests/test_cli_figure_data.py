"""The figures as plain arrays (``sim.metrics.figure_data``): cut out of a run's tables
here, drawn from them in a process that never imports pandas (issue 16).

Properties: the arrays draw exactly the bytes the DataFrame API draws, before and
after a pickle round trip; the drawing side imports neither pandas nor pydantic;
``servesim run`` forks its figure process before it loads the scenario, one
process draws each figure, and a job that cannot be cut into arrays fails the run
in one line, after the tables are written. Nothing here is timed.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from child_processes import no_children_left
from small_scenario import write_scenario
from test_plots import requests_frame, requests_table, timeseries_frame

import sim.cli as cli
import sim.cli.figures as cli_figures
import sim.cli.simulate
import sim.metrics.plots as plots
from sim import api
from sim.api.result import Result
from sim.cli.figures import FigureError, FigureWorker
from sim.engine.records import RequestTable
from sim.errors import ConfigError
from sim.metrics import figure_draw
from sim.metrics.figure_data import NUM_WATERFALL_REQUESTS, Figures
from sim.metrics.figure_draw import draw_prepared
from sim.metrics.lifecycle import PHASES
from sim.metrics.plots import cdf_data, timeseries_data, waterfall_data
from sim.metrics.report import FigureJob, draw_figures, prepare_figures
from sim.metrics.stats import Slo
from sim.scenario import Scenario

ROOT = Path(__file__).resolve().parent.parent
ALL_FIGURES = ["latency_cdf.png", "timeseries.png", "waterfall.png"]
forked_only = pytest.mark.skipif(
    not cli_figures.forking_supported(), reason="figures are forked on Linux only"
)


def _scenario(tmp_path: Path, **workload: Any) -> Path:
    num_requests = workload.pop("num_requests", 30)
    return write_scenario(tmp_path, "figure_data", num_requests, 8, 64, 6, **workload)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return api.run(_scenario(tmp_path_factory.mktemp("scenario")))


# --- the arrays draw what the DataFrames draw, byte for byte --------------------------------


def _replicas_frame() -> pd.DataFrame:
    return pd.concat(
        [timeseries_frame(200).assign(replica=0), timeseries_frame(150, seed=4).assign(replica=1)]
    )


TIMESERIES_CASES: dict[str, Callable[[], pd.DataFrame]] = {
    "plain": lambda: timeseries_frame(300),
    "binned": lambda: timeseries_frame(12_000, seed=2),
    "shuffled": lambda: timeseries_frame(300).sample(frac=1, random_state=1),
    "no kv column": lambda: timeseries_frame(300).drop(columns=["kv_cache_usage"]),
    "no time column": lambda: timeseries_frame(300).drop(columns=["time_s"]),
    "empty": lambda: timeseries_frame(300).iloc[:0],
    "two replicas": _replicas_frame,
}


@pytest.mark.parametrize("case", TIMESERIES_CASES)
def test_timeseries_arrays_draw_the_dataframe_figure(case: str, tmp_path: Path) -> None:
    frame = TIMESERIES_CASES[case]()
    direct = figure_draw.draw_timeseries(
        timeseries_data(frame), tmp_path / "direct.png"
    ).read_bytes()
    data = pickle.loads(pickle.dumps(plots.timeseries_data(frame)))
    assert figure_draw.draw_timeseries(data, tmp_path / "arrays.png").read_bytes() == direct


@pytest.mark.parametrize(
    ("n", "rejected_every", "slo"),
    [
        (300, 0, Slo(ttft_ms=300)),
        (40, 3, Slo(ttft_ms=150, tpot_ms=21)),
        (1, 0, None),
        (10, 1, None),  # all rejected: "no samples"
        (6000, 0, Slo(tpot_ms=20)),  # more than MAX_POINTS
    ],
)
def test_cdf_arrays_draw_the_dataframe_figure(
    n: int, rejected_every: int, slo: Slo | None, tmp_path: Path
) -> None:
    requests = requests_table(n, rejected_every=rejected_every)
    direct = figure_draw.draw_latency_cdfs(
        cdf_data(requests, slo), tmp_path / "direct.png"
    ).read_bytes()
    data = pickle.loads(pickle.dumps(plots.cdf_data(requests, slo)))
    assert data.num_done == n - (len(range(0, n, rejected_every)) if rejected_every else 0)
    assert figure_draw.draw_latency_cdfs(data, tmp_path / "arrays.png").read_bytes() == direct


@pytest.mark.parametrize("num_requests", [0, 5, 30])
def test_waterfall_arrays_draw_the_dataframe_figure(
    num_requests: int, result: Result, tmp_path: Path
) -> None:
    spans, requests = result.spans(max(num_requests, 1)), result.raw.records
    if num_requests == 0:
        spans = spans.iloc[:0]
    direct = figure_draw.draw_waterfall_figure(
        waterfall_data(spans, requests), tmp_path / "direct.png"
    ).read_bytes()
    data = pickle.loads(pickle.dumps(plots.waterfall_data(spans, requests)))
    assert len(data.ids) == num_requests
    assert [bars.phase for bars in data.bars] == list(spans["phase"].unique())
    drawn = figure_draw.draw_waterfall_figure(data, tmp_path / "arrays.png").read_bytes()
    assert drawn == direct


def test_cdf_data_holds_the_completed_requests_latencies_in_ms() -> None:
    requests = requests_frame(60, rejected_every=4)
    requests.loc[5, "num_generated_tokens"] = 1  # no TPOT for a one-token answer
    data = plots.cdf_data(RequestTable.from_frame(requests), Slo(ttft_ms=120, tpot_ms=25))
    done = requests[requests["rejection_reason"] == ""]
    ttft_ms = (done["first_token_s"] - done["arrival_s"]).to_numpy() * 1000
    np.testing.assert_allclose(data.ttft_ms, ttft_ms, rtol=1e-12)
    many = done[done["num_generated_tokens"] >= 2]
    tpot_ms = (many["finish_s"] - many["first_token_s"]) / (many["num_generated_tokens"] - 1)
    np.testing.assert_allclose(data.tpot_ms, tpot_ms.to_numpy() * 1000, rtol=1e-9)
    assert data.num_done == len(done) == 45
    assert (data.ttft_slo_ms, data.tpot_slo_ms) == (120, 25)
    assert np.isfinite(data.ttft_ms).all() and np.isfinite(data.tpot_ms).all()


def test_timeseries_data_sorts_scales_and_sums_replicas() -> None:
    frame = timeseries_frame(200)
    data = plots.timeseries_data(frame.sample(frac=1, random_state=3))
    np.testing.assert_array_equal(data.time_s, frame["time_s"].to_numpy())
    waiting, running, kv = data.series
    assert waiting is not None and running is not None and kv is not None
    np.testing.assert_array_equal(waiting, frame["num_waiting"].to_numpy(dtype=float))
    np.testing.assert_array_equal(kv, frame["kv_cache_usage"].to_numpy() * 100.0)
    missing = plots.timeseries_data(frame.drop(columns=["num_running"]))
    assert missing.series[1] is None and missing.series[0] is not None
    both = plots.timeseries_data(_replicas_frame())
    assert both.time_s.size == _replicas_frame()["time_s"].nunique()
    assert both.series[0] is not None and both.series[0][-1] == (
        timeseries_frame(200)["num_waiting"].iloc[-1]
        + timeseries_frame(150, seed=4)["num_waiting"].iloc[-1]
    )


def test_waterfall_data_puts_each_span_on_its_request_row(result: Result) -> None:
    spans, requests = result.spans(12), result.raw.requests
    data = plots.waterfall_data(spans, result.raw.records)
    assert list(data.ids) == sorted(spans["request_id"].unique()) == list(range(12))
    assert [p for p in data.present] == [p for p in PHASES if p in set(spans["phase"])]
    for bars in data.bars:
        mine = spans[spans["phase"] == bars.phase]
        np.testing.assert_array_equal(bars.rows, mine["request_id"].to_numpy(dtype=float))
        np.testing.assert_array_equal(bars.start_s, mine["start_s"].to_numpy())
        np.testing.assert_array_equal(bars.end_s, mine["end_s"].to_numpy())
    by_id = requests.set_index("request_id")["first_token_s"]
    np.testing.assert_array_equal(data.first_token_s, by_id.loc[list(data.ids)].to_numpy())


def test_a_prepared_job_draws_what_draw_figures_draws(result: Result, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    direct = draw_figures(result.figure_job(tmp_path / "a"))
    figures = pickle.loads(pickle.dumps(prepare_figures(result.figure_job(tmp_path / "b"))))
    assert figures.names() == ALL_FIGURES
    arrays = draw_prepared(figures)
    assert [p.name for p in arrays] == [p.name for p in direct] == ALL_FIGURES
    for a, b in zip(direct, arrays, strict=True):
        assert a.read_bytes() == b.read_bytes()
    no_waterfall = prepare_figures(FigureJob(tmp_path, result.raw.records, result.timeseries))
    assert no_waterfall.waterfall is None and no_waterfall.names() == ALL_FIGURES[:2]


def test_the_prepared_figures_are_small_next_to_the_job(result: Result, tmp_path: Path) -> None:
    job = result.figure_job(tmp_path)  # the run's columns, which pickle compactly
    assert len(pickle.dumps(prepare_figures(job))) < len(pickle.dumps(job))
    table = RequestTable.from_frame(result.requests)  # with its latency columns
    frames = FigureJob(tmp_path, table, result.timeseries, None, (result.spans(), table))
    assert len(pickle.dumps(prepare_figures(job))) < len(pickle.dumps(frames)) / 2


# --- the drawing side imports no pandas -----------------------------------------------------


def test_drawing_prepared_figures_imports_neither_pandas_nor_pydantic(
    result: Result, tmp_path: Path
) -> None:
    job_path = tmp_path / "figures.pickle"
    job_path.write_bytes(pickle.dumps(prepare_figures(result.figure_job(tmp_path))))
    probe = (
        "import json, pickle, sys\n"
        "import sim.cli.figures\n"
        "from sim.metrics.figure_draw import draw_prepared, warm_up\n"
        "warm_up()\n"
        f"paths = draw_prepared(pickle.loads(open({str(job_path)!r}, 'rb').read()))\n"
        "print(json.dumps([[p.name for p in paths], sorted({m.split('.')[0] for m in "
        "sys.modules} & {'pandas', 'pydantic', 'pyarrow', 'simpy', 'yaml'})]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    names, heavy = json.loads(done.stdout.splitlines()[-1])
    assert names == ALL_FIGURES
    assert heavy == []


# --- servesim run: fork first, one process per figure, errors in one line -------------------


@forked_only
def test_the_figure_process_forks_before_the_scenario_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    events: list[str] = []
    start, load = FigureWorker.start, sim.cli.simulate.load_scenario

    def spying_start() -> FigureWorker | None:
        events.append("fork")
        return start()

    def spying_load(*args: Any, **kwargs: Any) -> Scenario:
        events.append("load")
        return load(*args, **kwargs)

    monkeypatch.setattr(FigureWorker, "start", spying_start)
    monkeypatch.setattr(sim.cli.simulate, "load_scenario", spying_load)  # where run loads it
    out = tmp_path / "out"
    line = ["run", str(_scenario(tmp_path)), "--out", str(out), "-q", "--figure-process", "yes"]
    assert cli.main(line) == 0
    assert events == ["fork", "load"]  # and loaded once: api.run is handed the scenario
    assert sorted(p.name for p in out.glob("*.png")) == sorted(ALL_FIGURES)
    assert "wrote 6 files" in capsys.readouterr().out
    assert no_children_left()


@forked_only
def test_a_refused_scenario_ends_the_figure_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _scenario(tmp_path, num_requests=-3)
    out = tmp_path / "out"
    assert cli.main(["run", str(bad), "--out", str(out), "-q", "--figure-process", "yes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: {bad}") and err.count("\n") == 1
    assert no_children_left()
    assert not out.exists()


@forked_only
def test_each_figure_is_drawn_in_a_process_of_its_own(
    result: Result, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def pid_writer(*args: Any, **kwargs: Any) -> Path:
        path = Path(args[-1])
        path.write_text(str(os.getpid()))
        return path

    monkeypatch.setattr(figure_draw, "draw_latency_cdfs", pid_writer)
    monkeypatch.setattr(figure_draw, "draw_timeseries", pid_writer)
    monkeypatch.setattr(figure_draw, "draw_waterfall_figure", pid_writer)
    reply = cli_figures.draw_in_processes(prepare_figures(result.figure_job(tmp_path)))
    assert reply == {"paths": [str(tmp_path / name) for name in ALL_FIGURES]}
    pids = [int((tmp_path / name).read_text()) for name in ALL_FIGURES]
    assert pids[0] == os.getpid()  # the first here, each other one in a fork
    assert len(set(pids)) == 3
    assert no_children_left()


@forked_only
@pytest.mark.parametrize(
    ("error", "raised", "message"),
    [
        (ValueError("no arrays"), FigureError, "drawing the figures failed: ValueError: no arrays"),
        (ConfigError("slo: cannot be cut"), ConfigError, "slo: cannot be cut"),
    ],
)
def test_a_job_that_cannot_be_prepared_is_reported_by_finish(
    error: Exception,
    raised: type[Exception],
    message: str,
    result: Result,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(plots, "cdf_data", refuse)
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        worker.submit(result.figure_job(tmp_path))  # no raise here: the tables come first
        with pytest.raises(RuntimeError, match="already submitted"):
            worker.submit(result.figure_job(tmp_path))
        with pytest.raises(raised) as caught:
            worker.finish()
    assert str(caught.value).startswith(message)
    assert no_children_left()
    assert list(tmp_path.iterdir()) == []


@forked_only
def test_a_run_whose_figures_cannot_be_prepared_fails_after_its_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("first_token_s")

    monkeypatch.setattr(plots, "waterfall_data", refuse)
    out = tmp_path / "out"
    line = ["run", str(_scenario(tmp_path)), "--out", str(out), "-q", "--figure-process", "yes"]
    assert cli.main(line) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("servesim: error: drawing the figures failed: KeyError")
    assert captured.err.count("\n") == 1 and "Serving Benchmark Result" in captured.out
    assert (out / "requests.parquet").exists() and not list(out.glob("*.png"))
    assert no_children_left()


def test_figures_names_follow_the_waterfall() -> None:
    empty = plots.cdf_data(RequestTable.from_frame(pd.DataFrame()))
    series = plots.timeseries_data(pd.DataFrame())
    assert empty.num_done == 0 and empty.ttft_ms.size == 0 and empty.ttft_slo_ms is None
    assert series.time_s.size == 0 and series.series == (None, None, None)
    figures = Figures(Path("x"), empty, series)
    assert figures.names() == ALL_FIGURES[:2]
    data = plots.waterfall_data(
        pd.DataFrame(columns=["request_id", "phase"]),
        RequestTable({"request_id": np.array([0]), "first_token_s": np.array([1.0])}, {}),
    )
    assert Figures(Path("x"), empty, series, data).names() == ALL_FIGURES
    assert data.ids == () and data.present == () and np.asarray(data.first_token_s).size == 0


# --- figures made up to their data before it arrives ----------------------------------------


def _figures(result: Result, out: Path, num_rows: int) -> Figures:
    figures = prepare_figures(result.figure_job(out))
    waterfall = plots.waterfall_data(result.spans(num_rows), result.raw.records)
    return Figures(out, figures.cdf, figures.timeseries, waterfall)


@pytest.mark.parametrize("num_rows", [7, NUM_WATERFALL_REQUESTS])
def test_prebuilt_figures_draw_the_same_bytes(num_rows: int, tmp_path: Path) -> None:
    result = api.run(_scenario(tmp_path, num_requests=NUM_WATERFALL_REQUESTS + 5))
    for name in ("fresh", "prebuilt"):
        (tmp_path / name).mkdir()
    fresh = draw_prepared(_figures(result, tmp_path / "fresh", num_rows))
    figure_draw.prebuild()
    assert set(figure_draw._prebuilt) == {"cdf", "timeseries"}
    assert set(figure_draw._prebuilt_waterfalls) == {NUM_WATERFALL_REQUESTS}
    prebuilt = draw_prepared(_figures(result, tmp_path / "prebuilt", num_rows))
    assert figure_draw._prebuilt == {}  # each taken by its draw, once
    # A waterfall of another height is drawn on a figure of its own; the prebuilt one stays.
    assert set(figure_draw._prebuilt_waterfalls) == (
        {NUM_WATERFALL_REQUESTS} if num_rows != NUM_WATERFALL_REQUESTS else set()
    )
    figure_draw._prebuilt_waterfalls.clear()
    assert [p.name for p in prebuilt] == [p.name for p in fresh] == ALL_FIGURES
    for a, b in zip(fresh, prebuilt, strict=True):
        assert a.read_bytes() == b.read_bytes()


def test_prebuilt_figures_have_their_ticks_and_frames_but_no_data() -> None:
    figure_draw.prebuild()
    try:
        fig, axes = figure_draw._prebuilt["cdf"]
        assert [ax.get_title() for ax in axes] == [t for t, _ in figure_draw._CDF_PANELS]
        assert all(len(ax.xaxis.majorTicks) >= figure_draw.PREBUILT_TICKS for ax in axes)
        assert all(not ax.lines and not ax.collections for ax in axes)
        assert fig.get_suptitle() == ""  # it names the count of requests: drawn with the data
    finally:
        figure_draw._prebuilt.clear()
        figure_draw._prebuilt_waterfalls.clear()


def test_the_figure_process_prebuilds_while_it_waits() -> None:
    thread = threading.Thread(target=cli_figures.import_matplotlib)
    thread.start()
    thread.join()
    try:
        assert set(figure_draw._prebuilt) == {"cdf", "timeseries"}
        assert set(figure_draw._prebuilt_waterfalls) == {NUM_WATERFALL_REQUESTS}
    finally:
        figure_draw._prebuilt.clear()
        figure_draw._prebuilt_waterfalls.clear()
        figure_draw._prebuilt_waterfalls.clear()
