"""The live-server client: one streamed request, timed per chunk as vllm bench serve does.

Times are hand-checked with a scripted clock: ``sim.validation.endpoint`` reads
``time.perf_counter`` once when it sends and once per ``data:`` line (and
once when it stops reading), so a list of clock values fixes every
recorded time whatever the real timing was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from types import SimpleNamespace

import aiohttp
import pytest
from endpoint_fakes import FakeServer, sse, text_chunk

from sim.errors import ConfigError
from sim.validation import endpoint
from sim.validation.endpoint import (
    Outcome,
    chunk_text,
    parse_endpoint,
    request_body,
    stream_request,
)


def scripted_clock(monkeypatch: pytest.MonkeyPatch, values: list[float]) -> list[float]:
    """``sim.validation.endpoint``'s perf_counter returns ``values`` in order (then the last)."""
    it: Iterator[float] = iter(values)
    last = [values[-1]]

    def perf_counter() -> float:
        last[0] = next(it, last[0])
        return last[0]

    monkeypatch.setattr(endpoint, "time", SimpleNamespace(perf_counter=perf_counter))
    return values


def fetch(url: str, api: endpoint.Api = "completions", **kw: object) -> Outcome:
    body = request_body(api, "m", "p", 4, {})

    async def go() -> Outcome:
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, url, api, body, **kw)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_lagging_merging_completions_stream_is_timed_per_content_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [
        b": keep-alive comment\n\n",
        text_chunk("a"),  # t=10.5: first token, TTFT 0.5
        text_chunk(""),  # t=10.6: no content: neither a token nor an ITL sample
        text_chunk("bcd"),  # t=10.9: three tokens merged into one chunk: one ITL sample
        text_chunk("e", "length"),  # t=12.0: a lagging chunk
        sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}),  # t=12.1
        b"data: [DONE]\n\n",  # t=12.2
    ]
    scripted_clock(monkeypatch, [10.0, 10.5, 10.6, 10.9, 12.0, 12.1, 12.2, 13.0])
    with FakeServer(script=script) as server:
        out = fetch(server.url + "/v1/completions", timeout_s=30)
    assert out.ok and out.done and out.error is None and out.status == 200
    assert out.sent_s == 10.0
    assert out.chunk_s == [10.5, 10.9, 12.0]
    ttft = out.chunk_s[0] - out.sent_s
    itl = [b - a for a, b in zip(out.chunk_s, out.chunk_s[1:], strict=False)]
    assert ttft == pytest.approx(0.5)
    assert itl == pytest.approx([0.4, 1.1])  # one sample per chunk, merged or not
    assert out.text == "abcde"
    assert (out.num_prompt_tokens, out.num_generated_tokens) == (7, 5)  # from usage
    assert out.finish_reason == "length"
    assert out.ended_s == 13.0


def test_chat_stream_role_chunk_is_not_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    token = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    script = [sse(role), sse(token), sse(token), b"data: [DONE]\n\n"]
    scripted_clock(monkeypatch, [1.0, 1.2, 1.7, 1.8, 1.9, 2.0])
    with FakeServer(script=script) as server:
        out = fetch(server.url + "/v1/completions", api="chat", timeout_s=30)
    assert out.ok
    assert out.chunk_s == [1.7, 1.8]  # TTFT 0.7, not 0.2 at the role chunk
    assert out.num_generated_tokens is None  # no usage chunk: the table counts chunks


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ([text_chunk("a")], "stream closed before [DONE]"),
        ([b"data: [DONE]\n\n"], "no chunk with generated text"),
        ([b"data: {not json\n\n"], "bad event"),
        ([sse({"error": {"message": "boom"}})], "server error in stream"),
    ],
)
def test_broken_streams_are_failures_with_a_reason(script: list[bytes], error: str) -> None:
    with FakeServer(script=script) as server:
        out = fetch(server.url + "/v1/completions", timeout_s=30)
    assert not out.ok
    assert out.error is not None and out.error.startswith(error)


def test_http_500_closed_stream_and_refused_connection() -> None:
    with FakeServer(behaviours=("500", "close")) as server:
        url = server.url + "/v1/completions"
        first = fetch(url, timeout_s=30)
        second = fetch(url, timeout_s=30)
    assert first.status == 500 and first.error == "HTTP 500: internal error second line"
    assert second.status == 200 and second.error == endpoint.CLOSED
    assert len(second.chunk_s) == 2
    refused = fetch(url, timeout_s=30, retries=2)  # the server is gone now
    assert refused.error is not None and refused.error.startswith("cannot connect")
    assert refused.status is None and not refused.ok


def test_a_hanging_stream_times_out_and_keeps_its_first_chunk() -> None:
    with FakeServer(behaviours=("hang",)) as server:
        out = fetch(server.url + "/v1/completions", timeout_s=0.3)
    assert out.error == "timed out after 0.3 s"
    assert len(out.chunk_s) == 1 and not out.ok


def test_request_body_per_api() -> None:
    completions = request_body("completions", "m", "text", 9, {"ignore_eos": True})
    assert completions["prompt"] == "text" and "messages" not in completions
    assert completions["max_tokens"] == 9 and completions["ignore_eos"] is True
    assert completions["stream"] is True and completions["stream_options"]["include_usage"]
    chat = request_body("chat", "m", "text", 9, {})
    assert chat["messages"] == [{"role": "user", "content": "text"}] and "prompt" not in chat
    assert "ignore_eos" not in chat
    json.dumps(chat)  # serialisable as sent


def test_chunk_text() -> None:
    assert chunk_text("completions", {"choices": [{"text": "a"}]}) == "a"
    assert chunk_text("completions", {"choices": [{"text": None}]}) == ""
    assert chunk_text("chat", {"choices": [{"delta": {"content": "b"}}]}) == "b"
    assert chunk_text("chat", {"choices": [{"delta": {}}]}) == ""
    assert chunk_text("chat", {"choices": []}) is None
    assert chunk_text("completions", {"usage": {}}) is None


@pytest.mark.parametrize(
    ("url", "api", "base", "expected_api"),
    [
        ("http://h:8000", None, "http://h:8000", "completions"),
        ("http://h:8000/", "chat", "http://h:8000", "chat"),
        ("http://h:8000/v1", None, "http://h:8000", "completions"),
        ("https://h/x/v1/chat/completions", None, "https://h/x", "chat"),
        ("http://h:1/v1/completions/", "completions", "http://h:1", "completions"),
    ],
)
def test_parse_endpoint(url: str, api: endpoint.Api | None, base: str, expected_api: str) -> None:
    target = parse_endpoint(url, api)
    assert (target.base, target.api) == (base, expected_api)
    assert target.url == base + endpoint.PATHS[target.api]


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://h/v1", "http://", "h"])
def test_parse_endpoint_refuses_malformed_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="--endpoint"):
        parse_endpoint(url)


def test_parse_endpoint_refuses_a_conflicting_api() -> None:
    with pytest.raises(ConfigError, match="chat API but --api says completions"):
        parse_endpoint("http://h/v1/chat/completions", "completions")
