"""``measure --endpoint`` before and around the clock: model, tokenizer, test request, sending.

Each test serves a tiny aiohttp application in the test's own event loop
(``aiohttp.test_utils.TestServer`` on a free localhost port, no network) whose
handlers record what the client sent, and calls the step of
``sim.validation.endpoint`` it is about: the model lookup, the tokenize probe,
the 1-token test request, the sending loop (arrival times, the concurrency
bound, the duration limit) and the Ctrl-C path of ``run_endpoint``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sim.errors import ConfigError
from sim.validation import endpoint
from sim.validation.endpoint import Api, EndpointOptions, Outcome, RunState, Target, run_endpoint
from sim.validation.endpoint_prompts import Prompt
from sim.workload.generate import RequestArrays

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Test = Callable[[aiohttp.ClientSession, Target], Awaitable[Any]]


def serve(routes: Mapping[tuple[str, str], Handler], test: Test, api: Api = "completions") -> Any:
    """Run ``test`` against an app with ``routes`` ((method, path) -> handler)."""
    app = web.Application()
    for (method, path), handler in routes.items():
        app.router.add_route(method, path, handler)

    async def go() -> Any:
        async with TestServer(app) as server, aiohttp.ClientSession() as session:
            base = str(server.make_url("")).rstrip("/")
            return await test(session, Target(base, api))

    return asyncio.run(go())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def models_answer(*ids: str, status: int = 200) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        if status != 200:
            return web.Response(status=status)
        return web.json_response({"object": "list", "data": [{"id": i} for i in ids]})

    return handler


async def stream(request: web.Request, pieces: int) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(pieces):
        await response.write(b'data: {"choices": [{"index": 0, "text": "x"}]}\n\n')
    await response.write(b"data: [DONE]\n\n")
    return response


# --- the model --------------------------------------------------------------------------


def find_model(routes: dict[tuple[str, str], Handler], model: str | None) -> str:
    async def test(session: aiohttp.ClientSession, target: Target) -> str:
        return await endpoint._models(session, target, model)

    return str(serve(routes, test))


def test_the_first_listed_model_unless_one_is_named() -> None:
    listed = {("GET", "/v1/models"): models_answer("a/b", "c")}
    assert find_model(listed, None) == "a/b"
    assert find_model(listed, "c") == "c"
    assert find_model(listed, "not-listed") == "not-listed"  # the server will say if it minds


def test_no_model_list_needs_the_option() -> None:
    missing = {("GET", "/v1/models"): models_answer(status=404)}
    assert find_model(missing, "m") == "m"
    with pytest.raises(ConfigError) as error:
        find_model(missing, None)
    message = str(error.value)
    assert message.endswith(": GET /v1/models answered 404; pass --model")
    assert message.startswith("--endpoint http://127.0.0.1:") and "\n" not in message


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda r: web.Response(text="<html>"), "GET /v1/models failed (JSONDecodeError"),
        (lambda r: web.Response(text='{"data": [{"id": "plain"}]}'), None),
        (lambda r: web.json_response({"data": []}), "/v1/models lists no model; pass --model"),
        (lambda r: web.json_response({"data": [{"id": ""}]}), "lists no model"),
        (lambda r: web.json_response({"other": 1}), "lists no model"),
        (lambda r: web.json_response([1, 2]), "GET /v1/models failed (AttributeError"),
    ],
)
def test_a_useless_model_list_is_one_line(
    answer: Callable[[web.Request], web.Response], message: str | None
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return answer(request)

    routes: dict[tuple[str, str], Handler] = {("GET", "/v1/models"): handler}
    if message is None:  # JSON sent as text/plain is still read
        assert find_model(routes, None) == "plain"
        return
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as error:
        find_model(routes, None)
    assert "\n" not in str(error.value)


def test_an_unreachable_server_is_one_line() -> None:
    port = closed_port()

    async def go() -> str:
        async with aiohttp.ClientSession() as session:
            return await endpoint._models(session, Target(f"http://127.0.0.1:{port}", "chat"), "m")

    with pytest.raises(ConfigError) as error:
        asyncio.run(go())
    message = str(error.value)
    assert message.startswith(f"--endpoint http://127.0.0.1:{port}: cannot reach the server (")
    assert "\n" not in message


# --- the tokenize probe -------------------------------------------------------------------


def counter_of(answer: Callable[[dict[str, Any]], web.Response] | None, api: Api) -> Any:
    """(the counter's results for "hello" and "ab", the bodies the server saw), or None."""
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        assert answer is not None
        return answer(body)

    routes = {} if answer is None else {("POST", "/tokenize"): handler}

    async def test(session: aiohttp.ClientSession, target: Target) -> Any:
        count = await endpoint._counter(session, target, "m", 30.0)
        if count is None:
            return None
        return [await count("hello"), await count("ab")], seen

    return serve(routes, test, api)


def test_tokenize_counts_from_count_or_from_the_token_list() -> None:
    by_count = counter_of(
        lambda b: web.json_response({"count": len(b["prompt"]) + 1}), "completions"
    )
    assert by_count[0] == [6, 3]
    by_tokens = counter_of(
        lambda b: web.json_response({"tokens": list(range(len(b["prompt"])))}), "completions"
    )
    assert by_tokens[0] == [5, 2]


def test_tokenize_gets_the_body_of_the_api() -> None:
    def chat_count(body: dict[str, Any]) -> web.Response:
        return web.json_response({"count": len(body["messages"][0]["content"]) + 3})

    counts, seen = counter_of(chat_count, "chat")
    assert counts == [8, 5]  # the content's characters + a 3-token template
    assert seen[0] == {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    _, plain = counter_of(lambda b: web.json_response({"count": 1}), "completions")
    assert plain[0] == {"model": "m", "prompt": "hello"}


@pytest.mark.parametrize(
    "answer",
    [
        None,  # no route: 404
        lambda b: web.Response(status=500),
        lambda b: web.json_response({"unexpected": 1}),
        lambda b: web.Response(text="not json"),
        lambda b: web.json_response({"tokens": 7}),
    ],
)
def test_without_a_working_tokenize_the_prompts_are_approximate(answer: Any) -> None:
    assert counter_of(answer, "completions") is None


# --- the 1-token test request ----------------------------------------------------------------


def probe(refuse_ignore_eos: bool, status: int = 200, ignore_eos: bool = True) -> Any:
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        if status != 200 or (refuse_ignore_eos and "ignore_eos" in body):
            return web.Response(status=status if status != 200 else 400, text="refused")
        return await stream(request, 1)

    async def test(session: aiohttp.ClientSession, target: Target) -> dict[str, Any]:
        opts = EndpointOptions(url=target.base, ignore_eos=ignore_eos)
        return await endpoint._extra_fields(session, target, "m", opts)

    try:
        return serve({("POST", "/v1/completions"): handler}, test), seen
    except ConfigError as error:
        return error, seen


def test_ignore_eos_is_sent_when_the_server_takes_it() -> None:
    extra, seen = probe(refuse_ignore_eos=False)
    assert extra == {"ignore_eos": True} and len(seen) == 1
    assert seen[0]["max_tokens"] == 1 and seen[0]["prompt"] == "hello" and seen[0]["stream"]


def test_a_server_that_refuses_ignore_eos_is_asked_again_without_it() -> None:
    extra, seen = probe(refuse_ignore_eos=True)
    assert extra == {} and [("ignore_eos" in b) for b in seen] == [True, False]


def test_no_ignore_eos_asked_for_sends_one_probe_without_it() -> None:
    extra, seen = probe(refuse_ignore_eos=True, ignore_eos=False)
    assert extra == {} and len(seen) == 1 and "ignore_eos" not in seen[0]


def test_a_probe_that_fails_both_ways_stops_the_run() -> None:
    error, seen = probe(refuse_ignore_eos=False, status=503)
    assert isinstance(error, ConfigError) and len(seen) == 2
    assert str(error).endswith("a 1-token test request failed (HTTP 503: refused)")


def test_a_probe_with_no_answer_is_not_asked_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    async def no_answer(session: Any, url: str, api: Api, body: dict[str, Any], *a: Any) -> Outcome:
        calls.append(body)
        return Outcome(error="cannot connect: refused")  # no HTTP status: nothing answered

    monkeypatch.setattr(endpoint, "stream_request", no_answer)
    target = Target("http://h", "completions")
    with pytest.raises(ConfigError, match=r"test request failed \(cannot connect: refused\)"):
        asyncio.run(endpoint._extra_fields(None, target, "m", EndpointOptions(url="http://h")))  # type: ignore[arg-type]
    assert len(calls) == 1


# --- sending: arrival times, the concurrency bound, the duration limit ---------------------


def arrivals(times_s: list[float], output_tokens: int = 2) -> RequestArrays:
    n = len(times_s)
    return RequestArrays(
        np.asarray(times_s, dtype=np.float64),
        np.full(n, 5, dtype=np.int64),
        np.full(n, output_tokens, dtype=np.int64),
    )


def send_all(
    work: RequestArrays, handler: Handler, api: Api = "completions", **options: Any
) -> RunState:
    state = RunState(len(work.arrival_s), model="m")
    state.prompts = [Prompt(f"p{i}", 5, exact=True) for i in range(len(work.arrival_s))]
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"

    async def test(session: aiohttp.ClientSession, target: Target) -> RunState:
        opts = EndpointOptions(url=target.base, progress=False, **options)
        await endpoint._send_all(session, target, work, {"ignore_eos": True}, opts, state)
        return state

    return serve({("POST", path): handler}, test, api)


class Gate:
    """Holds each request until ``bound`` are in flight (or all have come): the most
    the server ever holds at once is then exactly what the client lets through."""

    def __init__(self, bound: int, total: int) -> None:
        self.bound, self.total = bound, total
        self.in_flight = self.started = self.most = 0
        self.changed = asyncio.Condition()
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        async with self.changed:
            self.in_flight += 1
            self.started += 1
            self.most = max(self.most, self.in_flight)
            self.changed.notify_all()
            await self.changed.wait_for(
                lambda: self.in_flight >= self.bound or self.started == self.total
            )
        response = await stream(request, 2)
        async with self.changed:
            self.in_flight -= 1
            self.changed.notify_all()
        return response


@pytest.mark.parametrize(("bound", "most"), [(1, 1), (2, 2), (3, 3), (256, 6)])
def test_no_more_requests_in_flight_than_the_bound(bound: int, most: int) -> None:
    gate = Gate(bound, total=6)
    state = send_all(arrivals([0.0] * 6), gate.handle, max_concurrency=bound)
    assert gate.most == most and gate.started == 6
    assert all(out is not None and out.ok for out in state.outcomes)
    assert state.status == "complete" and state.end_s is not None


def test_requests_are_not_sent_before_their_arrival_time() -> None:
    gate = Gate(1, total=3)
    times = [0.0, 0.05, 0.1]
    state = send_all(arrivals(times), gate.handle)
    assert state.origin_s is not None
    for arrival, out in zip(times, state.outcomes, strict=True):
        assert out is not None and out.sent_s is not None
        assert out.sent_s - state.origin_s >= arrival  # sleeps until then, never early


def test_bodies_carry_each_requests_prompt_and_output_length() -> None:
    gate = Gate(1, total=3)
    work = RequestArrays(
        np.zeros(3), np.full(3, 5, dtype=np.int64), np.asarray([3, 1, 2], dtype=np.int64)
    )
    send_all(work, gate.handle)
    by_prompt = {b["prompt"]: b for b in gate.bodies}
    assert {p: b["max_tokens"] for p, b in by_prompt.items()} == {"p0": 3, "p1": 1, "p2": 2}
    assert all(b["ignore_eos"] is True and b["model"] == "m" for b in gate.bodies)


def test_chat_requests_go_to_the_chat_route_as_messages() -> None:
    gate = Gate(1, total=2)

    async def chat(request: web.Request) -> web.StreamResponse:
        gate.bodies.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n')
        await response.write(b'data: {"choices": [{"delta": {"content": "y"}}]}\n\n')
        await response.write(b"data: [DONE]\n\n")
        return response

    state = send_all(arrivals([0.0, 0.0]), chat, api="chat")
    assert sorted(b["messages"][0]["content"] for b in gate.bodies) == ["p0", "p1"]
    assert all("prompt" not in b for b in gate.bodies)
    assert all(o is not None and o.ok and o.text == "y" for o in state.outcomes)


def test_the_duration_limit_cancels_what_is_pending() -> None:
    async def first_only(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["prompt"] != "p0":
            await asyncio.sleep(3600)  # never answers: cut by the limit
        return await stream(request, 1)

    state = send_all(arrivals([0.0, 0.0, 30.0]), first_only, max_duration_s=0.3)
    assert state.status == "time limit" and state.message == "stopped at the 0.3 s limit"
    first, second, third = state.outcomes
    assert first is not None and first.ok
    assert second is not None and not second.ok and second.sent_s is not None  # in flight
    assert third is None  # its arrival (30 s) never came: never sent


# --- Ctrl-C ------------------------------------------------------------------------------------


def test_ctrl_c_before_sending_has_nothing_to_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    async def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(endpoint, "_main", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_endpoint(arrivals([0.0]), EndpointOptions(url="http://h", progress=False))


def test_ctrl_c_while_sending_keeps_the_run_as_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    async def interrupted(
        work: Any, opts: Any, state: RunState, seed: int, streams: Any = None
    ) -> None:
        state.origin_s = 100.0
        state.outcomes[0] = Outcome(sent_s=100.0, chunk_s=[100.5], done=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(endpoint, "_main", interrupted)
    state = run_endpoint(arrivals([0.0, 1.0]), EndpointOptions(url="http://h", progress=False))
    assert state.status == "interrupted"
    assert state.message == "interrupted (Ctrl-C): kept what completed"
    assert state.end_s is not None and state.outcomes[0] is not None and state.outcomes[0].ok
    assert state.outcomes[1] is None


def test_a_run_state_starts_with_one_empty_slot_per_request() -> None:
    state = RunState(3, message="sent 3 requests")
    assert state.outcomes == [None, None, None] and state.status == "complete"
    assert state.prompt_tokens == "approximate" and not state.ignore_eos_sent


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_concurrency": 0}, "--max-concurrency must be >= 1, got 0"),
        ({"timeout_s": -1.0}, "--timeout-s must be > 0"),
        ({"retries": -1}, "--retries >= 0"),
        ({"url": "http://h/v1/chat/completions", "api": "completions"}, "--api says"),
    ],
)
def test_bad_options_are_refused_before_any_connection(
    options: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never(*args: Any) -> None:
        raise AssertionError("nothing may run")

    monkeypatch.setattr(endpoint, "_main", never)
    with pytest.raises(ConfigError, match=message):
        run_endpoint(arrivals([0.0]), EndpointOptions(**{"url": "http://h", **options}))
