"""The forked side of ``servesim run``'s figures (``sim.cli.figures``): what the
figure process and its helper run, and the pipes and replies between processes.

A reply is a small JSON object: ``{"paths": [...]}`` for the figures written, or
``{"error": "one line"}`` (with ``"config_error": true`` for a user error). A
process that dies without replying is described by its exit status.
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
from typing import TYPE_CHECKING, Any, NoReturn

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.metrics.figure_data import Figures

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
    """``os.fork``, output flushed first and Python 3.12's thread warning silenced."""
    sys.stdout.flush()  # else the child holds a copy of unwritten output
    sys.stderr.flush()
    with warnings.catch_warnings():
        # Python >= 3.12 warns on forking with threads running: numpy's BLAS
        # pool, idle, and reset in the child by OpenBLAS's own fork handler.
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def exit_with(work: Callable[[], Reply | None], reply_fd: int) -> NoReturn:
    """In a forked child: run ``work``, send its reply, exit (never returns).

    ``os._exit``: the copy of the caller must run none of its code or exit
    handlers, nor flush its buffers a second time.
    """
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
    """Draw each figure of ``figures`` in a process of its own: this one draws the
    first, a fork of it each other one; one reply, the paths in ``names`` order.

    On two cores (the parent is idle once its tables are written) three figures
    take about half the time of one process drawing them in turn, and the
    figures of about equal cost share the cores evenly.
    """
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
    """Import what the figures need (numpy and matplotlib, not pandas), draw a
    first one and make the run's figures up to their data, at a low priority
    (this thread only, on Linux).

    It runs while the parent imports the simulator and simulates: on a busy
    machine the parent's summary comes first, on an idle one this takes the
    spare core all the same. The helper forked to draw inherits the warm
    caches (fonts, text layouts).
    """
    with contextlib.suppress(OSError):  # not allowed: import at the usual priority
        os.nice(IMPORT_NICENESS)
    try:
        from sim.metrics.figure_draw import prebuild, warm_up

        warm_up()
        prebuild()  # each figure up to its data: its draw then starts from there
    except Exception:
        pass  # drawing imports them again, and reports the error


def serve(job_fd: int) -> Reply | None:
    """The worker: import matplotlib, wait for the job, draw it; None when there is none.

    The import runs in a thread of its own, so that the drawing, here, keeps
    the usual priority; an import error shows again when the drawing imports.
    """
    importer = threading.Thread(target=import_matplotlib, daemon=True)
    importer.start()
    job_bytes = read_all(job_fd)
    importer.join()
    if not job_bytes:  # the parent closed without a job: nothing to draw
        return None
    return draw_in_processes(pickle.loads(job_bytes))
