"""``servesim serve``'s HTTP routes and its online engine (the tiny model on CPU)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from calibration.reference_engine import EOS_ID, OnlineEngine  # noqa: E402
from sim.openai.server import make_app  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402
from sim.serving.stream import Emitted, Submission  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "validate_tiny_cpu.yaml"


@pytest.fixture(scope="module")
def engine() -> Iterator[OnlineEngine]:
    online = OnlineEngine(load_scenario(SCENARIO), torch.float32, torch.device("cpu"))
    online.start()
    yield online
    online.stop()


def with_client(engine: OnlineEngine, test: Callable[[TestClient], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        async with TestClient(TestServer(make_app(engine, "tiny"))) as client:
            return await test(client)

    return asyncio.run(go())


def events(raw: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded (``[DONE]`` kept as a string)."""
    lines = [line[6:] for line in raw.split("\n\n") if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def post(engine: OnlineEngine, path: str, body: Any) -> tuple[int, str]:
    async def test(client: TestClient) -> tuple[int, str]:
        response = await client.post(path, json=body)
        return response.status, await response.text()

    return with_client(engine, test)


def test_models_health_and_tokenize(engine: OnlineEngine) -> None:
    async def test(client: TestClient) -> tuple[Any, ...]:
        models = await (await client.get("/v1/models")).json()
        health = (await client.get("/health")).status
        prompt = await (await client.post("/tokenize", json={"prompt": "hello"})).json()
        chat = {"messages": [{"role": "user", "content": "ab"}, {"role": "user", "content": "c"}]}
        messages = await (await client.post("/tokenize", json=chat)).json()
        return models, health, prompt, messages

    models, health, prompt, messages = with_client(engine, test)
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["max_model_len"] == 1024
    assert health == 200
    assert prompt["count"] == 5 and len(prompt["tokens"]) == 5  # one token per byte
    assert messages["count"] == 4  # "ab\nc": contents joined by newlines


def test_streamed_completion_has_one_chunk_per_engine_step(engine: OnlineEngine) -> None:
    body = {
        "model": "tiny",
        "prompt": "x" * 40,
        "max_tokens": 7,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    status, raw = post(engine, "/v1/completions", body)
    assert status == 200
    data = events(raw)
    assert data[-1] == "[DONE]"
    usage = data[-2]
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
    }
    chunks = data[:-2]
    assert len(chunks) == 7  # one token per step: a chunk each, some empty (a split character)
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert 0 < len(text) <= 7 and len(text.encode()) >= len(text)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 6 + ["length"]


def test_streamed_chat_starts_with_a_role_chunk(engine: OnlineEngine) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    status, raw = post(engine, "/v1/chat/completions", body)
    data = events(raw)
    assert status == 200 and data[-1] == "[DONE]"
    assert data[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [d["choices"][0]["delta"]["content"] for d in data[1:-1]]
    assert len(contents) == 3  # no usage chunk: not asked for


def test_whole_answers_and_token_id_prompts(engine: OnlineEngine) -> None:
    status, raw = post(engine, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 4})
    answer = json.loads(raw)
    assert status == 200 and len(answer["choices"][0]["text"]) <= 4  # 4 bytes at most
    assert answer["usage"]["prompt_tokens"] == 3 and answer["usage"]["completion_tokens"] == 4
    status, raw = post(engine, "/v1/completions", {"prompt": ["ab"]})  # a batch of one
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 16  # default
    chat = {"messages": [{"role": "user", "content": "hey"}], "max_tokens": 2}
    status, raw = post(engine, "/v1/chat/completions", chat)
    message = json.loads(raw)["choices"][0]["message"]
    assert status == 200 and message["role"] == "assistant" and len(message["content"]) <= 2


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v1/completions", {"prompt": "x" * 1000, "max_tokens": 100}, 400, "context length"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens: Input should"),
        ("/v1/completions", {"max_tokens": 3}, 400, "prompt: Field required"),
        ("/v1/completions", [1, 2], 400, "JSON object"),
        ("/v1/completions", {"prompt": "x", "model": "gpt-9"}, 404, "gpt-9"),
        ("/v1/chat/completions", {"messages": []}, 400, "messages: List should have at least"),
        ("/tokenize", {"prompt": 3}, 400, "prompt: Input should be a valid string"),
    ],
)
def test_bad_requests_get_an_error_object(
    engine: OnlineEngine, path: str, body: Any, status: int, message: str
) -> None:
    got, raw = post(engine, path, body)
    assert got == status
    error = json.loads(raw)["error"]
    assert error["code"] == status and message in error["message"]


def test_a_body_that_is_not_json(engine: OnlineEngine) -> None:
    async def test(client: TestClient) -> tuple[int, Any]:
        response = await client.post("/v1/completions", data=b"{nope")
        return response.status, await response.json()

    status, error = with_client(engine, test)
    assert status == 400 and "not valid JSON" in error["error"]["message"]


def test_concurrent_streams_are_batched_and_all_complete(engine: OnlineEngine) -> None:
    async def one(client: TestClient, n: int) -> list[Any]:
        body = {"prompt": "y" * (10 + n), "max_tokens": n, "stream": True, "ignore_eos": True}
        response = await client.post("/v1/completions", json=body)
        return events(await response.text())

    async def test(client: TestClient) -> list[list[Any]]:
        return await asyncio.gather(*(one(client, n) for n in range(1, 9)))

    for n, data in enumerate(with_client(engine, test), start=1):
        assert len(data) == n + 1 and data[-1] == "[DONE]"  # n chunks, no usage asked
    assert engine.core.kv.num_free_blocks == engine.core.kv.num_blocks  # all freed


def collect(
    engine: OnlineEngine, prompt: list[int], max_tokens: int, ignore_eos: bool
) -> tuple[int, list[Emitted], threading.Event]:
    got: list[Emitted] = []
    done = threading.Event()

    def sink(event: Emitted) -> None:
        got.append(event)
        if event.finish_reason is not None:
            done.set()

    request_id = engine.submit(Submission(prompt, max_tokens, ignore_eos, sink))
    return request_id, got, done


def test_eos_stops_a_request_unless_ignore_eos(
    engine: OnlineEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = engine.executor.run

    def always_eos(plan: Any) -> dict[int, int]:
        sampled = real_run(plan)
        return {rid: EOS_ID for rid in sampled}

    monkeypatch.setattr(engine.executor, "run", always_eos)
    _, stopped, done_stop = collect(engine, [9, 9, 9], 5, ignore_eos=False)
    _, kept, done_kept = collect(engine, [9, 9, 9], 5, ignore_eos=True)
    assert done_stop.wait(30) and done_kept.wait(30)
    assert [e.finish_reason for e in stopped] == ["stop"]
    assert stopped[0].num_generated_tokens == 1 and stopped[0].token_ids == (EOS_ID,)
    assert [e.finish_reason for e in kept] == [None] * 4 + ["length"]
    assert kept[-1].num_generated_tokens == 5


def test_abort_frees_the_request(engine: OnlineEngine) -> None:
    request_id, got, done = collect(engine, [4] * 20, 900, ignore_eos=True)
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.abort(request_id)
    while engine.core.kv.num_free_blocks != engine.core.kv.num_blocks:
        assert time.monotonic() < deadline, "the aborted request kept its blocks"
        time.sleep(0.01)
    assert not done.is_set()  # aborted: the client is gone, no final event
    assert request_id not in engine.executor.slot_of


def test_a_client_that_goes_away_mid_stream_aborts_its_request(engine: OnlineEngine) -> None:
    async def test(client: TestClient) -> None:
        body = {"prompt": "z" * 30, "max_tokens": 900, "stream": True, "ignore_eos": True}
        response = await client.post("/v1/completions", json=body)
        await response.content.readline()  # the first chunk arrived
        response.close()  # hang up

    with_client(engine, test)
    deadline = time.monotonic() + 30
    while engine.core.kv.num_free_blocks != engine.core.kv.num_blocks:
        assert time.monotonic() < deadline, "the abandoned request kept its blocks"
        time.sleep(0.01)


def test_serve_refuses_what_the_engine_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli import main as cli_main

    chat = SCENARIO.parent / "chat.yaml"  # prefix caching on: the reference engine has none
    assert cli_main(["serve", str(chat)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: engine.enable_prefix_caching") and err.count("\n") == 1


def test_serve_on_a_taken_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from sim.cli import main as cli_main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli_main(["serve", str(SCENARIO), "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"servesim: error: --port {port}: cannot listen")
    assert err.count("\n") == 1


def test_a_failing_sink_ends_its_request_not_the_engine(engine: OnlineEngine) -> None:
    def broken(event: Emitted) -> None:
        raise RuntimeError("Event loop is closed")  # as a sink whose server loop is gone

    engine.submit(Submission([7] * 10, 50, True, broken))
    _, got, done = collect(engine, [8] * 10, 3, ignore_eos=True)
    assert done.wait(30)  # the engine kept serving the other request
    assert [e.finish_reason for e in got] == [None, None, "length"]
    deadline = time.monotonic() + 30
    while engine.core.kv.num_free_blocks != engine.core.kv.num_blocks:
        assert time.monotonic() < deadline, "the broken request kept its blocks"
        time.sleep(0.01)
    assert engine.error is None
