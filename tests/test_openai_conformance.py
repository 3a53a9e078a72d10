"""``servesim serve`` as the ``openai`` package sees it: a drop-in for vLLM's server.

The server runs on a real localhost port (in a thread) over ``ScriptedBackend``
(``tests/scripted_backend.py``: request ``i`` gets ``max_tokens`` one-byte
tokens of a known UTF-8 reply), and ``openai.OpenAI`` / ``openai.AsyncOpenAI``
call it: completions and chat, whole and streamed, ``n``, stop strings,
content parts, usage, the errors the package raises, and the routes around
them (``/metrics``, ``/version``, ``/ping``, ``/detokenize``). The texts are
checked against the reply's bytes decoded at once, so a streamed text that
split a character (U+FFFD) or dropped a byte cannot pass. The last test puts
the reference engine (torch) behind the same server.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("aiohttp")
prometheus_parser = pytest.importorskip("prometheus_client.parser")

from aiohttp import web  # noqa: E402
from endpoint_fakes import ThreadedApp  # noqa: E402
from scripted_backend import ScriptedBackend  # noqa: E402

import sim  # noqa: E402
from sim.openai.server import make_app  # noqa: E402
from sim.openai.tokenizer import ByteTokenizer  # noqa: E402

MODEL = "org/tiny"
# Two- and three-byte characters, so that tokens split them.
REPLY = "héllo wörld — ünïcode ✓ ".encode()


class Served(ThreadedApp):
    def __init__(self, backend: Any) -> None:
        super().__init__()
        self.backend = backend

    def make_app(self) -> web.Application:
        return make_app(self.backend, MODEL)


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend(max_model_len_tokens=256, reply=REPLY)


@pytest.fixture
def served(backend: ScriptedBackend) -> Iterator[Served]:
    with Served(backend) as server:
        yield server


@pytest.fixture
def client(served: Served) -> Iterator[Any]:
    with openai.OpenAI(base_url=served.base_url + "/v1", api_key="x", max_retries=0) as c:
        yield c


def http(url: str, body: Any = None, method: str | None = None) -> tuple[int, str, str]:
    """Status, content type and text of one plain HTTP call (the routes the package lacks)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"] or "", answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"] or "", error.read().decode()


def expected(backend: ScriptedBackend, num_tokens: int) -> str:
    """The reply's first ``num_tokens`` bytes decoded at once (a cut character: U+FFFD)."""
    return backend.expected_text(num_tokens).decode("utf-8", errors="replace")


def chat(text: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# --- whole answers -----------------------------------------------------------------------------


def test_a_completion(client: Any, backend: ScriptedBackend) -> None:
    answer = client.completions.create(model=MODEL, prompt="abcd", max_tokens=9)
    assert answer.object == "text_completion" and answer.id.startswith("cmpl-")
    assert answer.model == MODEL and isinstance(answer.created, int) and answer.created > 0
    (choice,) = answer.choices
    assert choice.text == expected(backend, 9) and choice.finish_reason == "length"
    usage = answer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4, 9, 13)


def test_a_chat_answer_from_content_parts(client: Any, backend: ScriptedBackend) -> None:
    # GuideLLM's default: content as a list of text parts, tokenized as their text.
    parts = [{"type": "text", "text": "Hello"}]
    answer = client.chat.completions.create(model=MODEL, messages=chat(parts), max_tokens=6)
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    assert answer.usage.prompt_tokens == 5  # "Hello", not the Python text of the list
    message = answer.choices[0].message
    assert message.role == "assistant" and message.content == expected(backend, 6)
    two = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    answer = client.chat.completions.create(model=MODEL, messages=chat(two), max_tokens=1)
    assert answer.usage.prompt_tokens == len("Hello\nworld")
    assert backend.submitted[-1][0] == ByteTokenizer().encode("Hello\nworld")


def test_n_choices_are_independent_generations(client: Any, backend: ScriptedBackend) -> None:
    answer = client.completions.create(model=MODEL, prompt="ab", max_tokens=5, n=3)
    assert [c.index for c in answer.choices] == [0, 1, 2]
    assert {c.text for c in answer.choices} == {expected(backend, 5)}
    assert answer.usage.prompt_tokens == 2 and answer.usage.completion_tokens == 15
    assert [s[1] for s in backend.submitted] == [5, 5, 5]  # three engine requests
    # One HTTP request: its three engine requests share the receipt time, its arrival.
    received = backend.received_s[-3:]
    assert received[0] is not None and len(set(received)) == 1


def test_a_batch_of_prompts_gets_choices_in_vllms_order(client: Any, backend: Any) -> None:
    answer = client.completions.create(model=MODEL, prompt=["a", "bcd"], max_tokens=2, n=2)
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    # Choice i * n + k is prompt i's k-th generation.
    assert [len(s[0]) for s in backend.submitted] == [1, 1, 3, 3]
    assert answer.usage.prompt_tokens == 4 and answer.usage.completion_tokens == 8


@pytest.mark.parametrize("stop", ["wö", ["zzz", "wö"], ["ö", "wö"]])
def test_a_stop_string_cuts_the_text_and_aborts_the_request(
    client: Any, backend: ScriptedBackend, stop: Any
) -> None:
    answer = client.completions.create(model=MODEL, prompt="a", max_tokens=40, stop=stop)
    (choice,) = answer.choices
    text = expected(backend, 40)
    first = min(i for s in ([stop] if isinstance(stop, str) else stop) if (i := text.find(s)) >= 0)
    assert choice.text == text[:first] and choice.finish_reason == "stop"
    assert choice.model_extra["stop_reason"] in (stop if isinstance(stop, list) else [stop])
    assert backend.aborted == [0]  # the engine stops generating for it
    # The tokens generated up to the stop string, as vLLM counts them.
    assert answer.usage.completion_tokens == len(text[: first + 2].encode())


# --- streams -----------------------------------------------------------------------------------


def test_a_streamed_completion_with_usage(client: Any, backend: ScriptedBackend) -> None:
    n = len(REPLY)  # the whole reply: its last character ends with the last token
    stream = client.completions.create(
        model=MODEL,
        prompt="abc",
        max_tokens=n,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    *texts, usage = chunks
    assert "".join(c.choices[0].text for c in texts) == expected(backend, n)
    assert all("\ufffd" not in c.choices[0].text for c in texts)  # no character split
    assert len(texts) == n  # one chunk per engine event, as vLLM streams
    assert [c.choices[0].finish_reason for c in texts] == [None] * (n - 1) + ["length"]
    assert usage.choices == [] and usage.usage.completion_tokens == n
    assert usage.usage.prompt_tokens == 3 and usage.usage.total_tokens == 3 + n
    assert all(isinstance(c.created, int) and c.created > 0 for c in chunks)
    assert len({c.id for c in chunks}) == 1


def test_a_streamed_chat_with_n_and_a_stop_string(client: Any, backend: ScriptedBackend) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=chat("hi"),
        max_tokens=30,
        n=2,
        stop=["ün"],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    roles = [c for c in chunks[:2]]
    assert [(r.choices[0].index, r.choices[0].delta.role) for r in roles] == [
        (0, "assistant"),
        (1, "assistant"),
    ]
    text = expected(backend, 30)
    cut = text[: text.find("ün")]
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks[2:] if c.choices and c.choices[0].index == index]
        assert "".join(ch.delta.content or "" for ch in mine) == cut
        assert [ch.finish_reason for ch in mine][-1] == "stop"
        # Held back while it could be the start of the stop string: never sent, never taken back.
        assert all("ü" not in (ch.delta.content or "") for ch in mine)
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 2
    assert sorted(backend.aborted) == [0, 1]


def test_async_clients_stream_concurrently(served: Served, backend: ScriptedBackend) -> None:
    async def one(client: Any, n: int) -> str:
        stream = await client.chat.completions.create(
            model=MODEL, messages=chat("x" * n), max_tokens=n, stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream])

    async def go() -> list[str]:
        url = served.base_url + "/v1"
        async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
            return await asyncio.gather(*(one(client, n) for n in range(1, 9)))

    assert asyncio.run(go()) == [expected(backend, n) for n in range(1, 9)]


# --- errors ------------------------------------------------------------------------------------


def test_an_unknown_model_is_not_found(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="gpt-9", prompt="a", max_tokens=1)
    assert caught.value.status_code == 404
    assert caught.value.body == {
        "message": "The model `gpt-9` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


@pytest.mark.parametrize(
    ("kwargs", "param", "message"),
    [
        ({"max_tokens": 1000}, "max_tokens", "'max_tokens' is too large: 1000."),
        ({"extra_body": {"max_tokens": "abc"}}, "max_tokens", "max_tokens: Input should be"),
        ({"max_tokens": 1, "n": 0}, "n", "n: Input should be greater than or equal to 1"),
        ({"max_tokens": 1, "logprobs": True}, "logprobs", "logprobs: not supported"),
        (
            {"max_tokens": 1, "tools": [{"type": "function", "function": {"name": "f"}}]},
            "tools",
            "",
        ),
    ],
)
def test_bad_chat_requests_are_bad_requests(
    client: Any, backend: ScriptedBackend, kwargs: dict[str, Any], param: str, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=chat("hi"), **kwargs)
    body = caught.value.body
    assert body["type"] == "BadRequestError" and body["code"] == 400
    assert body["param"] == param and body["message"].startswith(message)
    assert "invalid literal" not in body["message"] and "\n" not in body["message"]
    assert backend.submitted == []


def test_an_image_part_is_refused(client: Any) -> None:
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]
    with pytest.raises(openai.BadRequestError, match="part type 'image_url' is not supported"):
        client.chat.completions.create(model=MODEL, messages=chat(image), max_tokens=1)


def test_a_crashed_engine_is_an_internal_server_error(
    client: Any, backend: ScriptedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("the engine is gone")

    monkeypatch.setattr(backend, "submit", broken)
    with pytest.raises(openai.InternalServerError) as caught:
        client.completions.create(model=MODEL, prompt="a", max_tokens=1)
    assert caught.value.body["type"] == "InternalServerError"
    assert "the engine is gone" in caught.value.body["message"]


# --- the routes around ------------------------------------------------------------------------


def test_models_version_ping_and_detokenize(served: Served, client: Any) -> None:
    (card,) = client.models.list().data
    assert card.id == MODEL and card.object == "model" and card.created > 0
    assert card.model_extra["max_model_len"] == 256
    url = served.base_url
    status, _, text = http(url + "/version")
    assert status == 200 and json.loads(text) == {"version": sim.__version__}
    assert http(url + "/ping")[0] == http(url + "/ping", method="POST")[0] == 200
    ids = json.loads(http(url + "/tokenize", {"prompt": "héllo ✓"})[2])["tokens"]
    assert json.loads(http(url + "/detokenize", {"tokens": ids})[2]) == {"prompt": "héllo ✓"}
    status, _, text = http(url + "/v2/nothing")
    assert status == 404 and json.loads(text)["error"]["type"] == "NotFoundError"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in prometheus_parser.text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_what_was_served(
    served: Served, client: Any, backend: ScriptedBackend
) -> None:
    from sim.serving.stream import EngineLoad

    client.completions.create(model=MODEL, prompt="abcd", max_tokens=7, n=2)
    client.completions.create(model=MODEL, prompt="ab", max_tokens=20, stop="wö")
    backend.engine_load = EngineLoad(num_running=3, num_waiting=5, kv_cache_usage=0.25)
    status, content_type, page = http(served.base_url + "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    got = samples(page)
    assert not [name for name, _ in got if name.endswith("_created")]  # as vLLM's page
    labels = (("engine", "0"), ("model_name", MODEL))

    def value(name: str, *extra: tuple[str, str]) -> float:
        return got[(name, tuple(sorted(labels + extra)))]

    assert value("vllm:num_requests_running") == 3 and value("vllm:num_requests_waiting") == 5
    assert value("vllm:kv_cache_usage_perc") == 0.25
    assert value("vllm:request_success_total", ("finished_reason", "length")) == 2
    assert value("vllm:request_success_total", ("finished_reason", "stop")) == 1
    stopped_tokens = len(expected(backend, 20)[: expected(backend, 20).find("wö") + 2].encode())
    assert value("vllm:generation_tokens_total") == 2 * 7 + stopped_tokens
    assert value("vllm:prompt_tokens_total") == 2 * 4 + 2
    assert value("vllm:time_to_first_token_seconds_count") == 3  # one per choice
    assert value("vllm:e2e_request_latency_seconds_count") == 3
    # One gap per later token event: 6 + 6 for the pair, then the stopped one's.
    assert value("vllm:inter_token_latency_seconds_count") == 12 + stopped_tokens - 1
    # The engine's phases, one observation per choice as of its last token (the
    # stopped one's: the token that completed the stop string; scripted_timing).
    decode_s = 2 * 0.125 * 6 + 0.125 * (stopped_tokens - 1)
    for phase, total_s in (
        ("queue", 3 * 0.5),
        ("prefill", 3 * 0.25),
        ("decode", decode_s),
        ("inference", 3 * 0.25 + decode_s),
    ):
        assert value(f"vllm:request_{phase}_time_seconds_count") == 3
        assert value(f"vllm:request_{phase}_time_seconds_sum") == pytest.approx(total_s)
    assert value("vllm:num_preemptions_total") == 3
    assert value("vllm:prefix_cache_queries_total") == 4 + 4 + 2
    assert value("vllm:prefix_cache_hits_total") == 2 + 2 + 1


# --- the reference engine behind the same server -----------------------------------------------


def test_the_reference_engine_through_the_openai_client() -> None:
    torch = pytest.importorskip("torch")
    from pathlib import Path

    from calibration.reference_engine import OnlineEngine
    from sim.scenario import load_scenario

    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "validate_tiny_cpu.yaml"
    engine = OnlineEngine(load_scenario(scenario), torch.float32, torch.device("cpu"))
    engine.start()
    try:
        with (
            Served(engine) as server,
            openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0) as c,
        ):
            stream = c.completions.create(
                model=MODEL,
                prompt="x" * 20,
                max_tokens=12,
                n=2,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            chunks = list(stream)
            answer = c.chat.completions.create(
                model=MODEL, messages=chat([{"type": "text", "text": "hey"}]), max_tokens=4
            )
            got = samples(http(server.base_url + "/metrics")[2])
    finally:
        engine.stop()
    # The engine's phases of the three choices, from its own clock.
    labels = tuple(sorted((("engine", "0"), ("model_name", MODEL))))
    for phase in ("queue", "prefill", "decode", "inference"):
        assert got[(f"vllm:request_{phase}_time_seconds_count", labels)] == 3
    assert got[("vllm:request_decode_time_seconds_sum", labels)] > 0
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (20, 24)
    for index in (0, 1):
        mine = [ch.choices[0] for ch in chunks[:-1] if ch.choices[0].index == index]
        assert len(mine) == 12 and mine[-1].finish_reason == "length"  # a chunk per step
    assert answer.usage.prompt_tokens == 3 and answer.choices[0].message.role == "assistant"
    assert engine.error is None
