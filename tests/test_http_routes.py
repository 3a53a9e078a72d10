"""``servesim serve``'s routes with a scripted engine: every answer's shape, traced by hand.

``calibration.http_server`` needs of its engine only ``submit``, ``abort``,
``tokenizer``, ``max_model_len_tokens`` and ``error``; ``ScriptedEngine``
has those and answers each request with ``max_tokens`` outputs ``t0``,
``t1``, ... (or the ones a test scripts), so that chunk counts, ids, finish
reasons and usage are known before the request is sent. The real engine
behind the same routes is tested in ``tests/test_http_server.py``; the
mailbox that carries its outputs to the event loop is tested here too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

pytest.importorskip("torch")  # calibration.reference_engine imports it
pytest.importorskip("aiohttp")

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sim.openai.server import Mailbox, _prompt_ids, make_app
from calibration.reference_engine import Emitted, OnlineEngine, Sink
from sim.openai.tokenizer import ByteTokenizer

MODEL = "tiny"


class ScriptedEngine:
    """Answers request ``i`` with ``outputs(i, max_tokens)`` at once, on the caller's thread,
    or, with ``trickle``, one output every few milliseconds from a thread until aborted."""

    def __init__(self, max_model_len_tokens: int = 64, trickle: bool = False) -> None:
        self.tokenizer = ByteTokenizer()
        self.max_model_len_tokens = max_model_len_tokens
        self.error: BaseException | None = None
        self.submitted: list[tuple[list[int], int, bool]] = []
        self.aborted: list[int] = []
        self.trickle = trickle
        self.reason = "length"

    def submit(self, prompt_ids: list[int], max_tokens: int, ignore_eos: bool, sink: Sink) -> int:
        request_id = len(self.submitted)
        self.submitted.append((list(prompt_ids), max_tokens, ignore_eos))
        n = len(prompt_ids)
        if self.trickle:
            threading.Thread(target=self._trickle, args=(request_id, n, sink), daemon=True).start()
            return request_id
        for i in range(max_tokens):
            last = i == max_tokens - 1
            sink(Emitted(f"t{i}", self.reason if last else None, n, i + 1))
        return request_id

    def _trickle(self, request_id: int, num_prompt: int, sink: Sink) -> None:
        for i in range(2000):  # ~20 s at most: the test hangs up long before
            if request_id in self.aborted:
                return
            sink(Emitted("x", None, num_prompt, i + 1))
            threading.Event().wait(0.01)

    def abort(self, request_id: int) -> None:
        self.aborted.append(request_id)


def client_call(
    engine: ScriptedEngine, test: Callable[[TestClient], Awaitable[Any]], model: str = MODEL
) -> Any:
    async def go() -> Any:
        app = make_app(cast(OnlineEngine, engine), model)
        async with TestClient(TestServer(app)) as client:
            return await test(client)

    return asyncio.run(go())


def post(engine: ScriptedEngine, path: str, body: Any) -> tuple[int, str]:
    async def test(client: TestClient) -> tuple[int, str]:
        response = await client.post(path, json=body)
        return response.status, await response.text()

    return client_call(engine, test)


def events(raw: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body (``[DONE]`` kept as a string)."""
    parts = [p[6:] for p in raw.split("\n\n") if p.startswith("data: ")]
    return [p if p == "[DONE]" else json.loads(p) for p in parts]


# --- streamed completions ---------------------------------------------------------------


def test_a_completions_stream_is_one_chunk_per_output_then_usage_then_done() -> None:
    engine = ScriptedEngine()
    body = {
        "model": MODEL,
        "prompt": "abcd",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, raw = post(engine, "/v1/completions", body)
    assert status == 200
    data = events(raw)
    assert len(data) == 5 and data[-1] == "[DONE]"
    chunks, usage = data[:3], data[3]
    assert [c["choices"][0]["text"] for c in chunks] == ["t0", "t1", "t2"]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    assert {c["id"] for c in chunks} == {"cmpl-0"} and {c["model"] for c in chunks} == {MODEL}
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert chunks[0]["choices"][0]["index"] == 0 and chunks[0]["choices"][0]["logprobs"] is None
    assert usage["choices"] == [] and usage["id"] == "cmpl-0"
    assert usage["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    assert engine.submitted == [(engine.tokenizer.encode("abcd"), 3, False)]


def test_no_usage_chunk_unless_asked() -> None:
    status, raw = post(
        ScriptedEngine(), "/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True}
    )
    data = events(raw)
    assert status == 200 and len(data) == 3 and all("usage" not in d for d in data[:-1])


def test_a_chat_stream_starts_with_the_role_and_then_carries_deltas() -> None:
    engine = ScriptedEngine()
    body = {
        "messages": [{"role": "system", "content": "be"}, {"role": "user", "content": "hi"}],
        "max_tokens": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, raw = post(engine, "/v1/chat/completions", body)
    data = events(raw)
    assert status == 200 and data[-1] == "[DONE]"
    role, first, second, usage = data[:4]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["choices"][0]["finish_reason"] is None
    assert [d["choices"][0]["delta"] for d in (first, second)] == [
        {"content": "t0"},
        {"content": "t1"},
    ]
    assert second["choices"][0]["finish_reason"] == "length"
    assert {d["object"] for d in (role, first, second)} == {"chat.completion.chunk"}
    assert {d["id"] for d in data[:4]} == {"chatcmpl-0"}
    # The chat template: contents joined by a newline, "be\nhi" = 5 tokens.
    assert usage["usage"]["prompt_tokens"] == 5
    assert engine.submitted[0][0] == engine.tokenizer.encode("be\nhi")


def test_ids_count_up_across_requests() -> None:
    engine = ScriptedEngine()

    async def test(client: TestClient) -> list[str]:
        ids = []
        for _ in range(3):
            body = {"prompt": "a", "max_tokens": 1, "stream": True}
            raw = await (await client.post("/v1/completions", json=body)).text()
            ids.append(events(raw)[0]["id"])
        return ids

    assert client_call(engine, test) == ["cmpl-0", "cmpl-1", "cmpl-2"]


def test_a_stop_reason_ends_the_stream() -> None:
    engine = ScriptedEngine()
    engine.reason = "stop"
    _, raw = post(engine, "/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True})
    assert events(raw)[1]["choices"][0]["finish_reason"] == "stop"


# --- max_tokens, ignore_eos and the model ----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "max_tokens"),
    [
        ("/v1/completions", {"prompt": "abcd"}, 16),  # vLLM's completions default
        ("/v1/chat/completions", {"messages": [{"content": "abcd"}]}, 60),  # the room left
        ("/v1/completions", {"prompt": "ab", "max_completion_tokens": 5}, 5),
        ("/v1/completions", {"prompt": "ab", "max_tokens": 4, "max_completion_tokens": 9}, 4),
        ("/v1/completions", {"prompt": "ab", "max_tokens": 62}, 62),  # fills 64 exactly
    ],
)
def test_max_tokens_and_its_defaults(path: str, body: dict[str, Any], max_tokens: int) -> None:
    engine = ScriptedEngine(max_model_len_tokens=64)
    status, _ = post(engine, path, body)
    assert status == 200 and engine.submitted[0][1] == max_tokens


@pytest.mark.parametrize(
    ("value", "sent"), [(True, True), (1, True), (False, False), (None, False)]
)
def test_ignore_eos_is_handed_to_the_engine(value: Any, sent: bool) -> None:
    engine = ScriptedEngine()
    post(engine, "/v1/completions", {"prompt": "a", "max_tokens": 1, "ignore_eos": value})
    assert engine.submitted[0][2] is sent


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"prompt": "ab", "max_tokens": 63}, 400, "prompt of 2 tokens + max_tokens 63 must fit"),
        ({"prompt": "", "max_tokens": 1}, 400, "prompt of 0 tokens"),
        ({"prompt": "a", "max_tokens": -1}, 400, "max_tokens -1"),
        ({"prompt": "a", "max_tokens": "many"}, 400, "invalid literal for int()"),
        ({"prompt": "a", "model": "other"}, 404, "The model `other` does not exist."),
        ({"prompt": [1, "a"]}, 400, "'prompt' must be a string or a list of token ids"),
        ({"prompt": ["a", "b"]}, 400, "'prompt' must be"),  # a batch of two: not served
    ],
)
def test_refused_requests_reach_no_engine(body: dict[str, Any], status: int, message: str) -> None:
    engine = ScriptedEngine(max_model_len_tokens=64)
    got, raw = post(engine, "/v1/completions", body)
    error = json.loads(raw)
    assert got == status and error["code"] == status and message in error["message"]
    assert error["object"] == "error" and error["type"] == "BadRequestError"
    assert engine.submitted == []


def test_the_served_model_name_or_none_is_accepted() -> None:
    engine = ScriptedEngine()
    assert post(engine, "/v1/completions", {"prompt": "a", "model": MODEL})[0] == 200
    assert post(engine, "/v1/completions", {"prompt": "a"})[0] == 200


# --- whole answers ---------------------------------------------------------------------------


def test_a_whole_completion_joins_the_outputs() -> None:
    status, raw = post(ScriptedEngine(), "/v1/completions", {"prompt": "abc", "max_tokens": 3})
    answer = json.loads(raw)
    assert status == 200 and answer["object"] == "text_completion" and answer["id"] == "cmpl-0"
    assert answer["choices"] == [{"index": 0, "finish_reason": "length", "text": "t0t1t2"}]
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_a_whole_chat_answer_is_one_assistant_message() -> None:
    body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 2}
    status, raw = post(ScriptedEngine(), "/v1/chat/completions", body)
    answer = json.loads(raw)
    assert status == 200 and answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "t0t1"}
    assert answer["id"] == "chatcmpl-0"


# --- a client that hangs up ------------------------------------------------------------------


def test_a_client_that_hangs_up_aborts_its_request(caplog: pytest.LogCaptureFixture) -> None:
    engine = ScriptedEngine(trickle=True)

    async def go() -> None:
        # Served as `servesim serve` serves (an AppRunner), and hung up on from a raw
        # socket mid-stream, as curl or a killed benchmark client does.
        runner = web.AppRunner(make_app(cast(OnlineEngine, engine), MODEL), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            reader, writer = await asyncio.open_connection(host, port)
            body = json.dumps({"prompt": "a", "max_tokens": 50, "stream": True}).encode()
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            await reader.readuntil(b"data: ")  # the first chunk came
            writer.close()
            for _ in range(500):  # the next write fails, and the server aborts
                if engine.aborted:
                    await asyncio.sleep(0.2)  # the handler ends; aiohttp logs what it let out
                    return
                await asyncio.sleep(0.01)
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.DEBUG, logger="aiohttp"):
        asyncio.run(go())
    assert engine.aborted == [0]
    # A hang-up is the client's right, not a server error: no traceback in the log
    # (aiohttp logs "Error handling request" for any exception a handler lets out).
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# --- tokenize, models, health ------------------------------------------------------------------


def test_tokenize_answers_as_vllm_does() -> None:
    engine = ScriptedEngine(max_model_len_tokens=64)
    status, raw = post(engine, "/tokenize", {"prompt": "héllo"})
    answer = json.loads(raw)
    ids = engine.tokenizer.encode("héllo")
    assert status == 200 and answer == {"count": len(ids), "max_model_len": 64, "tokens": ids}
    assert answer["count"] == 6  # one token per byte: é is two
    _, raw = post(engine, "/tokenize", {"messages": [{"content": "a"}, "junk", {"content": None}]})
    assert json.loads(raw)["count"] == 2  # "a\n": a non-object message is left out
    assert post(engine, "/tokenize", {"messages": "hi"})[0] == 400
    assert engine.submitted == []  # counting runs no request


def test_models_lists_the_served_model() -> None:
    async def test(client: TestClient) -> Any:
        return await (await client.get("/v1/models")).json()

    answer = client_call(ScriptedEngine(max_model_len_tokens=99), test, model="org/m")
    assert answer["object"] == "list"
    assert answer["data"] == [
        {"id": "org/m", "object": "model", "owned_by": "servesim", "max_model_len": 99}
    ]


def test_health_says_when_the_engine_stopped() -> None:
    engine = ScriptedEngine()

    async def test(client: TestClient) -> tuple[int, int, str]:
        ok = (await client.get("/health")).status
        engine.error = RuntimeError("boom")
        broken = await client.get("/health")
        return ok, broken.status, await broken.text()

    assert client_call(engine, test) == (200, 503, "engine stopped: boom")


# --- prompts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "chat", "text_or_ids"),
    [
        ({"prompt": "ab"}, False, "ab"),
        ({"prompt": ["ab"]}, False, "ab"),  # a batch of one
        ({"prompt": [7, 8, 9]}, False, [7, 8, 9]),
        ({"prompt": [[7, 8]]}, False, [7, 8]),  # a batch of one token list
        ({"prompt": [[7], [8]]}, False, None),  # a batch of two: not served
        ({"prompt": []}, False, []),
        ({"messages": [{"content": "a"}, {"content": "b"}]}, True, "a\nb"),
        ({"messages": [{"content": 5}]}, True, "5"),
        ({"messages": []}, True, None),
        ({"prompt": "ab"}, True, None),  # chat needs messages
    ],
)
def test_prompt_ids(body: dict[str, Any], chat: bool, text_or_ids: Any) -> None:
    engine = cast(OnlineEngine, ScriptedEngine())
    if text_or_ids is None:
        with pytest.raises(ValueError, match="must be"):
            _prompt_ids(engine, body, chat)
        return
    want = text_or_ids if isinstance(text_or_ids, list) else engine.tokenizer.encode(text_or_ids)
    assert _prompt_ids(engine, body, chat) == want


# --- the mailbox ------------------------------------------------------------------------------


class StubLoop:
    """Records ``call_soon_threadsafe`` instead of running it."""

    def __init__(self, closed: bool = False) -> None:
        self.calls: list[Callable[[], None]] = []
        self.closed = closed

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        self.calls.append(callback)

    def is_closed(self) -> bool:
        return self.closed


def emitted(i: int) -> Emitted:
    return Emitted(f"e{i}", None, 1, i)


def test_one_wake_up_per_batch_of_events() -> None:
    box, loop = Mailbox(), StubLoop()
    box.bind(loop)  # type: ignore[arg-type]
    first: asyncio.Queue[Emitted] = asyncio.Queue()
    second: asyncio.Queue[Emitted] = asyncio.Queue()
    box.put(first, emitted(0))
    box.put(second, emitted(1))
    box.put(first, emitted(2))
    assert len(loop.calls) == 1  # three events, one wake-up
    loop.calls[0]()
    assert [first.get_nowait().text, first.get_nowait().text] == ["e0", "e2"]
    assert second.get_nowait().text == "e1" and first.empty()
    box.put(first, emitted(3))  # after a delivery: a new batch, a new wake-up
    assert len(loop.calls) == 2


def test_an_unbound_or_closed_loop_is_not_woken() -> None:
    box = Mailbox()
    queue: asyncio.Queue[Emitted] = asyncio.Queue()
    box.put(queue, emitted(0))  # not bound yet: kept, nobody woken
    closed = StubLoop(closed=True)
    box.bind(closed)  # type: ignore[arg-type]
    box.put(queue, emitted(1))
    assert closed.calls == [] and queue.empty()


def test_events_from_another_thread_arrive_in_order() -> None:
    async def go() -> list[str]:
        box = Mailbox()
        box.bind(asyncio.get_running_loop())
        queue: asyncio.Queue[Emitted] = asyncio.Queue()

        def engine_thread() -> None:
            for i in range(200):
                box.put(queue, emitted(i))

        worker = threading.Thread(target=engine_thread)
        worker.start()
        got = [(await asyncio.wait_for(queue.get(), 10)).text for _ in range(200)]
        worker.join()
        return got

    assert asyncio.run(go()) == [f"e{i}" for i in range(200)]
