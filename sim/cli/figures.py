"""``servesim run``'s figures, drawn in a second process (issue 16: instant small runs).

The figures cost more than the simulation of a small run: importing matplotlib
and drawing three PNGs. ``FigureWorker.start`` forks a process, before this one
imports the simulator, that imports numpy and matplotlib (never pandas) while
this one imports pandas and the simulator and simulates; after the summary is
printed, ``submit`` hands it the figures' arrays (``sim.metrics.figure_prep``,
pickled through a pipe) and it draws them (one figure in it, one in each of
its forks) while this process writes the tables; ``finish`` waits for it. On a
two-core machine the import overlaps the simulation and the drawing takes both
cores.

An error in the worker is not lost: it reaches ``finish`` as one line (exception
type, message, file and line) and raises ``FigureError``, or ``ConfigError`` for
a user error, as drawing in this process would. A worker killed by a signal
(out of memory, say) is reported too. The command never exits before the
worker: ``close`` (``with`` exit) waits for a worker that was handed a job, and
ends one that never was (it has written nothing).

Only on Linux: elsewhere a fork without exec is unsafe (macOS system libraries)
or missing (Windows), and ``start`` returns None: draw in this process instead.
``servesim run`` forks only when ``spare_core`` finds a core free: on a busy
machine the second process would only add its own costs.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from sim.cli.figure_processes import (
    Reply,
    error_reply,
    exit_with,
    fork_quietly,
    read_all,
    reply_of,
    serve,
    write_all,
)
from sim.errors import ConfigError
from sim.fast.forks import forking_supported

if TYPE_CHECKING:
    from sim.metrics.report import FigureJob


class FigureError(RuntimeError):
    """The figure process failed: its one-line error, or the signal that ended it."""


# Above this share of the last 10 s with a task waiting for a CPU, no core is spare.
BUSY_CPU_PRESSURE_PCT = 25.0
CPU_PRESSURE = Path("/proc/pressure/cpu")


def cpu_pressure_pct(path: Path = CPU_PRESSURE) -> float | None:
    """Linux's CPU pressure: % of the last 10 s some task waited for a CPU; None if unknown.

    ``path`` holds lines like ``some avg10=1.25 avg60=0.80 avg300=0.40 total=123``
    (pressure stall information, Linux >= 4.20; absent in some containers).
    """
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        kind, *fields = line.split() or [""]
        if kind == "some":
            values = dict(field.partition("=")[::2] for field in fields)
            try:
                return float(values["avg10"])
            except (KeyError, ValueError):
                return None
    return None


def spare_core() -> bool:
    """Whether a second core is free now to draw the figures on.

    On a busy machine a second process only adds its own costs (the fork, a
    second start of matplotlib's caches) to CPU time that is not to be had.
    Needs two cores for this process, a 1-minute load average (this process
    counts one) under the cores less a half, and, where Linux reports it,
    little CPU pressure (the load says how many run, the pressure whether
    they wait: other work on the second core shows only in the load).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    if cores < 2 or os.getloadavg()[0] >= cores - 0.5:
        return False
    pressure = cpu_pressure_pct()
    return pressure is None or pressure < BUSY_CPU_PRESSURE_PCT


class FigureWorker:
    """A forked process that draws one ``FigureJob``'s figures; use as a context manager."""

    def __init__(self, pid: int, job_fd: int, reply_fd: int) -> None:
        self.pid = pid
        self._job_fd: int | None = job_fd
        self._reply_fd: int | None = reply_fd
        self._sender: threading.Thread | None = None
        self._failure: Reply | None = None  # the job could not be prepared
        self._reaped = False

    @classmethod
    def start(cls) -> FigureWorker | None:
        """Fork the worker (it starts importing matplotlib); None where forking is unsupported."""
        if not forking_supported():
            return None
        job_read, job_write = os.pipe()
        reply_read, reply_write = os.pipe()
        pid = fork_quietly()
        if pid == 0:  # pragma: no cover (the child; its work is tested through the parent)
            os.close(job_write)
            os.close(reply_read)
            exit_with(lambda: serve(job_read), reply_write)
        os.close(job_read)
        os.close(reply_write)
        return cls(pid, job_write, reply_read)

    def submit(self, job: FigureJob) -> None:
        """Hand ``job`` to the worker, cut into arrays here (``prepare_figures``); returns
        at once (a thread feeds the pipe). A job that cannot be cut is reported by ``finish``."""
        from sim.metrics.report import prepare_figures

        if self._job_fd is None or self._failure is not None:
            raise RuntimeError("FigureWorker: a job was already submitted, or the worker closed")
        try:
            data = pickle.dumps(prepare_figures(job), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # reported by finish() as a failed worker would be
            self._failure = error_reply(error)
            return  # no job: close() ends the worker
        fd, self._job_fd = self._job_fd, None
        # The worker reads only once matplotlib is imported: a write here could block.
        self._sender = threading.Thread(target=write_all, args=(fd, data), daemon=True)
        self._sender.start()

    def finish(self) -> list[Path]:
        """Wait until the submitted job is drawn; the figures' paths.

        Raises ``FigureError`` (or ``ConfigError``) when the worker failed.
        """
        if self._failure is not None:
            self.close()
            reply = self._failure
        elif self._sender is None:
            raise RuntimeError("FigureWorker.finish: no job was submitted")
        else:
            self._sender.join()
            reply_bytes = self._take_reply()
            reply = reply_of(reply_bytes, self._wait())
        if "error" in reply:
            if reply.get("config_error"):
                raise ConfigError(str(reply["error"]))
            raise FigureError(f"drawing the figures failed: {reply['error']}")
        return [Path(path) for path in reply["paths"]]

    def close(self) -> None:
        """End the worker: wait for one drawing a job, kill one still without a job."""
        if self._reaped:
            return
        if self._job_fd is not None:  # never handed a job: it has written nothing
            os.close(self._job_fd)
            self._job_fd = None
            os.kill(self.pid, signal.SIGKILL)
        if self._sender is not None:
            self._sender.join()
        self._take_reply()
        self._wait()

    def _take_reply(self) -> bytes:
        if self._reply_fd is None:
            return b""
        fd, self._reply_fd = self._reply_fd, None
        try:
            return read_all(fd)
        finally:
            os.close(fd)

    def _wait(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        self._reaped = True
        return status

    def __enter__(self) -> FigureWorker:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
