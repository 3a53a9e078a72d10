"""``servesim serve``: the reference engine behind an OpenAI-compatible streaming HTTP server.

The routes (vLLM's shapes), what a stream sends, how text becomes tokens and
why aiohttp: docs/validation.md, "``servesim serve``". After the last token's
chunk a stream sends a usage chunk when asked for, then ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from functools import partial
from typing import Any

from aiohttp import web

from calibration.reference_engine import Emitted, OnlineEngine
from sim.errors import ConfigError


class Mailbox:
    """Events from the engine thread, handed to the event loop in one wake-up per batch.

    One ``call_soon_threadsafe`` per step instead of one per token: every wake-up
    of the loop takes the GIL from the engine thread, which then waits for it back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue[Emitted], Emitted]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver into ``loop`` (the server's)."""
        self._loop = loop

    def put(self, events: asyncio.Queue[Emitted], event: Emitted) -> None:
        """Called on the engine thread."""
        with self._lock:
            self._pending.append((events, event))
            first = len(self._pending) == 1
        if first and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._deliver)  # RuntimeError if closed meanwhile

    def _deliver(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for events, event in pending:
            events.put_nowait(event)


ENGINE = web.AppKey("engine", OnlineEngine)
MODEL = web.AppKey("model", str)
MAILBOX = web.AppKey("mailbox", Mailbox)


def _error(status: int, message: str) -> web.Response:
    body = {"object": "error", "message": message, "type": "BadRequestError", "code": status}
    return web.json_response(body, status=status)


def _prompt_ids(engine: OnlineEngine, body: dict[str, Any], chat: bool) -> list[int]:
    """Token ids of the request's prompt; ValueError with the reason if malformed."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("'messages' must be a non-empty list")
        text = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
        return engine.tokenizer.encode(text)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return engine.tokenizer.encode(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    raise ValueError("'prompt' must be a string or a list of token ids")


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


def _answer(rid: str, obj: str, model: str, choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }


def _chunk(kind: str, rid: str, model: str, text: str, reason: str | None) -> dict[str, Any]:
    if kind == "chat":
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": reason}
        return _answer(rid, "chat.completion.chunk", model, choice)
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    return _answer(rid, "text_completion", model, choice)


def _usage(last: Emitted) -> dict[str, int]:
    return {
        "prompt_tokens": last.num_prompt_tokens,
        "completion_tokens": last.num_generated_tokens,
        "total_tokens": last.num_prompt_tokens + last.num_generated_tokens,
    }


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


async def _generate(request: web.Request, kind: str) -> web.StreamResponse:
    engine, model = request.app[ENGINE], request.app[MODEL]
    try:
        body = await _body(request)
        ids = _prompt_ids(engine, body, kind == "chat")
        asked = body.get("model")
        if asked not in (None, model):
            return _error(404, f"The model `{asked}` does not exist.")
        room = engine.max_model_len_tokens - len(ids)
        asked_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        default = 16 if kind == "completions" else room  # vLLM's defaults
        max_tokens = default if asked_tokens is None else int(asked_tokens)
    except (ValueError, TypeError) as error:
        return _error(400, str(error))
    if not ids or max_tokens < 1 or max_tokens > room:
        return _error(
            400,
            f"prompt of {len(ids)} tokens + max_tokens {max_tokens} must fit "
            f"max_model_len {engine.max_model_len_tokens}",
        )
    events: asyncio.Queue[Emitted] = asyncio.Queue()
    mailbox = request.app[MAILBOX]

    def sink(event: Emitted) -> None:  # called on the engine thread
        mailbox.put(events, event)

    request_id = engine.submit(ids, max_tokens, bool(body.get("ignore_eos", False)), sink)
    rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{request_id}"
    if not body.get("stream"):
        return await _whole(events, rid, model, kind)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    try:
        await response.prepare(request)
        if kind == "chat":
            first = _chunk(kind, rid, model, "", None)
            first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            await response.write(_sse(first))
        while True:
            event = await events.get()
            await response.write(_sse(_chunk(kind, rid, model, event.text, event.finish_reason)))
            if event.finish_reason is not None:
                break
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"id": rid, "object": "chunk", "model": model, "choices": []}
            await response.write(_sse({**usage, "usage": _usage(event)}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionResetError:
        # The client hung up mid-stream (aiohttp: "Cannot write to closing
        # transport"): its right, not a server error. Stop generating for it and
        # end the handler quietly; raising would make aiohttp log a traceback.
        engine.abort(request_id)
    except asyncio.CancelledError:
        engine.abort(request_id)  # the server is shutting down: let cancellation run
        raise
    return response


async def _whole(events: asyncio.Queue[Emitted], rid: str, model: str, kind: str) -> web.Response:
    """A non-streamed answer: all tokens at once."""
    text = ""
    while True:
        event = await events.get()
        text += event.text
        if event.finish_reason is not None:
            break
    choice: dict[str, Any] = {"index": 0, "finish_reason": event.finish_reason}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    obj = "chat.completion" if kind == "chat" else "text_completion"
    return web.json_response({**_answer(rid, obj, model, choice), "usage": _usage(event)})


async def tokenize(request: web.Request) -> web.Response:
    """``POST /tokenize``: vLLM's answer shape (``count``, ``max_model_len``, ``tokens``)."""
    engine = request.app[ENGINE]
    try:
        body = await _body(request)
        ids = _prompt_ids(engine, body, "messages" in body)
    except ValueError as error:
        return _error(400, str(error))
    return web.json_response(
        {"count": len(ids), "max_model_len": engine.max_model_len_tokens, "tokens": ids}
    )


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``."""
    engine, model = request.app[ENGINE], request.app[MODEL]
    card = {
        "id": model,
        "object": "model",
        "owned_by": "servesim",
        "max_model_len": engine.max_model_len_tokens,
    }
    return web.json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    """``GET /health``: 200 while the engine loop runs."""
    if request.app[ENGINE].error is not None:
        return web.Response(status=503, text=f"engine stopped: {request.app[ENGINE].error}")
    return web.Response(status=200)


def make_app(engine: OnlineEngine, model: str) -> web.Application:
    """The aiohttp application around a started ``engine``."""
    app = web.Application()
    app[ENGINE] = engine
    app[MODEL] = model
    app[MAILBOX] = Mailbox()

    async def bind(app: web.Application) -> None:
        app[MAILBOX].bind(asyncio.get_running_loop())

    app.on_startup.append(bind)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", partial(_generate, kind="completions"))
    app.router.add_post("/v1/chat/completions", partial(_generate, kind="chat"))
    return app


async def serve(app: web.Application, host: str, port: int, model: str) -> None:
    """Serve ``app`` on ``host:port`` (0: any free port), printing its URL, until SIGTERM."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as error:
            raise ConfigError(
                f"--port {port}: cannot listen on {host} ({error.strerror})"
            ) from None
        bound_host, bound_port = runner.addresses[0][:2]
        print(
            f"servesim serve: {model} on http://{bound_host}:{bound_port} (Ctrl-C stops)",
            flush=True,
        )
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
