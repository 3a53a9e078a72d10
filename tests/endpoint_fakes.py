"""Fake OpenAI-compatible servers for the ``--endpoint`` client tests (aiohttp, in a thread).

``FakeServer`` serves ``/v1/models``, optionally ``/tokenize`` (one token per
character plus one BOS) and ``/v1/completions``, whose behaviour for the
i-th measured request (the 1-token preflight probe is answered normally and
not counted) is ``behaviours[i % len(behaviours)]``:

- ``"ok"``: ``max_tokens`` chunks of one character each, a usage chunk, ``[DONE]``;
- ``"merge"``: the tokens two per chunk (usage still counts tokens);
- ``"500"``: HTTP 500;
- ``"close"``: two chunks, then the connection is dropped (no ``[DONE]``);
- ``"hang"``: one chunk, then nothing until the client gives up;

or, with ``script``, exactly the given bytes for every request.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Self

from aiohttp import web


def sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def text_chunk(text: str, reason: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "text": text, "finish_reason": reason}]})


class ThreadedApp:
    """An aiohttp application on a free localhost port, in its own thread and event loop.

    Subclasses say which application (``make_app``); ``with`` starts and stops it.
    """

    shutdown_timeout_s = 60.0  # aiohttp's default

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def make_app(self) -> web.Application:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        pending = asyncio.all_tasks(self.loop)  # handlers of hanging streams
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    async def _serve(self) -> None:
        runner = web.AppRunner(
            self.make_app(), access_log=None, shutdown_timeout=self.shutdown_timeout_s
        )
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.port = runner.addresses[0][1]
        self._stop = asyncio.Event()
        self.ready.set()
        await self._stop.wait()
        await runner.cleanup()


class FakeServer(ThreadedApp):
    """A fake OpenAI-compatible server (see the module's docstring)."""

    shutdown_timeout_s = 0.1

    def __init__(
        self,
        behaviours: tuple[str, ...] = ("ok",),
        tokenize: bool = True,
        script: list[bytes] | None = None,
        models: tuple[str, ...] = ("fake-model",),
        models_status: int = 200,
        reject_ignore_eos: bool = False,
        probe_status: int = 200,
        tokenize_hangs: bool = False,
    ) -> None:
        super().__init__()
        self.tokenize_hangs = tokenize_hangs  # /tokenize never answers
        self.probe_status = probe_status  # the answer to the 1-token preflight request
        self.models = models
        self.models_status = models_status
        self.reject_ignore_eos = reject_ignore_eos  # 400 for bodies with ignore_eos, as OpenAI
        self.behaviours = behaviours
        self.script = script  # if given: every completion streams exactly these bytes
        self.tokenize = tokenize
        self.num_measured = 0
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return self.base_url

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        if self.tokenize:
            app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/completions", self._completions)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        if self.models_status != 200:
            return web.Response(status=self.models_status)
        return web.json_response({"data": [{"id": m} for m in self.models]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.tokenize_hangs:
            await asyncio.sleep(3600)
        return web.json_response({"count": len(body["prompt"]) + 1})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if self.reject_ignore_eos and "ignore_eos" in body:
            return web.Response(status=400, text="Unrecognized request argument: ignore_eos")
        if body["max_tokens"] == 1 and body["prompt"] == "hello":
            if self.probe_status != 200:
                return web.Response(status=self.probe_status, text="no")
            behaviour = "ok"  # the preflight probe
        else:
            behaviour = self.behaviours[self.num_measured % len(self.behaviours)]
            self.num_measured += 1
        if behaviour == "500":
            return web.Response(status=500, text="internal error\nsecond line")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if self.script is not None:
            for part in self.script:
                await response.write(part)
            return response
        n = int(body["max_tokens"])
        if behaviour == "merge":
            for i in range(0, n, 2):
                await response.write(text_chunk("ab"[: min(2, n - i)]))
        else:
            for i in range(n):
                await response.write(text_chunk("x", "length" if i == n - 1 else None))
                if behaviour == "close" and i == 1:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if behaviour == "hang":
                    await asyncio.sleep(3600)
        usage = {"prompt_tokens": len(body["prompt"]) + 1, "completion_tokens": n}
        await response.write(sse({"choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        return response
