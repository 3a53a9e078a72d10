"""``servesim measure --endpoint URL``: a scenario's requests timed on a live server, as a folder.

docs/validation.md, "Measuring a live server", tells the client step by step: what
it asks before the clock starts (``_models``, ``sim.validation.endpoint_prompts``,
``_extra_fields``), how one request is sent and timed (``stream_request``: times
are ``time.perf_counter()`` seconds, TTFT to the first chunk with generated text,
one ITL sample per later chunk; failures are kept in ``Outcome.error``, never
raised), and the folder it writes (``endpoint_run``, ``write_measure_folder``).
An open loop sends at the arrival times, at most ``max_concurrency`` in flight; a
closed loop (``Streams``) runs ``num_users`` streams. This module imports no torch.
"""

from __future__ import annotations

import asyncio
import json
import platform
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import numpy as np
import pandas as pd
from tqdm import tqdm

import sim
from sim.errors import ConfigError
from sim.metrics.itl import STEP_COLUMNS
from sim.metrics.stats import (
    RequestTable,
    text_dtype,
    with_request_metrics,
)
from sim.scenario import Scenario
from sim.validation.endpoint_prompts import Prompt, TokenCounter, build_prompts
from sim.validation.formats.measure_dir import write_measure_folder
from sim.validation.match import told_settings
from sim.validation.predict import load_of, measured_summary
from sim.workload.generate import RequestArrays

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


def _prompt(api: Api, text: str) -> dict[str, Any]:
    """The prompt's field of a request body: a user message for chat."""
    return {"messages": [{"role": "user", "content": text}]} if api == "chat" else {"prompt": text}


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
    return body | _prompt(api, prompt) | extra


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
    finally:
        out.ended_s = time.perf_counter()


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
    # What the user told of the server (--server-setting, vLLM's engine-argument names):
    # summary.json's engine_settings, its layout UNKNOWN where not told.
    server_settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Streams:
    """A closed loop: ``num_users`` streams, each sending its next request
    ``think_s()`` seconds after its last one's answer (the last chunk)."""

    num_users: int
    think_s: Callable[[], float]


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
    closed_loop: bool = False  # sent by streams: no schedule, each request's plan is its send

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


async def _counter(
    session: aiohttp.ClientSession, target: Target, model: str, timeout_s: float
) -> TokenCounter | None:
    """A tokenize call (``POST /tokenize``), or None when the server has none or its
    first call gives no answer within ``timeout_s`` (a server that never answers
    there hung ``measure --endpoint``: issue 30)."""

    async def count(text: str) -> int:
        body = {"model": model} | _prompt(target.api, text)
        try:
            async with asyncio.timeout(timeout_s):
                async with session.post(f"{target.base}/tokenize", json=body) as response:
                    response.raise_for_status()
                    data = await response.json()
                    return int(data["count"]) if "count" in data else len(data["tokens"])
        except TimeoutError:
            raise ConfigError(
                f"--endpoint {target.base}: POST /tokenize gave no answer in {timeout_s:g} s "
                "(--timeout-s)"
            ) from None

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
    streams: Streams | None = None,
) -> None:
    gate = asyncio.Semaphore(opts.max_concurrency)
    bar = tqdm(total=state.num_requests, unit="req", desc="measure", disable=not opts.progress)
    arrivals = work.arrival_s.tolist()
    origin = state.origin_s = time.perf_counter()

    async def send(index: int) -> None:
        out = state.outcomes[index] = Outcome()
        prompt = state.prompts[index].text
        tokens = int(work.num_output_tokens[index])
        body = request_body(target.api, state.model, prompt, tokens, extra)
        if work.priority is not None:
            # vLLM's extension field; the server refuses a non-zero one unless it
            # runs priority scheduling, as the scenario's own run does.
            body["priority"] = int(work.priority[index])
        await stream_request(
            session, target.url, target.api, body, opts.timeout_s, out, opts.retries
        )
        bar.update(1)

    async def one(index: int) -> None:
        await asyncio.sleep(max(0.0, origin + arrivals[index] - time.perf_counter()))
        async with gate:
            await send(index)

    next_index = [0]  # a closed loop's next request, taken by whichever stream is free

    async def user(loop: Streams) -> None:
        while True:
            await asyncio.sleep(loop.think_s())
            if next_index[0] >= state.num_requests:
                return
            index = next_index[0]
            next_index[0] += 1
            await send(index)

    if streams is None:
        tasks = [asyncio.create_task(one(i)) for i in range(state.num_requests)]
    else:
        state.closed_loop = True
        tasks = [asyncio.create_task(user(streams)) for _ in range(streams.num_users)]
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


async def _main(
    work: RequestArrays, opts: EndpointOptions, state: RunState, seed: int, streams: Streams | None
) -> None:
    target = parse_endpoint(opts.url, opts.api)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=opts.connect_timeout_s)
    limit = opts.max_concurrency if streams is None else streams.num_users
    connector = aiohttp.TCPConnector(limit=limit)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        state.model = await _models(session, target, opts.model)
        count = await _counter(session, target, state.model, opts.timeout_s)
        state.prompt_tokens = (
            "exact (server /tokenize)" if count else "approximate (one-token words)"
        )
        targets = [int(n) for n in work.num_prompt_tokens]
        state.prompts = await build_prompts(targets, np.random.default_rng(seed), count)
        extra = await _extra_fields(session, target, state.model, opts)
        state.ignore_eos_sent = "ignore_eos" in extra
        await _send_all(session, target, work, extra, opts, state, streams)


def run_endpoint(
    work: RequestArrays, opts: EndpointOptions, seed: int = 0, streams: Streams | None = None
) -> RunState:
    """Send ``work`` to the server (at its arrival times, or by ``streams``: a closed
    loop, whose arrival times are ignored); Ctrl-C keeps what completed (status
    "interrupted")."""
    if streams is not None and streams.num_users < 1:
        raise ConfigError(f"a closed loop needs >= 1 stream, got {streams.num_users}")
    if opts.max_concurrency < 1:
        raise ConfigError(f"--max-concurrency must be >= 1, got {opts.max_concurrency}")
    if opts.timeout_s <= 0 or opts.retries < 0:
        raise ConfigError("--timeout-s must be > 0 and --retries >= 0")
    parse_endpoint(opts.url, opts.api)  # malformed URL: fail before anything starts
    told_settings(opts.server_settings)  # a --server-setting no check reads: the same
    state = RunState(len(work.arrival_s), message=f"sent {len(work.arrival_s)} requests")
    try:
        asyncio.run(_main(work, opts, state, seed, streams))
    except KeyboardInterrupt:
        if state.origin_s is None:
            raise  # nothing was sent: there is nothing to keep
        state.status, state.message = "interrupted", "interrupted (Ctrl-C): kept what completed"
        state.end_s = state.end_s or time.perf_counter()
    return state


_NAN = float("nan")


def _row(
    index: int, out: Outcome | None, state: RunState, work: RequestArrays, origin: float
) -> dict[str, Any]:
    scheduled = float(work.arrival_s[index])
    prompt = state.prompts[index] if index < len(state.prompts) else None
    row: dict[str, Any] = {
        "request_id": index,
        "arrival_s": scheduled,
        "ready_s": scheduled,
        "first_scheduled_s": _NAN,
        "first_token_s": _NAN,
        "finish_s": _NAN,
        "num_prompt_tokens": prompt.num_tokens if prompt else int(work.num_prompt_tokens[index]),
        "num_output_tokens": int(work.num_output_tokens[index]),
        "num_generated_tokens": 0,
        "num_preemptions": 0,
        "rejection_reason": None,
        "scheduled_arrival_s": scheduled,
        "num_chunks": 0,
        "prompt_tokens_exact": bool(prompt and prompt.exact),
        "http_status": None,
        "error": "never sent: the run stopped first",
    }
    if out is None:
        return row
    if out.sent_s is not None:
        row["arrival_s"] = row["ready_s"] = out.sent_s - origin
        if state.closed_loop:  # a stream's request is planned when it is sent
            row["scheduled_arrival_s"] = row["arrival_s"]
    if out.chunk_s:
        row["first_token_s"] = out.chunk_s[0] - origin
    if out.num_prompt_tokens is not None:
        row["num_prompt_tokens"] = out.num_prompt_tokens
        row["prompt_tokens_exact"] = True
    generated = out.num_generated_tokens
    row.update(
        num_generated_tokens=len(out.chunk_s) if generated is None else generated,
        num_chunks=len(out.chunk_s),
        http_status=out.status,
        error=out.error,
    )
    if out.ok:
        row["finish_s"] = out.chunk_s[-1] - origin
    elif out.error is None:
        row["error"] = "in flight when the run stopped"
    return row


def request_frame(state: RunState, work: RequestArrays) -> pd.DataFrame:
    """One row per scenario request, in scenario order."""
    origin = state.origin_s or 0.0
    rows = [_row(i, out, state, work, origin) for i, out in enumerate(state.outcomes)]
    frame = pd.DataFrame(rows)
    frame["http_status"] = frame["http_status"].astype("Int64")
    frame["rejection_reason"] = frame["rejection_reason"].astype(text_dtype())
    return frame


def token_frame(state: RunState) -> pd.DataFrame:
    """Every content chunk's time (seconds from the origin) of the completed requests."""
    origin = state.origin_s or 0.0
    ids: list[int] = []
    index: list[int] = []
    times: list[float] = []
    for rid, out in enumerate(state.outcomes):
        if out is not None and out.ok:
            ids += [rid] * len(out.chunk_s)
            index += range(len(out.chunk_s))
            times += [t - origin for t in out.chunk_s]
    return pd.DataFrame(
        {
            "request_id": np.asarray(ids, dtype=np.int64),
            "token_index": np.asarray(index, dtype=np.int64),
            "time_s": np.asarray(times, dtype=np.float64),
        }
    )


def timeseries_frame(requests: pd.DataFrame, state: RunState) -> pd.DataFrame:
    """Requests held back by the concurrency bound, and in flight, at every change."""
    origin = state.origin_s or 0.0
    # (time, order, d waiting, d running); at one time: queued, then sent, then ended.
    events: list[tuple[float, int, int, int]] = []
    for rid, out in enumerate(state.outcomes):
        scheduled = float(requests["scheduled_arrival_s"].iloc[rid])
        if out is None or out.sent_s is None:
            continue
        sent = out.sent_s - origin
        ended = (out.ended_s if out.ended_s is not None else state.end_s or out.sent_s) - origin
        events += [(scheduled, 0, 1, 0), (sent, 1, -1, 1), (ended, 2, 0, -1)]
    events.sort()
    times = np.asarray([e[0] for e in events], dtype=np.float64)
    waiting = np.cumsum([e[2] for e in events], dtype=np.int64)
    running = np.cumsum([e[3] for e in events], dtype=np.int64)
    return pd.DataFrame({"time_s": times, "num_waiting": waiting, "num_running": running})


def failure_counts(requests: pd.DataFrame) -> dict[str, int]:
    """Failed requests by error message (cut to 80 characters)."""
    errors = requests["error"].dropna().astype(str).str.slice(0, 80)
    return dict(Counter(errors).most_common())


@dataclass
class EndpointRun:
    """A live-server run's tables and summary; ``write`` lays out a measure folder."""

    scenario: Scenario
    requests: pd.DataFrame
    tokens: pd.DataFrame
    timeseries: pd.DataFrame
    summary: dict[str, Any]
    samples: dict[str, str]

    def write(self, out_dir: str | Path) -> list[Path]:
        """requests.parquet, summary.json, timeseries.csv, plots, steps, tokens, run.json."""
        out = Path(out_dir)
        steps = pd.DataFrame({c: np.empty(0) for c in STEP_COLUMNS})  # none seen from outside
        paths = write_measure_folder(
            out,
            self.requests,
            steps,
            self.timeseries,
            self.summary,
            self.scenario.slo,
            steps,
            self.tokens,
            self.samples,
        )
        keys: tuple[str, ...] = ("mode", "status", "partial", "message", "endpoint", "api")
        # engine_settings: what the user told of the server (--server-setting), for calibrate.
        keys += ("model", "completed", "engine_settings", "num_failed")
        meta = {"format": "servesim-endpoint"} | {k: self.summary.get(k) for k in keys}
        paths.append(out / "run.json")
        paths[-1].write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return paths


def endpoint_run(
    scenario: Scenario, work: RequestArrays, state: RunState, opts: EndpointOptions
) -> EndpointRun:
    """Tables and the ``vllm bench serve`` summary of a finished (or stopped) run."""
    requests = request_frame(state, work)
    tokens = token_frame(state)
    measured = RequestTable.from_frame(requests)
    summary: dict[str, Any] = dict(measured_summary(measured, tokens, scenario.slo))
    target = parse_endpoint(opts.url, opts.api)
    num_failed = int(requests["error"].notna().sum())
    wall_s = (state.end_s or 0.0) - (state.origin_s or 0.0) if state.origin_s else 0.0
    summary.update(
        scenario=scenario.name,
        seed=scenario.seed,
        cost_model="measured",
        policy=scenario.scheduler.kind,
        num_preemptions=0,
        servesim_version=sim.__version__,
        mode="measured",
        status=state.status,
        partial=state.status != "complete",
        message=f"{state.message}; {num_failed} failed" if num_failed else state.message,
        wall_s=wall_s,
        endpoint=target.url,
        api=target.api,
        model=state.model,
        device="http",
        device_name=f"{state.model} at {target.base}",
        engine_settings=told_settings(opts.server_settings),
        num_failed=num_failed,
        failures=failure_counts(requests),
        prompt_tokens=state.prompt_tokens,
        ignore_eos=state.ignore_eos_sent,
        max_concurrency=opts.max_concurrency,
        load=load_of(scenario.workload),  # what validate replays (sim.validation.predict)
        timeout_s=opts.timeout_s,
        retries=opts.retries,
        python=platform.python_version(),
    )
    done = [(i, o) for i, o in enumerate(state.outcomes) if o is not None and o.ok][:5]
    samples = {str(i): o.text[:200] for i, o in done}
    table = with_request_metrics(requests)  # NaN latencies for failed requests
    return EndpointRun(scenario, table, tokens, timeseries_frame(requests, state), summary, samples)
