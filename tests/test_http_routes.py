"""``servesim serve``'s routes with a scripted engine: every answer's shape, traced by hand.

``sim.openai.server`` sees its engine only as a ``sim.serving.stream.OnlineBackend``;
``ScriptedBackend`` (``tests/scripted_backend.py``) answers each request with
``max_tokens`` one-byte tokens of a known reply, so that chunk counts, ids,
texts, finish reasons and usage are known before the request is sent. The
real engine behind the same routes is tested in ``tests/test_http_server.py``,
the ``openai`` package against the server in ``tests/test_openai_conformance.py``;
the mailbox that carries the engine's outputs to the event loop is tested here too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from scripted_backend import ScriptedBackend

from sim.openai.server import Event, Mailbox, make_app
from sim.openai.tokenizer import ByteTokenizer
from sim.serving.stream import Emitted, Submission

MODEL = "tiny"
TOKENIZER = ByteTokenizer()


def client_call(
    engine: ScriptedBackend, test: Callable[[TestClient], Awaitable[Any]], model: str = MODEL
) -> Any:
    async def go() -> Any:
        app = make_app(engine, model)
        async with TestClient(TestServer(app)) as client:
            return await test(client)

    return asyncio.run(go())


def post(engine: ScriptedBackend, path: str, body: Any) -> tuple[int, str]:
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
    engine = ScriptedBackend()
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
    assert [c["choices"][0]["text"] for c in chunks] == ["a", "b", "c"]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    assert {c["id"] for c in chunks} == {"cmpl-0"} and {c["model"] for c in chunks} == {MODEL}
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert chunks[0]["choices"][0]["index"] == 0 and chunks[0]["choices"][0]["logprobs"] is None
    assert usage["choices"] == [] and usage["id"] == "cmpl-0"
    assert usage["object"] == "text_completion" and isinstance(usage["created"], int)
    assert usage["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    assert engine.submitted == [(TOKENIZER.encode("abcd"), 3, False)]


def test_no_usage_chunk_unless_asked() -> None:
    status, raw = post(
        ScriptedBackend(), "/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True}
    )
    data = events(raw)
    assert status == 200 and len(data) == 3 and all(d["usage"] is None for d in data[:-1])


def test_a_chat_stream_starts_with_the_role_and_then_carries_deltas() -> None:
    engine = ScriptedBackend()
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
        {"content": "a"},
        {"content": "b"},
    ]
    assert second["choices"][0]["finish_reason"] == "length"
    assert {d["object"] for d in (role, first, second)} == {"chat.completion.chunk"}
    assert {d["id"] for d in data[:4]} == {"chatcmpl-0"}
    # The chat template: contents joined by a newline, "be\nhi" = 5 tokens.
    assert usage["usage"]["prompt_tokens"] == 5
    assert engine.submitted[0][0] == TOKENIZER.encode("be\nhi")


def test_ids_count_up_across_requests() -> None:
    engine = ScriptedBackend()

    async def test(client: TestClient) -> list[str]:
        ids = []
        for _ in range(3):
            body = {"prompt": "a", "max_tokens": 1, "stream": True}
            raw = await (await client.post("/v1/completions", json=body)).text()
            ids.append(events(raw)[0]["id"])
        return ids

    assert client_call(engine, test) == ["cmpl-0", "cmpl-1", "cmpl-2"]


def test_a_stop_reason_ends_the_stream() -> None:
    engine = ScriptedBackend()
    engine.reason = "stop"
    _, raw = post(engine, "/v1/completions", {"prompt": "a", "max_tokens": 2, "stream": True})
    assert events(raw)[1]["choices"][0]["finish_reason"] == "stop"


# --- max_tokens, ignore_eos and the model ----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "max_tokens"),
    [
        ("/v1/completions", {"prompt": "abcd"}, 16),  # vLLM's completions default
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "abcd"}]},
            60,
        ),  # the room left
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "ab"}], "max_completion_tokens": 5},
            5,
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "max_tokens": 4},
            4,
        ),
        (  # the newer name wins, as in vLLM
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "a"}],
                "max_tokens": 4,
                "max_completion_tokens": 9,
            },
            9,
        ),
        ("/v1/completions", {"prompt": "ab" * 30}, 4),  # the default, cut to the room left
        ("/v1/completions", {"prompt": "ab", "max_tokens": 62}, 62),  # fills 64 exactly
    ],
)
def test_max_tokens_and_its_defaults(path: str, body: dict[str, Any], max_tokens: int) -> None:
    engine = ScriptedBackend(max_model_len_tokens=64)
    status, _ = post(engine, path, body)
    assert status == 200 and engine.submitted[0][1] == max_tokens


@pytest.mark.parametrize(
    ("value", "sent"), [(True, True), (1, True), (False, False), ("no", False)]
)
def test_ignore_eos_is_handed_to_the_engine(value: Any, sent: bool) -> None:
    engine = ScriptedBackend()
    post(engine, "/v1/completions", {"prompt": "a", "max_tokens": 1, "ignore_eos": value})
    assert engine.submitted[0][2] is sent


@pytest.mark.parametrize(
    ("body", "status", "message", "param"),
    [
        ({"prompt": "ab", "max_tokens": 63}, 400, "'max_tokens' is too large: 63.", "max_tokens"),
        ({"prompt": "a" * 64}, 400, "maximum context length is 64 tokens", None),
        ({"prompt": "", "max_tokens": 1}, 400, "The prompt is empty", "prompt"),
        (
            {"prompt": "a", "max_tokens": 0},
            400,
            "max_tokens: Input should be greater",
            "max_tokens",
        ),
        (
            {"prompt": "a", "max_tokens": "many"},
            400,
            "max_tokens: Input should be a valid",
            "max_tokens",
        ),
        ({"prompt": "a", "n": 0}, 400, "n: Input should be greater than or equal to 1", "n"),
        ({"prompt": "a", "stop": [""]}, 400, "a stop string must not be empty", "stop"),
        ({"prompt": "a", "model": "other"}, 404, "The model `other` does not exist.", "model"),
        ({"prompt": [1, "a"]}, 400, "prompt: expected a string, a list of strings", "prompt"),
        ({"max_tokens": 1}, 400, "prompt: Field required", "prompt"),
        ({"prompt": "a", "logprobs": 1}, 400, "logprobs: not supported", "logprobs"),
        ({"prompt": "a", "logprobs": 0}, 400, "logprobs: not supported", "logprobs"),
        ({"prompt": "a", "suffix": ""}, 400, "suffix: not supported", "suffix"),
        ({"prompt": "a", "best_of": 2}, 400, "best_of: not supported", "best_of"),
        ({"prompt": "a", "echo": True}, 400, "echo: not supported", "echo"),
        (
            {"prompt": "a", "stream_options": {"include_usage": True}},
            400,
            "stream=True",
            "stream_options",
        ),
        ("a list", 400, "the body must be a JSON object", None),
    ],
)
def test_refused_requests_reach_no_engine(
    body: Any, status: int, message: str, param: str | None
) -> None:
    engine = ScriptedBackend(max_model_len_tokens=64)
    got, raw = post(engine, "/v1/completions", body)
    error = json.loads(raw)["error"]
    assert got == status and error["code"] == status and message in error["message"], error
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
    assert error["param"] == param
    assert engine.submitted == []


def test_the_served_model_name_or_none_is_accepted() -> None:
    engine = ScriptedBackend()
    assert post(engine, "/v1/completions", {"prompt": "a", "model": MODEL})[0] == 200
    assert post(engine, "/v1/completions", {"prompt": "a"})[0] == 200


# --- whole answers ---------------------------------------------------------------------------


def test_a_whole_completion_joins_the_outputs() -> None:
    status, raw = post(ScriptedBackend(), "/v1/completions", {"prompt": "abc", "max_tokens": 3})
    answer = json.loads(raw)
    assert status == 200 and answer["object"] == "text_completion" and answer["id"] == "cmpl-0"
    assert answer["choices"] == [
        {
            "index": 0,
            "finish_reason": "length",
            "text": "abc",
            "logprobs": None,
            "stop_reason": None,
        }
    ]
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_a_whole_chat_answer_is_one_assistant_message() -> None:
    body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 2}
    status, raw = post(ScriptedBackend(), "/v1/chat/completions", body)
    answer = json.loads(raw)
    assert status == 200 and answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "ab"}
    assert answer["id"] == "chatcmpl-0"


# --- a client that hangs up ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_hangs_up_aborts_its_request(
    caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    engine = ScriptedBackend(max_model_len_tokens=2048, trickle=True)

    async def go() -> None:
        # Served as `servesim serve` serves (an AppRunner), and hung up on from a raw
        # socket, as curl or a killed benchmark client does: mid-stream, or while
        # waiting for a whole answer.
        runner = web.AppRunner(make_app(engine, MODEL), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            reader, writer = await asyncio.open_connection(host, port)
            body = json.dumps({"prompt": "a", "max_tokens": 1000, "stream": stream}).encode()
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            if stream:
                await asyncio.wait_for(reader.readuntil(b"data: "), 10)  # the first chunk came
            else:
                for _ in range(500):
                    if engine.submitted:
                        break
                    await asyncio.sleep(0.01)
            writer.close()
            for _ in range(500):  # the next write fails (or the check sees it), and it aborts
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
    engine = ScriptedBackend(max_model_len_tokens=64)
    status, raw = post(engine, "/tokenize", {"prompt": "héllo"})
    answer = json.loads(raw)
    ids = TOKENIZER.encode("héllo")
    assert status == 200 and answer == {"count": len(ids), "max_model_len": 64, "tokens": ids}
    assert answer["count"] == 6  # one token per byte: é is two
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": None}]
    _, raw = post(engine, "/tokenize", {"messages": messages})
    assert json.loads(raw)["count"] == 2  # "a\n": the chat template joins by newlines
    assert post(engine, "/tokenize", {"messages": "hi"})[0] == 400
    assert (
        post(engine, "/tokenize", {"messages": [{"role": "user", "content": "x"}], "prompt": "y"})[
            0
        ]
        == 400
    )
    assert engine.submitted == []  # counting runs no request


def test_models_lists_the_served_model() -> None:
    async def test(client: TestClient) -> Any:
        return await (await client.get("/v1/models")).json()

    answer = client_call(ScriptedBackend(max_model_len_tokens=99), test, model="org/m")
    assert answer["object"] == "list"
    (card,) = answer["data"]
    assert isinstance(card.pop("created"), int)
    assert card == {
        "id": "org/m",
        "object": "model",
        "owned_by": "servesim",
        "root": "org/m",
        "parent": None,
        "max_model_len": 99,
    }


def test_health_says_when_the_engine_stopped() -> None:
    engine = ScriptedBackend()

    async def test(client: TestClient) -> tuple[int, int, str]:
        ok = (await client.get("/health")).status
        engine.error = RuntimeError("boom")
        broken = await client.get("/health")
        return ok, broken.status, await broken.text()

    assert client_call(engine, test) == (200, 503, "engine stopped: boom")


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


def emitted(i: int) -> Event:
    return (0, Emitted((i,), None, 1, i))


def token(queue: asyncio.Queue[Event]) -> int:
    return queue.get_nowait()[1].token_ids[0]


def test_one_wake_up_per_batch_of_events() -> None:
    box, loop = Mailbox(), StubLoop()
    box.bind(loop)  # type: ignore[arg-type]
    first: asyncio.Queue[Event] = asyncio.Queue()
    second: asyncio.Queue[Event] = asyncio.Queue()
    box.put(first, emitted(0))
    box.put(second, emitted(1))
    box.put(first, emitted(2))
    assert len(loop.calls) == 1  # three events, one wake-up
    loop.calls[0]()
    assert [token(first), token(first)] == [0, 2]
    assert token(second) == 1 and first.empty()
    box.put(first, emitted(3))  # after a delivery: a new batch, a new wake-up
    assert len(loop.calls) == 2


def test_an_unbound_or_closed_loop_is_not_woken() -> None:
    box = Mailbox()
    queue: asyncio.Queue[Event] = asyncio.Queue()
    box.put(queue, emitted(0))  # not bound yet: kept, nobody woken
    closed = StubLoop(closed=True)
    box.bind(closed)  # type: ignore[arg-type]
    box.put(queue, emitted(1))
    assert closed.calls == [] and queue.empty()


def test_events_from_another_thread_arrive_in_order() -> None:
    async def go() -> list[int]:
        box = Mailbox()
        box.bind(asyncio.get_running_loop())
        queue: asyncio.Queue[Event] = asyncio.Queue()

        def engine_thread() -> None:
            for i in range(200):
                box.put(queue, emitted(i))

        worker = threading.Thread(target=engine_thread)
        worker.start()
        got = [(await asyncio.wait_for(queue.get(), 10))[1].token_ids[0] for _ in range(200)]
        worker.join()
        return got

    assert asyncio.run(go()) == list(range(200))


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([{"role": "user", "content": 5}], "messages.0.content: expected a string, a list of"),
        (
            [{"role": "user", "content": [{"type": "text"}]}],
            "messages.0.content.0: a text part needs a 'text' string",
        ),
        ([{"content": "x"}], "messages.0.role: Field required"),
        ([], "messages: List should have at least 1 item"),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
            "messages.0.content.0: part type 'input_audio' is not supported",
        ),
    ],
)
def test_refused_chat_requests_name_the_message(messages: Any, message: str) -> None:
    engine = ScriptedBackend()
    status, raw = post(engine, "/v1/chat/completions", {"messages": messages})
    error = json.loads(raw)["error"]
    assert status == 400 and error["message"].startswith(message) and error["param"] == "messages"
    assert engine.submitted == []


def test_unknown_fields_are_named_in_a_warning_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = {"prompt": "a", "max_tokens": 1, "colour": "red", "priority_class": 3}
    with caplog.at_level(logging.WARNING, logger="servesim.serve"):
        status, _ = post(ScriptedBackend(), "/v1/completions", body)
    assert status == 200
    (record,) = [r for r in caplog.records if r.name == "servesim.serve"]
    assert "['colour', 'priority_class']" in record.getMessage()


def test_continuous_usage_puts_the_count_so_far_on_every_chunk() -> None:
    body = {
        "prompt": "abc",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    _, raw = post(ScriptedBackend(), "/v1/completions", body)
    data = events(raw)
    assert [d["usage"]["completion_tokens"] for d in data[:-1]] == [1, 2, 3, 3]
    assert {d["usage"]["prompt_tokens"] for d in data[:-1]} == {3}


def test_a_failed_submission_aborts_the_choices_already_submitted() -> None:
    engine = ScriptedBackend(trickle=True)
    real_submit = engine.submit

    def second_fails(*args: Any, **kwargs: Any) -> int:
        if engine.submitted:
            raise RuntimeError("engine full")
        return real_submit(*args, **kwargs)

    engine.submit = second_fails  # type: ignore[method-assign,assignment]
    status, raw = post(engine, "/v1/completions", {"prompt": "a", "max_tokens": 5, "n": 2})
    error = json.loads(raw)["error"]
    assert status == 500 and error["type"] == "InternalServerError"
    assert "engine full" in error["message"] and engine.aborted == [0]


def test_a_stopped_engine_is_a_500_before_and_during_a_request() -> None:
    engine = ScriptedBackend()
    engine.error = RuntimeError("boom")
    status, raw = post(engine, "/v1/completions", {"prompt": "a", "max_tokens": 2})
    error = json.loads(raw)["error"]
    assert status == 500 and error["type"] == "InternalServerError"
    assert error["message"] == "the engine stopped: boom" and engine.submitted == []

    class DiesMidway(ScriptedBackend):
        def submit(self, submission: Submission) -> int:
            self.error = RuntimeError("boom")  # as OnlineEngine's loop: error set, then aborts
            submission.sink(Emitted((), "abort", len(submission.prompt_ids), 0))
            return 0

    status, raw = post(DiesMidway(), "/v1/completions", {"prompt": "a", "max_tokens": 2})
    assert status == 500 and json.loads(raw)["error"]["message"] == "the engine stopped: boom"
    body = {
        "prompt": "a",
        "max_tokens": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, raw = post(DiesMidway(), "/v1/completions", body)
    data = events(raw)
    assert status == 200 and data[-1] == "[DONE]" and len(data) == 3  # no usage after it
    assert data[0]["choices"][0]["finish_reason"] == "abort"
    assert data[1]["error"]["message"] == "the engine stopped: boom"


@pytest.mark.parametrize(("include", "text"), [(False, "ab"), (True, "abcd")])
def test_a_stop_string_is_cut_or_kept_as_asked(include: bool, text: str) -> None:
    engine = ScriptedBackend()  # replies "abcdefgh"
    body = {"prompt": "a", "max_tokens": 8, "stop": "cd", "include_stop_str_in_output": include}
    _, raw = post(engine, "/v1/completions", body)
    (choice,) = json.loads(raw)["choices"]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == (text, "stop", "cd")
    assert engine.aborted == [0]
