"""``sim.cli.figures``: a run's figures drawn in forked
processes, errors never lost.

The worker is a fork of the test process, so a monkeypatch made before
``FigureWorker.start`` (a plot that raises, or kills its own process) is
inherited by it: that is how the failure paths are exercised. Nothing here is
timed; the speed is measured by ``benchmarks/startup.py``.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from child_processes import no_children_left
from small_scenario import write_scenario

import sim.cli as cli
import sim.cli.figures as cli_figures
import sim.cli.run as cli_run
import sim.metrics.figure_draw as figure_draw
from sim import api
from sim.api.result import Result
from sim.cli.figures import FigureError, FigureWorker, describe, reply_of
from sim.engine.records import RequestTable
from sim.errors import ConfigError
from sim.metrics.report import FigureJob, prepare_figures

pytestmark = pytest.mark.skipif(
    not cli_figures.forking_supported(), reason="figures are forked on Linux only"
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALL_FIGURES = ["latency_cdf.png", "timeseries.png", "waterfall.png"]


def _scenario(tmp_path: Path) -> Path:
    return write_scenario(tmp_path, "figures", 12, 5, 64, 6)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return api.run(_scenario(tmp_path_factory.mktemp("scenario")))


def _job(result: Result, out: Path) -> FigureJob:
    out.mkdir(parents=True, exist_ok=True)
    return result.figure_job(out)


def _raise_value_error(*args: Any, **kwargs: Any) -> Path:
    raise ValueError("no axes for you")


# --- the worker draws every figure ----------------------------------------------------------


def test_the_worker_draws_every_figure_and_names_them(result: Result, tmp_path: Path) -> None:
    job = _job(result, tmp_path / "out")
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        worker.submit(job)
        paths = worker.finish()
    assert [p.name for p in paths] == prepare_figures(job).names() == ALL_FIGURES
    assert all(p.parent == tmp_path / "out" for p in paths)
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(ALL_FIGURES)
    assert no_children_left()


def test_a_job_without_a_waterfall_draws_two_figures(result: Result, tmp_path: Path) -> None:
    job = FigureJob(tmp_path, result.raw.records, result.timeseries, result.scenario.slo)
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        worker.submit(job)
        assert [p.name for p in worker.finish()] == ["latency_cdf.png", "timeseries.png"]
    assert not (tmp_path / "waterfall.png").exists()


def test_the_job_travels_pickled_and_comes_back_equal(result: Result, tmp_path: Path) -> None:
    job = _job(result, tmp_path)
    back = pickle.loads(pickle.dumps(job))
    assert back.out_dir == job.out_dir and back.slo == job.slo
    assert isinstance(job.requests, RequestTable) and isinstance(back.requests, RequestTable)
    pd.testing.assert_frame_equal(back.requests.frame(), job.requests.frame())
    assert job.waterfall is not None and back.waterfall is not None
    assert back.waterfall[0] == job.waterfall[0]  # the spans' rows


def test_a_worker_closed_without_a_job_is_ended_and_draws_nothing(tmp_path: Path) -> None:
    worker = FigureWorker.start()
    assert worker is not None
    worker.close()
    worker.close()  # twice is harmless
    assert no_children_left()
    with pytest.raises(ProcessLookupError):
        os.kill(worker.pid, 0)  # reaped: the pid is gone
    assert list(tmp_path.iterdir()) == []


def test_submit_once_and_finish_after_submit(result: Result, tmp_path: Path) -> None:
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        with pytest.raises(RuntimeError, match="no job was submitted"):
            worker.finish()
        worker.submit(_job(result, tmp_path))
        with pytest.raises(RuntimeError, match="already submitted"):
            worker.submit(_job(result, tmp_path))
        assert len(worker.finish()) == 3


def test_without_fork_support_there_is_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not cli_figures.forking_supported()
    assert FigureWorker.start() is None


# --- errors reach the parent, in one line ---------------------------------------------------


def test_an_error_in_the_worker_itself_is_reported(
    result: Result, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The latency CDF is drawn by the worker itself (the fork draws the last figure).
    monkeypatch.setattr(figure_draw, "draw_latency_cdfs", _raise_value_error)
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        worker.submit(_job(result, tmp_path))
        with pytest.raises(FigureError) as caught:
            worker.finish()
    message = str(caught.value)
    assert message.startswith("drawing the figures failed: ValueError: no axes for you (")
    assert "test_cli_figures.py:" in message and "\n" not in message
    assert no_children_left()


def test_an_error_in_the_forked_helper_is_reported(
    result: Result, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(figure_draw, "draw_waterfall_figure", _raise_value_error)
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        worker.submit(_job(result, tmp_path))
        with pytest.raises(FigureError, match="ValueError: no axes for you"):
            worker.finish()
    # The worker's own figures were drawn all the same.
    assert (tmp_path / "latency_cdf.png").exists() and (tmp_path / "timeseries.png").exists()


def test_a_user_error_while_drawing_stays_a_config_error(
    result: Result, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Path:
        raise ConfigError("slo.ttft_ms: cannot be drawn")

    monkeypatch.setattr(figure_draw, "draw_timeseries", refuse)
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        worker.submit(_job(result, tmp_path))
        with pytest.raises(ConfigError, match=r"^slo\.ttft_ms: cannot be drawn$"):
            worker.finish()


@pytest.mark.parametrize("figure", ["latency_cdf", "waterfall"])
def test_a_killed_figure_process_is_reported(
    figure: str, result: Result, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # latency_cdf: the worker itself dies; waterfall: the helper it forked.
    def die(*args: Any, **kwargs: Any) -> Path:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    if figure == "latency_cdf":
        monkeypatch.setattr(figure_draw, "draw_latency_cdfs", die)
    else:
        monkeypatch.setattr(figure_draw, "draw_waterfall_figure", die)
    with FigureWorker.start() as worker:  # type: ignore[union-attr]
        worker.submit(_job(result, tmp_path))
        with pytest.raises(FigureError, match="a figure process was killed by SIGKILL"):
            worker.finish()
    assert no_children_left()


# --- the pieces, by hand --------------------------------------------------------------------


def test_reply_of_keeps_a_reply_and_explains_a_missing_one() -> None:
    paths = json.dumps({"paths": ["a.png"]}).encode()
    assert reply_of(paths, 0) == {"paths": ["a.png"]}
    error = json.dumps({"error": "boom"}).encode()
    assert reply_of(error, 1 << 8) == {"error": "boom"}  # its own words over its status
    # waitpid's status: exit code in the high byte, a terminating signal in the low bits.
    assert reply_of(b"", 3 << 8) == {
        "error": "a figure process exited with status 3 and no figures"
    }
    assert reply_of(paths, 3 << 8)["error"].endswith("status 3 and no figures")
    assert reply_of(b"", int(signal.SIGTERM)) == {"error": "a figure process was killed by SIGTERM"}
    assert reply_of(b"", 0) == {"error": "a figure process exited with status 0 and no figures"}


def test_describe_says_type_message_and_place_in_one_line() -> None:
    try:
        raise KeyError("num_waiting")
    except KeyError as error:
        text = describe(error)
    assert text.startswith("KeyError: 'num_waiting' (test_cli_figures.py:")
    assert text.endswith(")")
    assert describe(RuntimeError()) == "RuntimeError"  # never raised: no place
    assert describe(ValueError("two\nlines")) == "ValueError: two lines"


def test_draw_reply_turns_errors_into_replies(result: Result, tmp_path: Path) -> None:
    figures = prepare_figures(_job(result, tmp_path))
    assert cli_figures.draw_reply(figures, ["timeseries.png"]) == {
        "paths": [str(tmp_path / "timeseries.png")]
    }
    broken = prepare_figures(FigureJob(tmp_path, result.raw.records, pd.DataFrame({"x": [1.0]})))
    reply = cli_figures.draw_reply(broken, ["latency_cdf.png", "timeseries.png"])
    assert reply == {"paths": [str(tmp_path / "latency_cdf.png"), str(tmp_path / "timeseries.png")]}
    gone = prepare_figures(FigureJob(tmp_path / "missing", result.raw.records, result.timeseries))
    assert "FileNotFoundError" in cli_figures.draw_reply(gone)["error"]


def test_draw_in_processes_draws_all_in_order(result: Result, tmp_path: Path) -> None:
    reply = cli_figures.draw_in_processes(prepare_figures(_job(result, tmp_path)))
    assert reply == {"paths": [str(tmp_path / name) for name in ALL_FIGURES]}
    assert no_children_left()


def test_write_all_survives_a_reader_that_is_gone() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    cli_figures.write_all(write_fd, b"x" * 100_000)  # BrokenPipeError swallowed
    with pytest.raises(OSError):
        os.fstat(write_fd)  # and the pipe end closed all the same


def test_read_all_reads_more_than_a_pipe_buffer() -> None:
    read_fd, write_fd = os.pipe()
    data = bytes(range(256)) * 1000  # 256 kB: four pipe buffers
    sender = threading.Thread(target=cli_figures.write_all, args=(write_fd, data))
    sender.start()
    assert cli_figures.read_all(read_fd) == data
    sender.join()
    os.close(read_fd)


def test_the_import_thread_lowers_only_its_own_priority() -> None:
    before = os.nice(0)
    seen: list[int] = []

    def probe() -> None:
        cli_figures.import_matplotlib()
        seen.append(os.nice(0))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    assert seen == [min(before + cli_figures.IMPORT_NICENESS, 19)]
    assert os.nice(0) == before  # this thread's priority is untouched
    assert "matplotlib" in sys.modules


# --- servesim run ---------------------------------------------------------------------------


def test_a_run_with_and_without_the_figure_process_writes_the_same_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = str(_scenario(tmp_path))
    forked, local = tmp_path / "forked", tmp_path / "local"
    assert cli.main(["run", scenario, "--out", str(forked), "-q", "--figure-process", "yes"]) == 0
    assert cli.main(["run", scenario, "--out", str(local), "-q", "--figure-process", "no"]) == 0
    names = sorted(p.name for p in forked.iterdir())
    assert names == sorted(p.name for p in local.iterdir())
    assert set(ALL_FIGURES) <= set(names) and len(names) == 6
    assert capsys.readouterr().out.count("wrote 6 files") == 2
    assert no_children_left()


def test_a_failing_figure_process_fails_the_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(figure_draw, "draw_timeseries", _raise_value_error)
    out = tmp_path / "out"
    line = ["run", str(_scenario(tmp_path)), "--out", str(out), "-q", "--figure-process", "yes"]
    assert cli.main(line) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines[-1].startswith("servesim: error: drawing the figures failed: ValueError")
    assert "Traceback" not in captured.err
    assert "Serving Benchmark Result" in captured.out  # the summary came first
    assert (out / "requests.parquet").exists()  # the tables were written meanwhile
    assert no_children_left()


def test_a_run_refused_before_simulating_leaves_no_process_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    line = ["run", str(_scenario(tmp_path)), "--out", str(blocker), "-q", "--figure-process", "yes"]
    assert cli.main(line) == 2
    assert capsys.readouterr().err.startswith("servesim: error: ")
    assert no_children_left()


def test_a_run_failing_after_the_fork_ends_its_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []
    start = FigureWorker.start

    def spying_start() -> FigureWorker | None:
        worker = start()
        assert worker is not None
        started.append(worker.pid)
        return worker

    def fail(*args: Any, **kwargs: Any) -> Result:
        raise ConfigError("workload: refused after the fork")

    monkeypatch.setattr(FigureWorker, "start", spying_start)
    monkeypatch.setattr(api, "run", fail)
    out = tmp_path / "out"
    line = ["run", str(_scenario(tmp_path)), "--out", str(out), "-q", "--figure-process", "yes"]
    assert cli.main(line) == 2
    assert capsys.readouterr().err == "servesim: error: workload: refused after the fork\n"
    assert len(started) == 1 and no_children_left()
    with pytest.raises(ProcessLookupError):
        os.kill(started[0], 0)
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("choice", "spare", "forked"),
    [("auto", True, True), ("auto", False, False), ("yes", False, True), ("no", True, False)],
)
def test_the_figure_process_choice(
    choice: str,
    spare: bool,
    forked: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    started: list[bool] = []
    start = FigureWorker.start

    def spying_start() -> FigureWorker | None:
        started.append(True)
        return start()

    monkeypatch.setattr(cli_run, "spare_core", lambda: spare)  # where run looks it up
    monkeypatch.setattr(FigureWorker, "start", spying_start)
    out = tmp_path / "out"
    line = ["run", str(_scenario(tmp_path)), "--out", str(out), "-q", "--figure-process", choice]
    assert cli.main(line) == 0
    assert started == ([True] if forked else [])
    assert {p.name for p in out.glob("*.png")} == set(ALL_FIGURES)
    assert "wrote 6 files" in capsys.readouterr().out


def test_an_unknown_figure_process_choice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "x.yaml", "--figure-process", "maybe"])
    assert exit_.value.code == 2
    assert "invalid choice: 'maybe'" in capsys.readouterr().err


# --- is a core free? ------------------------------------------------------------------------


PRESSURE = "some avg10={} avg60=0.80 avg300=0.40 total=123\nfull avg10=0.00 avg60=0.00 total=0\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PRESSURE.format("1.25"), 1.25),
        (PRESSURE.format("92.46"), 92.46),
        ("full avg10=3.00 avg60=0.00\nsome avg10=7.50 avg60=1.0\n", 7.5),  # any line order
        ("some avg60=1.0 total=3\n", None),  # no avg10
        ("some avg10=lots\n", None),
        ("", None),
        ("\n\nsome avg10=2.0\n\n", 2.0),  # blank lines are skipped
    ],
)
def test_cpu_pressure_is_read_from_the_some_line(
    text: str, expected: float | None, tmp_path: Path
) -> None:
    path = tmp_path / "cpu"
    path.write_text(text)
    assert cli_figures.cpu_pressure_pct(path) == expected


def test_cpu_pressure_is_unknown_without_the_file(tmp_path: Path) -> None:
    assert cli_figures.cpu_pressure_pct(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("cores", "pressure", "load", "spare"),
    [
        (1, 0.0, 0.0, False),  # one core: nothing to spare, however idle
        (2, 0.0, 1.4, True),
        (2, 0.0, 1.5, False),  # other work holds the second core, waiting or not
        (2, 24.9, 0.0, True),
        (2, 25.0, 0.0, False),  # tasks wait for a CPU: no core is free
        (2, None, 1.4, True),  # no pressure file: the load decides
        (2, None, 1.5, False),
        (8, 3.0, 7.0, True),
        (8, 3.0, 7.5, False),
    ],
)
def test_a_core_is_spare_with_two_cores_and_little_contention(
    cores: int,
    pressure: float | None,
    load: float,
    spare: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(cli_figures, "cpu_pressure_pct", lambda: pressure)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert cli_figures.spare_core() is spare


def test_without_an_affinity_mask_the_cpu_count_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(cli_figures, "cpu_pressure_pct", lambda: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert cli_figures.spare_core()  # 2.0 < 4 - 0.5
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: taken as one core
    assert not cli_figures.spare_core()
