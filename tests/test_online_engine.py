"""``servesim serve``'s online engine on the tiny model: the paths a request can end by.

A request ends at ``max_tokens`` ("length"), at EOS ("stop"), by ``abort``
(its client went away: no final event), at once when it can never fit the
KV pool ("abort", no token), or when the engine loop itself fails ("abort"
for every live request, and ``/health`` says so). The finishing-by-length
and EOS paths are in ``tests/test_http_server.py``; these build their own
engine (a small KV pool, one sequence at a time, or a loop made to fail).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("aiohttp")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from calibration.reference_engine import OnlineEngine  # noqa: E402
from sim.openai.server import make_app  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402
from sim.serving.stream import Emitted, Submission  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "validate_tiny_cpu.yaml"
WAIT_S = 30.0  # a bound for the engine thread, never reached when it works


def started(*sets: str) -> OnlineEngine:
    engine = OnlineEngine(load_scenario(SCENARIO, list(sets)), torch.float32, torch.device("cpu"))
    engine.start()
    return engine


@pytest.fixture
def small_pool() -> Iterator[OnlineEngine]:
    # 4 blocks of 16 tokens: 64 tokens in all, as long as a request may be (vLLM refuses
    # a pool smaller than one max_model_len request).
    engine = started("engine.num_kv_blocks=4", "engine.max_model_len_tokens=64")
    yield engine
    engine.stop()


@pytest.fixture
def one_at_a_time() -> Iterator[OnlineEngine]:
    engine = started("scheduler.max_num_seqs=1")
    yield engine
    engine.stop()


class Collector:
    """A sink that keeps what it gets and says when the last event came."""

    def __init__(self) -> None:
        self.events: list[Emitted] = []
        self.finished = threading.Event()

    def __call__(self, event: Emitted) -> None:
        self.events.append(event)
        if event.finish_reason is not None:
            self.finished.set()


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def all_free(engine: OnlineEngine) -> bool:
    return engine.core.kv.num_free_blocks == engine.core.kv.num_blocks


def test_ids_count_up_and_every_event_counts_its_tokens(small_pool: OnlineEngine) -> None:
    sinks = [Collector(), Collector()]
    ids = [small_pool.submit(Submission([5] * 8, 3, True, sink)) for sink in sinks]
    assert ids == [0, 1]
    for sink in sinks:
        assert sink.finished.wait(WAIT_S)
        assert [e.num_generated_tokens for e in sink.events] == [1, 2, 3]
        assert {e.num_prompt_tokens for e in sink.events} == {8}
        assert [e.finish_reason for e in sink.events] == [None, None, "length"]
        assert all(len(e.token_ids) == 1 for e in sink.events)  # one token per step
    until(lambda: all_free(small_pool), "finished requests keep blocks")


def test_a_request_that_can_never_fit_is_finished_at_once(small_pool: OnlineEngine) -> None:
    sink = Collector()
    small_pool.submit(Submission([6] * 100, 5, True, sink))  # 100 prompt tokens > 64 in the pool
    assert sink.finished.wait(WAIT_S)
    (event,) = sink.events
    assert (event.token_ids, event.finish_reason, event.num_generated_tokens) == ((), "abort", 0)
    assert all_free(small_pool) and small_pool.error is None
    after = Collector()  # the engine goes on serving
    small_pool.submit(Submission([6] * 10, 2, True, after))
    assert after.finished.wait(WAIT_S) and after.events[-1].finish_reason == "length"


def test_a_stream_too_long_for_the_pool_is_refused_before_it_starts(
    small_pool: OnlineEngine,
) -> None:
    # The pool holds one request of max_model_len (vLLM refuses a smaller one at
    # start), so a request that could never fit is longer than the context: the
    # server answers 400, as vLLM does, and no stream starts.
    async def go() -> tuple[int, str]:
        async with TestClient(TestServer(make_app(small_pool, "tiny"))) as client:
            body = {"prompt": "p" * 100, "max_tokens": 5, "stream": True}
            response = await client.post("/v1/completions", json=body)
            return response.status, await response.text()

    status, text = asyncio.run(go())
    assert status == 400 and "maximum context length is 64 tokens" in text
    assert "data:" not in text


def test_aborting_a_request_that_still_waits_takes_it_off_the_queue(
    one_at_a_time: OnlineEngine,
) -> None:
    engine = one_at_a_time
    running, waiting = Collector(), Collector()
    first = engine.submit(Submission([7] * 10, 500, True, running))
    second = engine.submit(Submission([7] * 10, 5, True, waiting))
    until(lambda: running.events, "the first request never produced a token")
    assert [r.request_id for r in engine.core.waiting] == [second]  # one sequence at a time
    load = engine.load()  # the gauges of /metrics
    assert (load.num_running, load.num_waiting) == (1, 1)
    blocks = engine.core.kv.num_blocks
    assert 1 / blocks <= load.kv_cache_usage <= 1  # the running request holds blocks
    engine.abort(second)
    until(lambda: not engine.core.waiting, "the aborted request is still queued")
    engine.abort(first)
    until(lambda: all_free(engine), "aborted requests keep blocks")
    assert waiting.events == [] and not running.finished.is_set()  # aborts send nothing
    assert first not in engine.executor.slot_of and second not in engine.executor.slot_of
    idle = engine.load()
    assert (idle.num_running, idle.num_waiting, idle.kv_cache_usage) == (0, 0, 0.0)


def test_aborting_an_unknown_or_finished_request_is_harmless(small_pool: OnlineEngine) -> None:
    sink = Collector()
    rid = small_pool.submit(Submission([8] * 4, 1, True, sink))
    assert sink.finished.wait(WAIT_S)
    small_pool.abort(rid)  # already finished
    small_pool.abort(12345)  # never existed
    again = Collector()
    small_pool.submit(Submission([8] * 4, 2, True, again))
    assert again.finished.wait(WAIT_S) and small_pool.error is None


def test_a_failing_loop_ends_every_live_request_and_health_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = started()
    try:
        real = engine.core.schedule

        def failing(now_s: float, *args: Any) -> Any:
            if engine.core.waiting:  # after the request below is taken in
                raise RuntimeError("boom")
            return real(now_s, *args)

        monkeypatch.setattr(engine.core, "schedule", failing)
        sink = Collector()
        engine.submit(Submission([9] * 6, 4, True, sink))
        assert sink.finished.wait(WAIT_S)
        assert [(e.token_ids, e.finish_reason) for e in sink.events] == [((), "abort")]
        until(lambda: engine.error is not None, "the loop's error was not kept")
        assert isinstance(engine.error, RuntimeError) and str(engine.error) == "boom"

        async def health() -> tuple[int, str]:
            async with TestClient(TestServer(make_app(engine, "tiny"))) as client:
                answer = await client.get("/health")
                return answer.status, await answer.text()

        assert asyncio.run(health()) == (503, "engine stopped: boom")
    finally:
        engine.stop()


def test_stop_ends_the_engine_thread() -> None:
    engine = started()
    engine.stop()
    assert not engine._thread.is_alive()
    assert engine.error is None  # stopped, not failed


def test_submissions_from_many_threads_get_distinct_ids_and_all_finish(
    small_pool: OnlineEngine,
) -> None:
    # aiohttp handlers submit from the server's thread while others may too: the
    # id counter is locked, and every request is served once.
    sinks = [Collector() for _ in range(12)]
    ids: list[int] = []
    lock = threading.Lock()

    def submit(sink: Collector) -> None:
        rid = small_pool.submit(Submission([3] * 6, 2, True, sink))
        with lock:
            ids.append(rid)

    threads = [threading.Thread(target=submit, args=(sink,)) for sink in sinks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ids) == list(range(12))
    for sink in sinks:
        assert sink.finished.wait(WAIT_S)
        assert [e.finish_reason for e in sink.events] == [None, "length"]
    until(lambda: all_free(small_pool), "finished requests keep blocks")
