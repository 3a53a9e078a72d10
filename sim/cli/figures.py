"""``servesim run``'s figures, drawn in a second process (issue 16: instant small runs).

The figures cost more than the simulation of a small run. ``FigureWorker.start``
forks, before this process imports the simulator, a worker that imports numpy
and matplotlib (never pandas) while this one simulates; ``submit`` hands it
the figures' arrays (pickled through a pipe), it draws them (one per process)
while this one writes the tables, and ``finish`` waits for it. A worker's
error or death reaches ``finish`` as one line (``FigureError``, or
``ConfigError`` for a user error); ``close`` never leaves a worker behind.

Linux only (elsewhere a fork without exec is unsafe or missing: ``start``
returns None and the figures are drawn here), and only when ``spare_core``
finds a core free. A reply is a small JSON object, ``Reply``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from sim.errors import ConfigError
from sim.fast.forks import forking_supported

if TYPE_CHECKING:
    from sim.metrics.figure_data import Figures
    from sim.metrics.report import FigureJob

_CHUNK_BYTES = 1 << 16  # a pipe's buffer on Linux


def read_all(fd: int) -> bytes:
    """Everything written to the pipe ``fd`` until its writer closes it."""
    chunks = []
    while chunk := os.read(fd, _CHUNK_BYTES):
        chunks.append(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` and close it; a reader that is gone is ignored."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass  # the worker died: finish() reports how
    finally:
        os.close(fd)


def describe(error: BaseException) -> str:
    """``error`` in one line: its type and message, and where it was raised."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        text += f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return " ".join(text.split())


Reply = dict[str, Any]  # {"paths": [...]} or {"error": "one line", "config_error": bool}


def error_reply(error: Exception) -> Reply:
    """The reply that reports ``error``: its message for a user error, else ``describe``."""
    if isinstance(error, ConfigError):
        return {"error": str(error), "config_error": True}
    return {"error": describe(error)}


def draw_reply(figures: Figures, names: Sequence[str] | None = None) -> Reply:
    """Draw ``figures`` (those of ``names``); the reply: their paths, or the error."""
    # Imported here: matplotlib (~0.5 s) loads only when figures are drawn.
    from sim.metrics.figure_draw import draw_prepared

    try:
        return {"paths": [str(path) for path in draw_prepared(figures, names)]}
    except Exception as error:
        return error_reply(error)


def reply_of(reply_bytes: bytes, status: int) -> Reply:
    """A process's reply, or an error reply when it sent none or died (``status`` of waitpid)."""
    reply: Reply = json.loads(reply_bytes) if reply_bytes else {}
    if "error" in reply:
        return reply
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return {"error": f"a figure process was killed by {name}"}
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or "paths" not in reply:
        return {"error": f"a figure process exited with status {code} and no figures"}
    return reply


def fork_quietly() -> int:
    """``os.fork``, output flushed first (else the child holds a copy of unwritten output)."""
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        # Python >= 3.12 warns on forking with threads running: numpy's BLAS
        # pool, idle, and reset in the child by OpenBLAS's own fork handler.
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def exit_with(work: Callable[[], Reply | None], reply_fd: int) -> NoReturn:
    """In a forked child: run ``work``, send its reply, ``os._exit`` (the copy of the
    caller must run none of its exit handlers, nor flush its buffers a second time)."""
    code = 1
    try:
        reply = work()
        if reply is not None:
            write_all(reply_fd, json.dumps(reply).encode())
        code = 0 if reply is None or "paths" in reply else 1
    except KeyboardInterrupt:
        code = 130
    except BaseException as error:
        # OSError: the reply was already sent; the exit status tells the rest.
        with contextlib.suppress(OSError):
            write_all(reply_fd, json.dumps({"error": describe(error)}).encode())
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def draw_in_processes(figures: Figures) -> Reply:
    """Draw each figure in a process of its own (this one the first, a fork each other
    one; on two cores about half the time of drawing them in turn); one reply."""
    names = figures.names()
    helpers: list[tuple[int, int]] = []  # (pid, read end of its reply pipe)
    for name in names[1:]:
        reply_read, reply_write = os.pipe()
        pid = fork_quietly()
        if pid == 0:  # pragma: no cover (a helper; tested through the parent)
            os.close(reply_read)
            exit_with(functools.partial(draw_reply, figures, [name]), reply_write)
        os.close(reply_write)
        helpers.append((pid, reply_read))
    replies = [draw_reply(figures, names[:1])]
    for pid, reply_read in helpers:
        reply_bytes = read_all(reply_read)
        os.close(reply_read)
        replies.append(reply_of(reply_bytes, os.waitpid(pid, 0)[1]))
    errors = [reply for reply in replies if "error" in reply]
    if errors:
        return errors[0]
    return {"paths": [path for reply in replies for path in reply["paths"]]}


# Niceness of the thread that imports matplotlib while the parent simulates.
IMPORT_NICENESS = 10


def import_matplotlib() -> None:
    """Import matplotlib, draw a first figure and make the run's figures up to their
    data, at a low priority (this thread only, on Linux): it runs while the parent
    simulates, whose summary comes first; the helpers forked to draw inherit the caches."""
    with contextlib.suppress(OSError):  # not allowed: import at the usual priority
        os.nice(IMPORT_NICENESS)
    try:
        from sim.metrics.figure_draw import prebuild, warm_up

        warm_up()
        prebuild()  # each figure up to its data: its draw then starts from there
    except Exception:
        pass  # drawing imports them again, and reports the error


def serve(job_fd: int) -> Reply | None:
    """The worker: import matplotlib (in a thread, so that the drawing keeps the usual
    priority), wait for the job, draw it; None when there is none."""
    importer = threading.Thread(target=import_matplotlib, daemon=True)
    importer.start()
    job_bytes = read_all(job_fd)
    importer.join()
    if not job_bytes:  # the parent closed without a job: nothing to draw
        return None
    return draw_in_processes(pickle.loads(job_bytes))


class FigureError(RuntimeError):
    """The figure process failed: its one-line error, or the signal that ended it."""


# Above this share of the last 10 s with a task waiting for a CPU, no core is spare.
BUSY_CPU_PRESSURE_PCT = 25.0
CPU_PRESSURE = Path("/proc/pressure/cpu")


def cpu_pressure_pct(path: Path = CPU_PRESSURE) -> float | None:
    """Linux's CPU pressure (``some avg10=1.25 avg60=...`` in ``path``, Linux >= 4.20): %
    of the last 10 s some task waited for a CPU; None if unknown."""
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
    """Whether a second core is free now to draw the figures on: two cores, a 1-minute
    load under the cores less a half and little CPU pressure where Linux reports it
    (the load says how many run, the pressure whether they wait)."""
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
        """Wait until the submitted job is drawn; the figures' paths (``FigureError`` or
        ``ConfigError`` when the worker failed)."""
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
