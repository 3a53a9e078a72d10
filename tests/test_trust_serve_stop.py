"""``servesim serve`` told to stop says what it waits for, and a second Ctrl-C cuts it short.

``servesim serve --simulate`` in a subprocess (Llama-3-70B on 4 H100s, steps of
~15 ms) with two streams open, each asking for far more tokens than the test
lasts: on Ctrl-C it must say at once that it waits for those two requests and
for how long (``SHUTDOWN_TIMEOUT_S``), instead of going quiet; a second Ctrl-C
stops it with exit code 0, each cut request aborted in one log line and no
traceback.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from sim.openai.server import SHUTDOWN_TIMEOUT_S

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 60.0  # a bound for the subprocess, never reached when it works


class Lines:
    """A pipe's lines, read on a thread so that the test can wait for one with a bound."""

    def __init__(self, pipe: object) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe: object) -> None:
        for line in pipe:  # type: ignore[attr-defined]
            self._lines.put(line)

    def next(self) -> str:
        try:
            return self._lines.get(timeout=WAIT_S).rstrip("\n")
        except queue.Empty:
            pytest.fail("the server printed nothing more")


@pytest.fixture
def server() -> Iterator[subprocess.Popen[str]]:
    argv = [sys.executable, "-m", "sim.cli", "serve", "--simulate"]
    argv += [str(ROOT / "scenarios" / "llama70b_tp.yaml"), "--port", "0"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def open_stream(port: int) -> socket.socket:
    """A stream of 4000 tokens (a minute at ~15 ms a step), read up to its first chunks."""
    body = json.dumps({"prompt": "hello", "max_tokens": 4000, "stream": True}).encode()
    client = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    client.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received = b""
    while received.count(b"data: ") < 2:
        received += client.recv(65536)
    return client


def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_at_once(
    server: subprocess.Popen[str],
) -> None:
    out = Lines(server.stdout)
    first = out.next()
    assert "http://" in first, first
    port = int(first.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])
    streams = [open_stream(port), open_stream(port)]
    server.send_signal(signal.SIGINT)
    assert out.next() == (
        f"servesim serve: stopping: waiting up to {SHUTDOWN_TIMEOUT_S:g} s for 2 requests "
        "in the engine to finish (Ctrl-C cuts them now)"
    )
    server.send_signal(signal.SIGINT)
    assert server.wait(WAIT_S) == 0
    assert out.next() == "servesim serve: stopped"
    assert server.stderr is not None
    err = server.stderr.read()
    assert "Traceback" not in err, err
    aborted = [line for line in err.splitlines() if "aborted engine request" in line]
    assert len(aborted) == 2 and all(line.endswith("the server is stopping") for line in aborted)
    for stream in streams:
        stream.close()


def test_ctrl_c_with_nothing_open_stops_at_once(server: subprocess.Popen[str]) -> None:
    out = Lines(server.stdout)
    assert "http://" in out.next()
    server.send_signal(signal.SIGINT)
    assert out.next() == "servesim serve: stopping"
    assert server.wait(WAIT_S) == 0
    assert out.next() == "servesim serve: stopped"
