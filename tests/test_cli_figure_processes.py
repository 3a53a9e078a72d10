"""``sim.cli.figures``: pipes, replies and exits of the figure processes.

Each forked child here is a fork of the test process that runs one of the
module's functions and exits; the test reads its reply and exit status the way
``FigureWorker`` does. Properties: any bytes cross a pipe intact, any exit code
or signal is described, any error message stays on one line.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from small_scenario import write_scenario

import sim.cli.figures as processes
from sim import api
from sim.api.result import Result
from sim.cli.figures import Reply, describe, forking_supported, read_all, reply_of, write_all
from sim.metrics.report import prepare_figures

pytestmark = pytest.mark.skipif(not forking_supported(), reason="forks on Linux only")

ALL_FIGURES = ["latency_cdf.png", "timeseries.png", "waterfall.png"]


def _in_child(work: Callable[[], Reply | None]) -> tuple[bytes, int]:
    """Run ``work`` through ``exit_with`` in a forked child; its reply bytes and wait status."""
    read_fd, write_fd = os.pipe()
    pid = processes.fork_quietly()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read_fd)
        processes.exit_with(work, write_fd)
    os.close(write_fd)
    reply = read_all(read_fd)
    os.close(read_fd)
    return reply, os.waitpid(pid, 0)[1]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Result:
    path = write_scenario(tmp_path_factory.mktemp("scenario"), "processes", 8, 5, 32, 4)
    return api.run(path)


# --- exit_with: the one way a forked process ends ---------------------------------------------


def test_a_child_with_figures_replies_them_and_exits_0() -> None:
    reply, status = _in_child(lambda: {"paths": ["a.png", "b.png"]})
    assert json.loads(reply) == {"paths": ["a.png", "b.png"]}
    assert os.waitstatus_to_exitcode(status) == 0
    assert reply_of(reply, status) == {"paths": ["a.png", "b.png"]}


def test_a_child_with_nothing_to_do_exits_0_silently() -> None:
    reply, status = _in_child(lambda: None)
    assert reply == b"" and os.waitstatus_to_exitcode(status) == 0


def test_a_child_replying_an_error_exits_1() -> None:
    reply, status = _in_child(lambda: {"error": "ValueError: x (plots.py:9)"})
    assert json.loads(reply) == {"error": "ValueError: x (plots.py:9)"}
    assert os.waitstatus_to_exitcode(status) == 1


def test_a_child_whose_work_raises_replies_the_error_in_one_line() -> None:
    def work() -> Reply:
        raise OSError("disk\nfull")

    reply, status = _in_child(work)
    error = json.loads(reply)["error"]
    assert error.startswith("OSError: disk full (test_cli_figure_processes.py:")
    assert os.waitstatus_to_exitcode(status) == 1
    assert reply_of(reply, status) == {"error": error}


def test_an_interrupted_child_exits_130_without_a_reply() -> None:
    def work() -> Reply:
        raise KeyboardInterrupt

    reply, status = _in_child(work)
    assert reply == b"" and os.waitstatus_to_exitcode(status) == 130
    assert reply_of(reply, status) == {
        "error": "a figure process exited with status 130 and no figures"
    }


# --- pipes ------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=300_000))
def test_any_bytes_cross_a_pipe_intact(data: bytes) -> None:
    read_fd, write_fd = os.pipe()
    sender = threading.Thread(target=write_all, args=(write_fd, data))
    sender.start()
    received = read_all(read_fd)
    sender.join()
    os.close(read_fd)
    assert received == data


# --- descriptions -----------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(code=st.integers(1, 255))
def test_any_exit_code_without_a_reply_is_named(code: int) -> None:
    status = code << 8  # waitpid: the exit code in the second byte
    assert os.WIFEXITED(status) and os.waitstatus_to_exitcode(status) == code
    assert reply_of(b"", status) == {
        "error": f"a figure process exited with status {code} and no figures"
    }


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT])
def test_any_terminating_signal_is_named(sig: signal.Signals) -> None:
    assert reply_of(b"", int(sig)) == {"error": f"a figure process was killed by {sig.name}"}
    # Its own words win: a process that replied an error and then died is not renamed.
    assert reply_of(b'{"error": "mine"}', int(sig)) == {"error": "mine"}


@settings(max_examples=100, deadline=None)
@given(message=st.text(max_size=200))
def test_any_error_is_described_on_one_line(message: str) -> None:
    text = describe(RuntimeError(message))
    assert "\n" not in text and "\r" not in text
    assert text.startswith("RuntimeError")
    assert text == text.strip()


# --- serve and draw_in_processes --------------------------------------------------------------


def test_serve_without_a_job_draws_nothing() -> None:
    read_fd, write_fd = os.pipe()
    os.close(write_fd)  # the parent closed without a job
    assert processes.serve(read_fd) is None
    os.close(read_fd)


def test_serve_draws_the_job_it_reads(result: Result, tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    data = pickle.dumps(prepare_figures(result.figure_job(tmp_path)))
    sender = threading.Thread(target=write_all, args=(write_fd, data))
    sender.start()
    reply = processes.serve(read_fd)
    sender.join()
    os.close(read_fd)
    assert reply == {"paths": [str(tmp_path / name) for name in ALL_FIGURES]}


def test_serve_refuses_a_job_that_is_not_one() -> None:
    read_fd, write_fd = os.pipe()
    write_all(write_fd, b"not a pickle")
    with pytest.raises(pickle.UnpicklingError):
        processes.serve(read_fd)  # exit_with turns this into an error reply
    os.close(read_fd)


def test_a_failing_helper_fails_the_whole_reply(
    result: Result, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both processes fail: the first error (this process's own) is the one reported.
    def fail(name: str) -> Callable[..., Path]:
        def draw(*args: object, **kwargs: object) -> Path:
            raise ValueError(f"{name} failed")

        return draw

    import sim.metrics.figure_draw as figure_draw

    monkeypatch.setattr(figure_draw, "draw_timeseries", fail("timeseries"))
    monkeypatch.setattr(figure_draw, "draw_waterfall_figure", fail("waterfall"))
    reply = processes.draw_in_processes(prepare_figures(result.figure_job(tmp_path)))
    assert reply["error"].startswith("ValueError: timeseries failed")
    assert [p.name for p in tmp_path.iterdir()] == ["latency_cdf.png"]  # drawn before
