"""A client that hangs up on ``servesim serve``: its request is aborted as vLLM aborts one.

A real server on a localhost port (``endpoint_fakes.ThreadedApp``, as the
conformance tests run it) over the simulated engine (``SimulatedEngine``, its
own thread on the wall clock: Llama-3-70B on 4 H100s, steps of ~15 ms), and a
raw socket client that leaves at each point a client can: right after sending
its request (before the response's headers: a reset races the handler, which
may be anywhere from before ``prepare`` to mid-stream), after reading a few
chunks of a stream, while waiting for a whole answer, and halfway through
sending its body. Each time the engine must end up empty (no request running
or waiting, no KV block in use), ``/metrics`` must count every request the
engine took as ``vllm:request_success_total{finished_reason="abort"}``, the
log must say so in one line per request and hold no traceback.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
prometheus_parser = pytest.importorskip("prometheus_client.parser")

from aiohttp import web  # noqa: E402
from endpoint_fakes import ThreadedApp  # noqa: E402

from sim.api import engine_for  # noqa: E402
from sim.openai.server import make_app  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402
from sim.serving.realtime import SimulatedEngine  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "llama70b_tp.yaml"
WAIT_S = 30.0  # a bound for the engine to settle, never reached when it works
# Far more than the test lasts (~15 ms a step): a request still running was not aborted.
MAX_TOKENS = 4000
ABORTED = "aborted engine request"


class Served(ThreadedApp):
    def __init__(self, engine: SimulatedEngine) -> None:
        super().__init__()
        self.engine = engine

    def make_app(self) -> web.Application:
        return make_app(self.engine, "m")


@pytest.fixture
def engine() -> Iterator[SimulatedEngine]:
    simulated = SimulatedEngine(engine_for(load_scenario(SCENARIO)))
    simulated.start()
    yield simulated
    simulated.stop()


@pytest.fixture
def served(engine: SimulatedEngine) -> Iterator[Served]:
    with Served(engine) as server:
        yield server


def request_bytes(stream: bool) -> tuple[bytes, bytes]:
    """The head and the body of a completion request."""
    body = json.dumps(
        {"prompt": "hello " * 20, "max_tokens": MAX_TOKENS, "stream": stream}
    ).encode()
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head, body


def connect(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    # Closing sends a reset, as a killed client or a load generator's cancelled task does.
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return client


def hang_up(port: int, how: str) -> None:
    """One client leaving as ``how`` says."""
    head, body = request_bytes(stream=how != "whole")
    with connect(port) as client:
        if how == "mid_body":
            client.sendall(head + body[: len(body) // 2])
            return
        client.sendall(head + body)
        if how == "mid_stream":
            received = b""
            while received.count(b"data: ") < 3:  # the headers and a few chunks
                received += client.recv(65536)
        elif how == "whole":
            time.sleep(0.1)  # the request is in the engine, the answer not yet sent


def settled(engine: SimulatedEngine) -> bool:
    load = engine.load()
    return (load.num_running, load.num_waiting, load.kv_cache_usage) == (0, 0, 0.0)


def wait_until_settled(engine: SimulatedEngine) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not settled(engine):
        time.sleep(0.05)


def aborts_counted(url: str) -> float:
    """``vllm:request_success_total{finished_reason="abort"}`` on the server's page."""
    with urllib.request.urlopen(url + "/metrics", timeout=WAIT_S) as answer:
        text = answer.read().decode()
    return sum(
        s.value
        for family in prometheus_parser.text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:request_success_total" and s.labels["finished_reason"] == "abort"
    )


def no_traceback(records: list[logging.LogRecord]) -> None:
    tracebacks = [r for r in records if r.exc_info is not None or "Traceback" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


@pytest.mark.parametrize(
    ("how", "num_clients"), [("before_headers", 12), ("mid_stream", 3), ("whole", 2)]
)
def test_a_client_that_hangs_up_has_its_request_aborted_counted_and_logged_once(
    served: Served,
    engine: SimulatedEngine,
    caplog: pytest.LogCaptureFixture,
    how: str,
    num_clients: int,
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(num_clients):
        hang_up(served.port, how)
    # Every request was sent whole: each reaches the engine, and is aborted.
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and caplog.text.count(ABORTED) < num_clients:
        time.sleep(0.05)
    wait_until_settled(engine)
    num_taken = engine._mail.num_ids  # requests the engine was handed (each got an id)
    assert num_taken == num_clients
    assert settled(engine), engine.load()  # nothing running or waiting, no KV block held
    assert aborts_counted(served.base_url) == num_taken  # each one aborted, none finished
    lines = [r for r in caplog.records if ABORTED in r.getMessage()]
    assert len(lines) == num_taken
    assert all("the client disconnected" in r.getMessage() for r in lines)
    assert all("\n" not in r.getMessage() for r in lines)
    no_traceback(caplog.records)


def test_a_client_that_hangs_up_mid_body_is_one_log_line(
    served: Served, engine: SimulatedEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hang_up(served.port, "mid_body")
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not caplog.records:
        time.sleep(0.05)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        "servesim serve: POST /v1/completions: the client disconnected before sending "
        "its whole request"
    )
    no_traceback(caplog.records)
    assert engine._mail.num_ids == 0 and settled(engine)  # nothing reached the engine
    assert aborts_counted(served.base_url) == 0
