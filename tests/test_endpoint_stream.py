"""The live-server client, event by event: what each stream line does to the recorded times.

``stream_request`` is driven here by a stub session (no socket) whose
response yields the given lines, and by a scripted ``perf_counter``: the
client reads the clock once when it sends, once per ``data:`` line (never
for a comment, an ``event:`` line or a blank separator) and once when it
stops, so every time below is traced by hand from the script. As in ``vllm
bench serve``: TTFT is the first chunk *with text* minus the send time, one
ITL sample per later chunk with text, whatever number of tokens it merged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from sim.validation import endpoint
from sim.validation.endpoint import CLOSED, Outcome, request_body, stream_request


def sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n".encode()


def text(value: str, reason: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "text": value, "finish_reason": reason}]})


def delta(value: str | None, reason: str | None = None, **more: Any) -> bytes:
    body: dict[str, Any] = {} if value is None else {"content": value}
    return sse({"choices": [{"index": 0, "delta": body | more, "finish_reason": reason}]})


DONE = b"data: [DONE]\n"


class StubResponse:
    """An HTTP answer: a status, a body for errors, and stream lines for a 200."""

    def __init__(
        self, lines: list[bytes] | None = None, status: int = 200, body: str = "", fail: Any = None
    ) -> None:
        self.status = status
        self._lines = lines or []
        self._body = body
        self._fail = fail  # raised after the lines, as a connection dropping mid-stream

    @property
    def content(self) -> AsyncIterator[bytes]:
        async def lines() -> AsyncIterator[bytes]:
            for line in self._lines:
                yield line
            if self._fail is not None:
                raise self._fail

        return lines()

    async def text(self) -> str:
        return self._body


class _Post:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def __aenter__(self) -> StubResponse:
        if isinstance(self.answer, BaseException):
            raise self.answer
        if self.answer == "hang":
            await asyncio.sleep(3600)
        assert isinstance(self.answer, StubResponse)
        return self.answer

    async def __aexit__(self, *exc: object) -> None:
        return None


class StubSession:
    """``session.post`` answers with the next of ``answers`` (a response, an error, "hang")."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    def post(self, url: str, json: dict[str, Any]) -> _Post:
        self.bodies.append(json)
        return _Post(self.answers.pop(0))


def refused() -> aiohttp.ClientConnectorError:
    key = SimpleNamespace(host="h", port=1, ssl=True, is_ssl=False)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connection refused"))  # type: ignore[arg-type]


def clock(monkeypatch: pytest.MonkeyPatch, values: list[float]) -> list[int]:
    """``perf_counter`` returns ``values`` in order (then the last); returns the read count."""
    it: Iterator[float] = iter(values)
    last = [values[-1]]
    reads = [0]

    def perf_counter() -> float:
        reads[0] += 1
        last[0] = next(it, last[0])
        return last[0]

    monkeypatch.setattr(endpoint, "time", SimpleNamespace(perf_counter=perf_counter))
    return reads


def run(
    session: StubSession,
    api: endpoint.Api = "completions",
    timeout_s: float = 30.0,
    retries: int = 0,
    out: Outcome | None = None,
) -> Outcome:
    body = request_body(api, "m", "prompt", 4, {})
    return asyncio.run(
        stream_request(session, "http://h/v1", api, body, timeout_s, out, retries)  # type: ignore[arg-type]
    )


# --- times --------------------------------------------------------------------------------


def test_only_data_lines_read_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        b": ping\n",  # a comment: not read
        b"event: message\n",  # an event name: not read
        b"\n",  # a separator: not read
        text("a"),  # 1.25: TTFT 0.25
        b"\r\n",
        text("b"),  # 1.5
        DONE,  # 1.75
    ]
    reads = clock(monkeypatch, [1.0, 1.25, 1.5, 1.75, 2.0])
    out = run(StubSession(StubResponse(lines)))
    assert out.ok and out.chunk_s == [1.25, 1.5] and out.sent_s == 1.0
    assert out.ended_s == 2.0
    assert reads[0] == 5  # send, three data lines, the end


def test_data_without_a_space_and_crlf_lines_are_events(monkeypatch: pytest.MonkeyPatch) -> None:
    one = b'data:{"choices": [{"text": "x"}]}\r\n'
    clock(monkeypatch, [0.0, 0.5, 0.75, 1.0])
    out = run(StubSession(StubResponse([one, b"data:[DONE]\r\n"])))
    assert out.ok and out.chunk_s == [0.5] and out.text == "x"


def test_a_chunk_without_text_is_no_token_but_may_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [text("a"), text("b"), text("", "stop"), DONE]
    clock(monkeypatch, [0.0, 0.1, 0.3, 0.6, 0.7, 0.8])
    out = run(StubSession(StubResponse(lines)))
    # Tokens at 0.1 and 0.3; the empty final chunk (0.6) only says why it ended.
    assert out.chunk_s == [0.1, 0.3] and out.finish_reason == "stop"
    itl = [b - a for a, b in zip(out.chunk_s, out.chunk_s[1:], strict=False)]
    assert itl == pytest.approx([0.2])


def test_usage_inside_the_last_content_chunk_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    last = {
        "choices": [{"index": 0, "text": "cd", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    }
    clock(monkeypatch, [0.0, 0.2, 0.4, 0.5, 0.6])
    out = run(StubSession(StubResponse([text("ab"), sse(last), DONE])))
    assert out.chunk_s == [0.2, 0.4] and out.text == "abcd"
    assert (out.num_prompt_tokens, out.num_generated_tokens) == (9, 4)


def test_null_usage_fields_are_not_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    usage = sse({"choices": [], "usage": {"prompt_tokens": None, "completion_tokens": None}})
    clock(monkeypatch, [0.0, 0.1, 0.2, 0.3, 0.4])
    out = run(StubSession(StubResponse([text("a"), usage, DONE])))
    assert out.ok and out.num_prompt_tokens is None and out.num_generated_tokens is None


def test_a_chat_stream_times_content_not_the_role(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        delta("", role="assistant"),  # 0.25: role only, no token
        delta(None),  # 0.5: an empty delta
        delta("Hel"),  # 1.0: first token: TTFT 1.0
        delta("lo", "stop"),  # 1.5
        sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),  # 1.75
        DONE,  # 2.0
    ]
    clock(monkeypatch, [0.0, 0.25, 0.5, 1.0, 1.5, 1.75, 2.0, 2.5])
    out = run(StubSession(StubResponse(lines)), api="chat")
    assert out.ok and out.chunk_s == [1.0, 1.5] and out.text == "Hello"
    assert out.finish_reason == "stop" and out.num_generated_tokens == 2


def test_a_completions_client_reads_no_chat_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    # A chat-shaped stream read as completions has no text: no token, so no success.
    clock(monkeypatch, [0.0, 0.1, 0.2, 0.3])
    out = run(StubSession(StubResponse([delta("x"), DONE])), api="completions")
    assert out.chunk_s == [] and out.error == "no chunk with generated text"


def test_events_that_are_not_objects_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    clock(monkeypatch, [0.0, 0.1, 0.2, 0.3, 0.4])
    out = run(StubSession(StubResponse([b"data: [1, 2]\n", text("a"), DONE])))
    assert out.ok and out.chunk_s == [0.2]


# --- failures, kept with what arrived ---------------------------------------------------


def test_a_stream_that_ends_without_done_keeps_its_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    clock(monkeypatch, [0.0, 0.1, 0.2, 0.3])
    out = run(StubSession(StubResponse([text("a"), text("b")])))
    assert out.error == CLOSED and out.chunk_s == [0.1, 0.2] and not out.ok
    assert out.status == 200 and out.ended_s == 0.3


@pytest.mark.parametrize(
    "error",
    [aiohttp.ClientPayloadError("cut"), aiohttp.ServerDisconnectedError()],
)
def test_a_connection_dropped_mid_stream_is_closed(error: Exception) -> None:
    out = run(StubSession(StubResponse([text("a")], fail=error)))
    assert out.error == CLOSED and len(out.chunk_s) == 1 and not out.done


def test_another_client_error_names_its_type() -> None:
    error = aiohttp.ClientOSError(104, "Connection reset by peer")
    out = run(StubSession(StubResponse([text("a")], fail=error)))
    assert out.error == "ClientOSError: [Errno 104] Connection reset by peer"
    assert len(out.chunk_s) == 1


def test_a_bad_event_is_cut_to_80_bytes() -> None:
    junk = b"data: {" + b"x" * 200 + b"\n"
    out = run(StubSession(StubResponse([text("a"), junk, DONE])))
    assert out.error is not None and out.error.startswith("bad event: b'{xxx")
    assert len(out.error) == len("bad event: ") + len(repr(b"{" + b"x" * 79))
    assert not out.done and len(out.chunk_s) == 1  # reading stopped at the bad event


def test_an_error_event_with_choices_is_an_ordinary_chunk() -> None:
    mixed = sse({"error": None, "choices": [{"index": 0, "text": "a"}]})
    out = run(StubSession(StubResponse([mixed, DONE])))
    assert out.ok and out.text == "a"


def test_an_http_error_keeps_status_and_a_one_line_body() -> None:
    out = run(StubSession(StubResponse(status=429, body="slow down\nplease" + "!" * 300)))
    assert out.status == 429 and out.error is not None
    assert out.error.startswith("HTTP 429: slow down please")
    assert "\n" not in out.error and len(out.error) == len("HTTP 429: ") + 200
    assert out.chunk_s == [] and not out.done


# --- retries and timeouts -----------------------------------------------------------------


def test_connection_failures_are_retried_and_each_try_resets_the_send_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = StubSession(refused(), refused(), StubResponse([text("a"), DONE]))
    # Sends at 1, 2 and 3 (the first two refused); the chunk at 3.5, [DONE] at 3.75.
    clock(monkeypatch, [1.0, 2.0, 3.0, 3.5, 3.75, 4.0])
    out = run(session, retries=2)
    assert out.ok and out.sent_s == 3.0 and out.chunk_s == [3.5] and out.error is None
    assert len(session.bodies) == 3 and session.bodies[0] == session.bodies[2]


def test_retries_run_out() -> None:
    session = StubSession(refused(), refused(), StubResponse([text("a"), DONE]))
    out = run(session, retries=1)
    assert out.error == "cannot connect: [Errno 111] Connection refused"
    assert out.status is None and len(session.bodies) == 2


def test_an_answer_is_never_retried() -> None:
    session = StubSession(StubResponse(status=500, body="x"), StubResponse([text("a"), DONE]))
    out = run(session, retries=3)
    assert out.error == "HTTP 500: x" and len(session.bodies) == 1
    dropped = StubSession(StubResponse([text("a")]), StubResponse([text("a"), DONE]))
    assert run(dropped, retries=3).error == CLOSED and len(dropped.bodies) == 1


def test_a_server_that_never_answers_times_out_with_no_status() -> None:
    out = run(StubSession("hang"), timeout_s=0.05)
    assert out.error == "timed out after 0.05 s" and out.status is None
    assert out.sent_s is not None and out.ended_s is not None and out.ended_s >= out.sent_s


def test_the_outcome_passed_in_is_filled_in_place() -> None:
    mine = Outcome()
    got = run(StubSession(StubResponse([text("a"), DONE])), out=mine)
    assert got is mine and mine.ok and mine.text == "a"


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ({"done": True, "chunk_s": [1.0]}, True),
        ({"done": False, "chunk_s": [1.0]}, False),  # no [DONE]
        ({"done": True, "chunk_s": []}, False),  # no token
        ({"done": True, "chunk_s": [1.0], "error": "x"}, False),
    ],
)
def test_ok_means_done_with_a_token_and_no_error(fields: dict[str, Any], ok: bool) -> None:
    assert Outcome(**fields).ok is ok


def test_a_server_that_hangs_up_before_answering_is_a_closed_stream() -> None:
    out = run(StubSession(aiohttp.ServerDisconnectedError()), retries=2)
    assert out.error == CLOSED and out.status is None and out.chunk_s == []


def test_a_cancelled_request_keeps_its_chunks_and_end_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The duration limit cancels requests in flight: what arrived stays, ended_s is set
    # (the time series counts the request running until then), the cancel goes on up.
    clock(monkeypatch, [5.0, 5.5, 6.0])
    out = Outcome()

    class Stalls(StubResponse):
        @property
        def content(self) -> AsyncIterator[bytes]:
            async def lines() -> AsyncIterator[bytes]:
                yield text("a")
                await asyncio.sleep(3600)
                yield DONE

            return lines()

    async def go() -> None:
        body = request_body("completions", "m", "p", 4, {})
        session = StubSession(Stalls())
        task = asyncio.create_task(
            stream_request(session, "http://h", "completions", body, 30.0, out)  # type: ignore[arg-type]
        )
        while not out.chunk_s:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert out.sent_s == 5.0 and out.chunk_s == [5.5] and out.ended_s == 6.0
    assert out.error is None and not out.ok  # neither failed nor completed: stopped
