"""One streamed request to an OpenAI-compatible server, timed as ``vllm bench serve`` does.

``stream_request`` POSTs a ``/v1/completions`` or ``/v1/chat/completions``
body with ``"stream": true`` and reads the server-sent events (``data: {...}``
lines, ended by ``data: [DONE]``). Times are ``time.perf_counter()`` seconds:

- ``sent_s``: just before the request is written (vllm's ``st``);
- ``chunk_s``: the arrival of every chunk that carries generated text
  (``choices[0].text``, or ``choices[0].delta.content`` for chat). A chat
  stream's first chunk carries only ``role`` and no text: it is not a token,
  so TTFT is the first chunk *with content* (vllm bench's chat client counts
  that role chunk; its completions client does not see one);
- TTFT = ``chunk_s[0] - sent_s``; one ITL sample per later chunk (the gap to
  the previous one), whatever number of tokens the chunk merged; E2E = the
  last content chunk - ``sent_s``.

Token counts come from the ``usage`` chunk when the server sends one
(``stream_options.include_usage``); otherwise the generated count is the
number of content chunks (a lower bound when a server merges tokens).

Failures are kept, never raised: an HTTP status other than 200, a stream
that closes before ``[DONE]``, a timeout or a refused connection give an
``Outcome`` with ``error`` set (and whatever chunks had arrived).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

Api = Literal["completions", "chat"]
CLOSED = "stream closed before [DONE]"
PATHS: dict[Api, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass
class Outcome:
    """What one request did: times (perf_counter seconds), counts and the error, if any."""

    sent_s: float | None = None
    chunk_s: list[float] = field(default_factory=list)
    text: str = ""
    num_prompt_tokens: int | None = None  # from the server's usage chunk
    num_generated_tokens: int | None = None  # idem
    finish_reason: str | None = None
    done: bool = False  # the stream ended with [DONE]
    error: str | None = None
    status: int | None = None  # HTTP status
    ended_s: float | None = None  # when the client stopped reading (any outcome)

    @property
    def ok(self) -> bool:
        """Completed: the stream ended properly and produced at least one token."""
        return self.error is None and self.done and bool(self.chunk_s)


def request_body(
    api: Api, model: str, prompt: str, max_tokens: int, extra: dict[str, Any]
) -> dict[str, Any]:
    """The JSON body for ``api``: streaming, usage requested, ``extra`` merged in."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body | extra


def chunk_text(api: Api, data: dict[str, Any]) -> str | None:
    """Generated text in one event's ``choices[0]``; None when the event has no choices."""
    choices = data.get("choices")
    if not choices:
        return None
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") if api == "chat" else choice.get("text")
    return str(text) if text else ""


def _apply(api: Api, data: dict[str, Any], out: Outcome, now_s: float) -> None:
    """Record one decoded event."""
    usage = data.get("usage")
    if isinstance(usage, dict):
        if usage.get("prompt_tokens") is not None:
            out.num_prompt_tokens = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            out.num_generated_tokens = int(usage["completion_tokens"])
    text = chunk_text(api, data)
    if text is None:
        return
    reason = data["choices"][0].get("finish_reason")
    if reason:
        out.finish_reason = str(reason)
    if text:  # a chunk with content: one token time (TTFT or one ITL sample)
        out.chunk_s.append(now_s)
        out.text += text


async def _read_events(response: aiohttp.ClientResponse, api: Api, out: Outcome) -> None:
    """Read SSE lines until ``[DONE]`` or the end of the body."""
    async for raw in response.content:
        line = raw.strip()
        if not line or not line.startswith(b"data:"):
            continue  # blank separators, comments (": ping"), event names
        payload = line[5:].strip()
        now_s = time.perf_counter()
        if payload == b"[DONE]":
            out.done = True
            return
        try:
            data = json.loads(payload)
        except ValueError:
            out.error = f"bad event: {payload[:80]!r}"
            return
        if isinstance(data, dict) and "error" in data and not data.get("choices"):
            out.error = f"server error in stream: {str(data['error'])[:200]}"
            return
        if isinstance(data, dict):
            _apply(api, data, out, now_s)


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    api: Api,
    body: dict[str, Any],
    timeout_s: float,
    out: Outcome | None = None,
    retries: int = 0,
) -> Outcome:
    """POST ``body`` to ``url`` and read its stream into ``out`` (created if None).

    ``retries``: attempts after a failure to connect (nothing sent yet); never
    after the server answered. ``timeout_s`` bounds the whole request.
    """
    out = out if out is not None else Outcome()
    try:
        return await _attempts(session, url, api, body, timeout_s, out, retries)
    finally:
        out.ended_s = time.perf_counter()


async def _attempts(
    session: aiohttp.ClientSession,
    url: str,
    api: Api,
    body: dict[str, Any],
    timeout_s: float,
    out: Outcome,
    retries: int,
) -> Outcome:
    for attempt in range(retries + 1):
        out.error = None
        out.sent_s = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                async with session.post(url, json=body) as response:
                    out.status = response.status
                    if response.status != 200:
                        detail = (await response.text())[:200].replace("\n", " ")
                        out.error = f"HTTP {response.status}: {detail}"
                        return out
                    await _read_events(response, api, out)
        except aiohttp.ClientConnectorError as error:
            out.error = f"cannot connect: {error.os_error or error}"
            if attempt < retries:
                continue
            return out
        except TimeoutError:
            out.error = f"timed out after {timeout_s:g} s"
            return out
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
            out.error = CLOSED  # the connection dropped mid-stream
            return out
        except aiohttp.ClientError as error:
            out.error = f"{type(error).__name__}: {error}"
            return out
        break
    if out.error is None and not out.done:
        out.error = CLOSED
    elif out.error is None and not out.chunk_s:
        out.error = "no chunk with generated text"
    return out
