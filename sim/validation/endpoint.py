"""``servesim measure --endpoint URL``: a scenario's requests sent to a live server.

The scenario's open-loop requests (the very arrival times and lengths
``servesim run`` simulates) are sent to any OpenAI-compatible server at
their arrival times, each as one streamed ``/v1/completions`` (or
``/v1/chat/completions``) request, timed per chunk by
``sim.validation.endpoint_client``. Before the clock starts:

1. ``GET /v1/models``: the server answers (else one-line error) and names the
   model when ``--model`` is not given;
2. prompts of the scenario's token counts (``sim.validation.endpoint_prompts``:
   exact through ``POST /tokenize`` when the server has it);
3. one 1-token request with ``ignore_eos``: if the server refuses the field,
   the run goes without it (and says so in ``summary.json``).

Requests in flight are bounded by ``max_concurrency`` (a request over the
bound waits at the client; its ``arrival_s`` is when it was sent, as vllm
bench times it, and ``scheduled_arrival_s`` keeps the plan). Each request has
a total timeout and is not retried unless ``retries`` says so (and then only
when the connection could not be made). Ctrl-C or ``max_duration_s`` stop the
run; what completed is kept, and the run is marked partial. This module
imports no torch.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import numpy as np
from tqdm import tqdm

from sim.errors import ConfigError
from sim.validation.endpoint_client import PATHS, Api, Outcome, request_body, stream_request
from sim.validation.endpoint_prompts import Counter, Prompt, build_prompts
from sim.workload.generate import RequestArrays


@dataclass(frozen=True)
class EndpointOptions:
    """How to reach the server and how patiently."""

    url: str
    model: str | None = None
    api: Api | None = None  # None: from the URL's path, else completions
    max_concurrency: int = 256
    timeout_s: float = 300.0  # one request, from send to the last chunk
    connect_timeout_s: float = 10.0
    retries: int = 0
    ignore_eos: bool = True
    max_duration_s: float | None = None
    progress: bool = True


@dataclass(frozen=True)
class Target:
    """The server's root URL, the API and the full request URL."""

    base: str
    api: Api

    @property
    def url(self) -> str:
        return self.base + PATHS[self.api]


def parse_endpoint(url: str, api: Api | None = None) -> Target:
    """``http://host:port`` (optionally ``/v1``, ``/v1/completions`` or
    ``/v1/chat/completions``) -> root URL and API; ConfigError if malformed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--endpoint {url!r}: expected http://HOST:PORT[/v1[/completions]]")
    path = parts.path.rstrip("/")
    found: Api | None = None
    for name, suffix in (("chat", PATHS["chat"]), ("completions", PATHS["completions"])):
        if path.endswith(suffix):
            found, path = name, path[: -len(suffix)]  # type: ignore[assignment]
            break
    else:
        path = path.removesuffix("/v1")
    if api is not None and found is not None and api != found:
        raise ConfigError(f"--endpoint {url!r} is the {found} API but --api says {api}")
    return Target(f"{parts.scheme}://{parts.netloc}{path}", api or found or "completions")


@dataclass
class RunState:
    """Filled as the run goes, so that an interrupted run keeps what it measured."""

    num_requests: int
    model: str = ""
    prompts: list[Prompt] = field(default_factory=list)
    outcomes: list[Outcome | None] = field(default_factory=list)
    origin_s: float | None = None  # perf_counter at arrival time 0
    end_s: float | None = None
    status: str = "complete"
    message: str = ""
    ignore_eos_sent: bool = False
    prompt_tokens: str = "approximate"

    def __post_init__(self) -> None:
        self.outcomes = [None] * self.num_requests


def _reason(error: BaseException) -> str:
    if isinstance(error, aiohttp.ClientConnectorError):
        return str(error.os_error or error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def _models(session: aiohttp.ClientSession, target: Target, model: str | None) -> str:
    """The model to ask for: ``model``, or the first one ``/v1/models`` lists."""
    where = f"--endpoint {target.base}"
    try:
        async with session.get(f"{target.base}/v1/models") as response:
            if response.status != 200:
                if model:
                    return model  # no model list, but the user named one
                raise ConfigError(
                    f"{where}: GET /v1/models answered {response.status}; pass --model"
                )
            # Any content type: a list sent as text/plain is still a list.
            answer = await response.json(content_type=None)
            listed = [m.get("id") for m in answer.get("data", [])]
    except ConfigError:
        raise  # already one line (a ValueError too: not to be wrapped below)
    except aiohttp.ClientError as error:
        raise ConfigError(f"{where}: cannot reach the server ({_reason(error)})") from None
    except (TimeoutError, ValueError, AttributeError) as error:
        raise ConfigError(f"{where}: GET /v1/models failed ({_reason(error)})") from None
    if model:
        return model
    if not listed or not listed[0]:
        raise ConfigError(f"{where}: /v1/models lists no model; pass --model")
    return str(listed[0])


async def _counter(session: aiohttp.ClientSession, target: Target, model: str) -> Counter | None:
    """A tokenize call (``POST /tokenize``), or None when the server has none."""

    def body(text: str) -> dict[str, Any]:
        if target.api == "chat":
            return {"model": model, "messages": [{"role": "user", "content": text}]}
        return {"model": model, "prompt": text}

    async def count(text: str) -> int:
        async with session.post(f"{target.base}/tokenize", json=body(text)) as response:
            response.raise_for_status()
            data = await response.json()
            return int(data["count"]) if "count" in data else len(data["tokens"])

    try:
        await count("hello")
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
        return None
    return count


async def _extra_fields(
    session: aiohttp.ClientSession, target: Target, model: str, opts: EndpointOptions
) -> dict[str, Any]:
    """``{"ignore_eos": true}`` if the server takes it (a 1-token probe), else ``{}``."""
    tries: list[dict[str, Any]] = [{"ignore_eos": True}, {}] if opts.ignore_eos else [{}]
    probe: Outcome | None = None
    for extra in tries:
        body = request_body(target.api, model, "hello", 1, extra)
        probe = await stream_request(session, target.url, target.api, body, opts.timeout_s)
        if probe.error is None:
            return extra
        if probe.status is None:
            break  # no answer at all: asking again without the field will not help
    detail = probe.error if probe is not None else "no answer"
    raise ConfigError(f"--endpoint {target.url}: a 1-token test request failed ({detail})")


async def _send_all(
    session: aiohttp.ClientSession,
    target: Target,
    work: RequestArrays,
    extra: dict[str, Any],
    opts: EndpointOptions,
    state: RunState,
) -> None:
    gate = asyncio.Semaphore(opts.max_concurrency)
    bar = tqdm(total=state.num_requests, unit="req", desc="measure", disable=not opts.progress)
    arrivals = work.arrival_s.tolist()
    origin = state.origin_s = time.perf_counter()

    async def one(index: int) -> None:
        await asyncio.sleep(max(0.0, origin + arrivals[index] - time.perf_counter()))
        async with gate:
            out = state.outcomes[index] = Outcome()
            prompt = state.prompts[index].text
            tokens = int(work.num_output_tokens[index])
            body = request_body(target.api, state.model, prompt, tokens, extra)
            await stream_request(
                session, target.url, target.api, body, opts.timeout_s, out, opts.retries
            )
        bar.update(1)

    tasks = [asyncio.create_task(one(i)) for i in range(state.num_requests)]
    try:
        _, pending = await asyncio.wait(tasks, timeout=opts.max_duration_s)
        if pending:
            state.status = "time limit"
            state.message = f"stopped at the {opts.max_duration_s:g} s limit"
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    finally:
        state.end_s = time.perf_counter()
        bar.close()


async def _main(work: RequestArrays, opts: EndpointOptions, state: RunState, seed: int) -> None:
    target = parse_endpoint(opts.url, opts.api)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=opts.connect_timeout_s)
    connector = aiohttp.TCPConnector(limit=opts.max_concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        state.model = await _models(session, target, opts.model)
        count = await _counter(session, target, state.model)
        state.prompt_tokens = (
            "exact (server /tokenize)" if count else "approximate (one-token words)"
        )
        targets = [int(n) for n in work.num_prompt_tokens]
        state.prompts = await build_prompts(targets, np.random.default_rng(seed), count)
        extra = await _extra_fields(session, target, state.model, opts)
        state.ignore_eos_sent = "ignore_eos" in extra
        await _send_all(session, target, work, extra, opts, state)


def run_endpoint(work: RequestArrays, opts: EndpointOptions, seed: int = 0) -> RunState:
    """Send ``work`` to the server; Ctrl-C keeps what completed (status "interrupted")."""
    if opts.max_concurrency < 1:
        raise ConfigError(f"--max-concurrency must be >= 1, got {opts.max_concurrency}")
    if opts.timeout_s <= 0 or opts.retries < 0:
        raise ConfigError("--timeout-s must be > 0 and --retries >= 0")
    parse_endpoint(opts.url, opts.api)  # malformed URL: fail before anything starts
    state = RunState(len(work.arrival_s), message=f"sent {len(work.arrival_s)} requests")
    try:
        asyncio.run(_main(work, opts, state, seed))
    except KeyboardInterrupt:
        if state.origin_s is None:
            raise  # nothing was sent: there is nothing to keep
        state.status, state.message = "interrupted", "interrupted (Ctrl-C): kept what completed"
        state.end_s = state.end_s or time.perf_counter()
    return state
