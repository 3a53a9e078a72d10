"""``servesim serve``'s HTTP server: vLLM's OpenAI routes over any online engine.

The server owns the text: it tokenizes prompts, hands token ids to the engine
(``sim.serving.stream.OnlineBackend``) and turns the ids each step emits back into
text, with stop strings. The routes and what each answers: docs/validation.md,
"``servesim serve``".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aiohttp import web
from pydantic import BaseModel

import sim
from sim.openai import listen
from sim.openai import protocol as p
from sim.openai.detokenize import IncrementalDetokenizer
from sim.openai.metrics import CONTENT_TYPE, ServerMetrics
from sim.openai.tokenizer import ByteTokenizer
from sim.serving.stream import Emitted, FinishReason, OnlineBackend, RequestTiming, Submission

LOG = logging.getLogger("servesim.serve")

Event = tuple[int, Emitted]  # (choice index, the engine's output for it)
# How often a whole answer's handler, waiting for tokens, looks whether its client left.
DISCONNECT_CHECK_S = 0.5
# On SIGTERM or Ctrl-C, how long open requests get to finish before they are cut
# (aiohttp's default); a second Ctrl-C or SIGTERM cuts them at once.
SHUTDOWN_TIMEOUT_S = 60.0


class Mailbox:
    """Events from the engine thread, handed to the event loop in one wake-up per batch.

    One ``call_soon_threadsafe`` per step instead of one per token: every wake-up
    of the loop takes the GIL from the engine thread, which then waits for it back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue[Event], Event]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver into ``loop`` (the server's)."""
        self._loop = loop

    def put(self, events: asyncio.Queue[Event], event: Event) -> None:
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


ENGINE = web.AppKey("engine", OnlineBackend)
MODEL = web.AppKey("model", str)
TOKENIZER = web.AppKey("tokenizer", ByteTokenizer)
MAILBOX = web.AppKey("mailbox", Mailbox)
METRICS = web.AppKey("metrics", ServerMetrics)
# Whether the engine's policy reads a request's priority (vLLM's --scheduling-policy priority).
PRIORITY_SCHEDULING = web.AppKey("priority_scheduling", bool)


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(
        text=model.model_dump_json(), status=status, content_type="application/json"
    )


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    return _json(p.error_body(status, message, param), status)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every error as vLLM's nested body: refused requests, unknown routes, crashes."""
    try:
        return await handler(request)
    except p.RequestError as error:
        return _error(error.status, str(error), error.param)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return _error(error.status, error.reason)
    except ConnectionResetError:
        # The client hung up mid-body: its right, not a server error (re-raised, aiohttp
        # would log a traceback), and nothing reached the engine. The 499 is never sent.
        LOG.warning(
            "servesim serve: %s %s: the client disconnected before sending its whole request",
            request.method,
            request.path,
        )
        return web.Response(status=499)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # a bug: the client gets a 500, the log the traceback
        LOG.exception("servesim serve: %s %s failed", request.method, request.path)
        return _error(500, f"{type(error).__name__}: {error}")


async def _body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise p.RequestError("the body is not valid JSON") from None


def _check_model(request: web.Request, asked: str | None) -> None:
    if asked not in (None, request.app[MODEL]):
        raise p.RequestError(f"The model `{asked}` does not exist.", "model", status=404)


def _check_supported(request: p.Sampling) -> None:
    refused = request.unsupported()
    if refused:
        raise p.RequestError(f"{', '.join(refused)}: not supported by servesim serve", refused[0])
    unknown = p.unknown_fields(request)
    if unknown:
        LOG.warning("The following fields were present in the request but ignored: %s", unknown)


def _check_priority(request: web.Request, priority: int) -> None:
    """vLLM's check: a priority other than 0 needs a policy that schedules by it."""
    if priority != 0 and not request.app[PRIORITY_SCHEDULING]:
        raise p.RequestError(
            f"Got priority {priority} but Priority scheduling is not enabled.", "priority"
        )


def _check_engine(engine: OnlineBackend) -> None:
    """A 500 once the engine's loop has stopped (vLLM's answer when its engine is dead)."""
    if engine.error is not None:
        raise p.RequestError(f"the engine stopped: {engine.error}", status=500)


def _check_token_ids(ids: list[int], vocab_size: int) -> None:
    """A prompt given as token ids holds only ids of the model's vocabulary (vLLM's
    check, with the vocabulary's size said)."""
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise p.RequestError(
            f"Token id {bad} is out of vocabulary (the model's vocabulary has {vocab_size} "
            f"ids, 0 to {vocab_size - 1})",
            "prompt",
        )


def _max_tokens(asked: int | None, default: int, num_prompt: int, max_model_len: int) -> int:
    """``max_tokens`` checked against the context left after the prompt (vLLM's messages)."""
    if num_prompt == 0:
        raise p.RequestError("The prompt is empty: give at least one token.", "prompt")
    room = max_model_len - num_prompt
    if room < 1:
        raise p.RequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {num_prompt} input tokens. Please reduce the length of the input."
        )
    max_tokens = min(default, room) if asked is None else asked
    if max_tokens > room:
        raise p.RequestError(
            f"'max_tokens' is too large: {max_tokens}. This model's maximum context length is "
            f"{max_model_len} tokens and your request has {num_prompt} input tokens "
            f"({max_tokens} > {max_model_len} - {num_prompt}).",
            "max_tokens",
        )
    return max_tokens


@dataclass
class Choice:
    """One generation of a request: its engine request, text and end."""

    index: int
    num_prompt_tokens: int
    detokenizer: IncrementalDetokenizer
    request_id: int  # the engine's
    max_tokens: int  # its limit (the client's, or the default for its prompt)
    num_generated_tokens: int = 0
    finish_reason: FinishReason | None = None
    stop_reason: str | None = None
    last_event_s: float | None = None
    timing: RequestTiming | None = None  # the engine's, as of its latest event
    pieces: list[str] = field(default_factory=list)

    def usage(self) -> p.UsageInfo:
        return p.UsageInfo.of(self.num_prompt_tokens, self.num_generated_tokens)


class Generation:
    """A request's choices on the engine, and their events as they arrive."""

    def __init__(
        self,
        request: web.Request,
        req: p.Sampling,
        prompts: list[list[int]],
        max_tokens: list[int],
        received_s: float,
    ) -> None:
        app = request.app
        self.engine, self.metrics = app[ENGINE], app[METRICS]
        self.arrival_s = received_s  # time.perf_counter() when the handler took it
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.num_prompt_tokens = sum(len(ids) for ids in prompts)
        self.n = n = req.n
        tokenizer, mailbox, metrics = app[TOKENIZER], app[MAILBOX], app[METRICS]
        self.choices: list[Choice] = []
        # vLLM's order: choice i * n + k is the k-th generation of prompt i.
        for i, (ids, limit) in enumerate(zip(prompts, max_tokens, strict=True)):
            for k in range(n):
                index = i * n + k

                def sink(event: Emitted, index: int = index) -> None:  # the engine's thread
                    if event.num_step_tokens is not None:  # once per engine step
                        metrics.step(event.num_step_tokens)
                    mailbox.put(self.events, (index, event))

                try:
                    submission = Submission(
                        ids, limit, req.ignore_eos, sink, self.arrival_s, req.priority
                    )
                    request_id = self.engine.submit(submission)
                except BaseException:
                    self.abort("its submission failed")  # the choices submitted before
                    raise
                detokenizer = IncrementalDetokenizer(
                    tokenizer, req.stop_strings(), req.include_stop_str_in_output
                )
                self.choices.append(Choice(index, len(ids), detokenizer, request_id, limit))

    @property
    def done(self) -> bool:
        return all(c.finish_reason is not None for c in self.choices)

    def usage(self) -> p.UsageInfo:
        generated = sum(c.num_generated_tokens for c in self.choices)
        return p.UsageInfo.of(self.num_prompt_tokens, generated)

    async def next(self) -> tuple[Choice, str] | None:
        """The next event as (choice, new text); None for one of a finished choice."""
        index, event = await self.events.get()
        choice = self.choices[index]
        if choice.finish_reason is not None:
            return None  # the engine's tokens after a stop string, before it heard of it
        now = time.perf_counter()
        new_tokens = event.num_generated_tokens - choice.num_generated_tokens
        if event.token_ids:
            if choice.last_event_s is None:
                self.metrics.first_token(now - self.arrival_s, choice.num_prompt_tokens)
            else:
                self.metrics.next_token(now - choice.last_event_s)
            choice.last_event_s = now
            self.metrics.generated(max(new_tokens, 0))
        choice.num_generated_tokens = event.num_generated_tokens
        if event.timing is not None:
            choice.timing = event.timing
        delta = choice.detokenizer.push(event.token_ids, final=event.finish_reason is not None)
        if delta.stop is not None:
            choice.finish_reason, choice.stop_reason = "stop", delta.stop
            if event.finish_reason is None:
                self.engine.abort(choice.request_id)
        else:
            choice.finish_reason = event.finish_reason
        if choice.finish_reason is not None:
            self._finished(choice, now)
        choice.pieces.append(delta.text)
        return choice, delta.text

    def _finished(self, choice: Choice, now_s: float) -> None:
        """``/metrics`` of a finished choice, and of its prompt's request once its n
        choices are all finished (vLLM's parent request)."""
        assert choice.finish_reason is not None
        timing = choice.timing  # up to its last token (a stop string's too)
        self.metrics.finished(
            choice.finish_reason,
            now_s - self.arrival_s,
            choice.num_prompt_tokens,
            choice.num_generated_tokens,
            choice.max_tokens,
            timing.decode_s if timing is not None else 0.0,
        )
        if timing is not None:
            self.metrics.engine_timing(timing)
        first = choice.index - choice.index % self.n
        if all(c.finish_reason is not None for c in self.choices[first : first + self.n]):
            self.metrics.request_finished(self.n)

    def abort(self, why: str) -> None:
        """End every unfinished choice as vLLM aborts a request: the engine frees it,
        ``/metrics`` counts it (``finished_reason="abort"``), the log says so in one line."""
        now = time.perf_counter()
        aborted = [c for c in self.choices if c.finish_reason is None]
        for choice in aborted:
            self.engine.abort(choice.request_id)
            choice.finish_reason = "abort"
            self._finished(choice, now)
        if aborted:
            generated = sum(c.num_generated_tokens for c in aborted)
            ids = ", ".join(str(c.request_id) for c in aborted)
            LOG.warning(
                "servesim serve: aborted engine request %s (%d tokens generated): %s",
                ids,
                generated,
                why,
            )


def _sse(model: BaseModel) -> bytes:
    return b"data: " + model.model_dump_json().encode() + b"\n\n"


def _choice(chat: bool, stream: bool, choice: Choice, text: str, role: bool = False) -> Any:
    """One choice of an answer: a completion's text, a chat message, or (streamed) a chat
    delta, with the choice's end so far; ``role``: a stream's first chunk of a chat choice."""
    end: dict[str, Any] = {"finish_reason": choice.finish_reason, "stop_reason": choice.stop_reason}
    if not chat:
        return p.CompletionChoice(index=choice.index, text=text, **end)
    if not stream:
        return p.ChatChoice(index=choice.index, message=p.ChatMessage(content=text), **end)
    delta = p.DeltaMessage(role="assistant" if role else None, content=text)
    return p.ChatStreamChoice(index=choice.index, delta=delta, **end)


def _answer(
    chat: bool, stream: bool, rid: str, model: str, choices: list[Any], **fields: Any
) -> p.CompletionResponse | p.ChatCompletionResponse | p.ChatCompletionChunk:
    """The answer (or a stream's chunk) around ``choices``; ``fields``: ``created``, ``usage``."""
    chat_answer = p.ChatCompletionChunk if stream else p.ChatCompletionResponse
    kind = chat_answer if chat else p.CompletionResponse
    return kind(id=rid, model=model, choices=choices, **fields)


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    received_s = time.perf_counter()  # the request's arrival: parsing and tokenizing count
    app = request.app
    engine, model, tokenizer = app[ENGINE], app[MODEL], app[TOKENIZER]
    body = await _body(request)
    req = p.parse(p.ChatCompletionRequest if chat else p.CompletionRequest, body)
    _check_model(request, req.model)
    _check_supported(req)
    if isinstance(req, p.ChatCompletionRequest):
        prompts = [tokenizer.encode(p.chat_prompt(req.messages))]
        asked, default = req.wanted_tokens(), engine.max_model_len_tokens  # vLLM's default
    else:
        assert isinstance(req, p.CompletionRequest)
        prompts = [tokenizer.encode(x) if isinstance(x, str) else x for x in req.prompts()]
        for ids in prompts:
            _check_token_ids(ids, tokenizer.vocab_size)
        asked, default = req.max_tokens, 16  # vLLM's default for completions
    limits = [_max_tokens(asked, default, len(ids), engine.max_model_len_tokens) for ids in prompts]
    _check_priority(request, req.priority)
    _check_engine(engine)  # a stopped engine would never answer
    generation = Generation(request, req, prompts, limits, received_s)
    first = generation.choices[0].request_id
    rid = f"chatcmpl-{first}" if chat else f"cmpl-{first}"
    try:
        if req.stream:
            return await _stream(request, generation, rid, chat, req.stream_options)
        return await _whole(request, generation, rid, model, chat)
    except ConnectionResetError:
        # The client hung up (before the headers, mid-stream or waiting for a whole
        # answer): abort its requests and end quietly, as ``_errors`` does.
        generation.abort("the client disconnected")
        return web.Response(status=499)
    except asyncio.CancelledError:
        generation.abort("the server is stopping")
        raise


async def _stream(
    request: web.Request,
    generation: Generation,
    rid: str,
    chat: bool,
    options: p.StreamOptions | None,
) -> web.StreamResponse:
    """A stream's chunks: roles (chat), one per engine event, usage if asked, [DONE]."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)  # ConnectionResetError if the client left: _generate's
    model = request.app[MODEL]
    options = options or p.StreamOptions()
    created = p.now_s()

    def chunk(choices: list[Any], usage: p.UsageInfo | None) -> bytes:
        return _sse(_answer(chat, True, rid, model, choices, created=created, usage=usage))

    each_usage = options.include_usage and options.continuous_usage_stats  # vLLM's rule
    if chat:  # each choice's role first (vLLM's usage there: the prompt, no completion yet)
        for choice in generation.choices:
            role = _choice(chat, True, choice, "", role=True)
            await response.write(chunk([role], choice.usage() if each_usage else None))
    while not generation.done:
        step = await generation.next()
        if step is None:
            continue
        choice, text = step
        usage = choice.usage() if each_usage else None
        await response.write(chunk([_choice(chat, True, choice, text)], usage))
        if choice.finish_reason == "abort" and generation.engine.error is not None:
            # The engine died under the stream: an error event, as vLLM sends one.
            error = p.error_body(500, f"the engine stopped: {generation.engine.error}")
            await response.write(_sse(error) + b"data: [DONE]\n\n")
            await response.write_eof()
            return response
    if options.include_usage:
        await response.write(chunk([], generation.usage()))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _whole(
    request: web.Request, generation: Generation, rid: str, model: str, chat: bool
) -> web.StreamResponse:
    """A non-streamed answer: every choice's whole text at once."""
    checked_s = time.perf_counter()
    while not generation.done:
        with contextlib.suppress(TimeoutError):  # no token for a while: look at the client
            await asyncio.wait_for(generation.next(), DISCONNECT_CHECK_S)
        if time.perf_counter() - checked_s >= DISCONNECT_CHECK_S:
            checked_s = time.perf_counter()
            transport = request.transport
            if transport is None or transport.is_closing():  # the client gave up waiting
                raise ConnectionResetError("the client disconnected")  # _generate aborts
    if any(c.finish_reason == "abort" for c in generation.choices):
        _check_engine(generation.engine)  # it died under the request: its choices were aborted
    choices = [_choice(chat, False, c, "".join(c.pieces)) for c in generation.choices]
    return _json(_answer(chat, False, rid, model, choices, usage=generation.usage()))


async def tokenize(request: web.Request) -> web.Response:
    """``POST /tokenize``: vLLM's answer shape (``count``, ``max_model_len``, ``tokens``)."""
    req = p.parse(p.TokenizeRequest, await _body(request))
    _check_model(request, req.model)
    if (req.prompt is None) == (req.messages is None):
        raise p.RequestError("give either 'prompt' or 'messages'", "prompt")
    text = p.chat_prompt(req.messages) if req.messages is not None else req.prompt or ""
    ids = request.app[TOKENIZER].encode(text)
    max_len = request.app[ENGINE].max_model_len_tokens
    return _json(p.TokenizeResponse(count=len(ids), max_model_len=max_len, tokens=ids))


async def detokenize(request: web.Request) -> web.Response:
    """``POST /detokenize``: token ids back to text."""
    req = p.parse(p.DetokenizeRequest, await _body(request))
    _check_model(request, req.model)
    return _json(p.DetokenizeResponse(prompt=request.app[TOKENIZER].decode(req.tokens)))


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``."""
    model = request.app[MODEL]
    card = p.ModelCard(id=model, root=model, max_model_len=request.app[ENGINE].max_model_len_tokens)
    return _json(p.ModelList(data=[card]))


async def health(request: web.Request) -> web.Response:
    """``GET /health`` (and ``/ping``): 200 while the engine loop runs, else 503 (vLLM's
    answer once its engine core is dead, ``EngineDeadError``: a broken invariant too)."""
    error = request.app[ENGINE].error
    if error is not None:
        return web.Response(status=503, text=f"engine stopped: {error}")
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    """``GET /version``: servesim's version."""
    return web.json_response({"version": sim.__version__})


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text format, vLLM's metric names."""
    engine = request.app[ENGINE]
    body = request.app[METRICS].render(engine.load(), engine.error)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def make_app(
    engine: OnlineBackend,
    model: str,
    tokenizer: ByteTokenizer | None = None,
    priority_scheduling: bool = False,
    invariants: tuple[str, ...] = (),
) -> web.Application:
    """The aiohttp application around a started ``engine``; ``invariants``: those the
    engine checks as it runs, each a ``/metrics`` series."""
    app = web.Application(middlewares=[_errors])
    app[ENGINE] = engine
    app[MODEL] = model
    app[TOKENIZER] = tokenizer or ByteTokenizer()
    app[MAILBOX] = Mailbox()
    app[METRICS] = ServerMetrics(model, engine.max_model_len_tokens, invariants)
    app[PRIORITY_SCHEDULING] = priority_scheduling

    async def bind(app: web.Application) -> None:
        app[MAILBOX].bind(asyncio.get_running_loop())

    app.on_startup.append(bind)
    app.router.add_get("/health", health)
    app.router.add_get("/ping", health)
    app.router.add_post("/ping", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_post("/v1/completions", partial(_generate, chat=False))
    app.router.add_post("/v1/chat/completions", partial(_generate, chat=True))
    return app


def stopping_line(app: web.Application) -> str:
    """What the server says when told to stop: how many requests it waits for, how long."""
    engine = app.get(ENGINE)
    load = engine.load() if engine is not None else None
    num_open = 0 if load is None else load.num_running + load.num_waiting
    if num_open == 0:
        return "servesim serve: stopping"
    requests, them = ("1 request", "it") if num_open == 1 else (f"{num_open} requests", "them")
    return (
        f"servesim serve: stopping: waiting up to {SHUTDOWN_TIMEOUT_S:g} s for {requests} "
        f"in the engine to finish (Ctrl-C cuts {them} now)"
    )


async def serve(app: web.Application, host: str, port: int, model: str) -> None:
    """Serve ``app`` on ``host:port`` (0: any free port) until SIGTERM or Ctrl-C; then open
    requests get ``SHUTDOWN_TIMEOUT_S`` to finish, unless a second signal cuts the wait
    (``asyncio.run`` then cancels their handlers, which abort them)."""
    runner = await listen(app, host, port, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    bound_host, bound_port = runner.addresses[0][:2]
    print(
        f"servesim serve: {model} on http://{bound_host}:{bound_port} (Ctrl-C stops)",
        flush=True,
    )
    # Both signals handled here: asyncio.run's own Ctrl-C handling would lose a second
    # Ctrl-C that comes while this task is in its finally.
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        cleanup = asyncio.ensure_future(runner.cleanup())
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, cleanup.cancel)  # before the line that says so
        print(stopping_line(app), flush=True)
        try:
            await cleanup
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this task was cancelled, not just the wait cut
