"""The command lines around the HTTP pieces: ``servesim serve`` and ``measure/validate``'s checks.

What is refused before a model is built or a request is sent (one line,
exit code 2), and ``servesim serve``'s server loop itself: it prints the URL
it listens on (``--port 0``: a free port), serves, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cli_errors import one_line_error

from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "scenarios" / "validate_tiny_cpu.yaml"


# --- servesim serve -----------------------------------------------------------------------


def test_serve_refuses_async_scheduling(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    err = one_line_error(capsys, ["serve", str(TINY), "--set", "engine.async_scheduling=true"])
    assert err == (
        "engine.async_scheduling: servesim serve schedules synchronously; "
        "set engine.async_scheduling: false"
    )


def test_serve_refuses_zero_threads(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    err = one_line_error(capsys, ["serve", str(TINY), "--threads", "0"])
    assert err == "--threads must be >= 1, got 0"


def test_serve_refuses_cuda_where_there_is_none(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot happen")
    err = one_line_error(capsys, ["serve", str(TINY), "--device", "cuda"])
    assert err == "--device cuda: no CUDA device is available here"


def test_serve_listens_prints_its_url_and_stops_on_sigterm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sim.openai.server import serve

    async def pong(request: web.Request) -> web.Response:
        return web.Response(text="pong")

    app = web.Application()
    app.router.add_get("/ping", pong)

    async def go() -> tuple[str, str]:
        server = asyncio.create_task(serve(app, "127.0.0.1", 0, "org/m"))
        printed = ""
        for _ in range(1000):
            printed += capsys.readouterr().out
            if printed or server.done():
                break
            await asyncio.sleep(0.01)
        assert not server.done(), server.exception()
        # Printed, so the SIGTERM handler is in place (no await between the two).
        url = printed.split(" on ", 1)[1].split(" ", 1)[0]
        async with aiohttp.ClientSession() as session, session.get(url + "/ping") as answer:
            body = await answer.text()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(server, 10)  # returns: the handler set the stop event
        return printed, body

    printed, body = asyncio.run(go())
    assert printed.startswith("servesim serve: org/m on http://127.0.0.1:")
    assert printed.rstrip().endswith("(Ctrl-C stops)") and body == "pong"
    port = int(printed.split("http://127.0.0.1:", 1)[1].split(" ", 1)[0])
    assert port > 0  # --port 0 picked a free one


def test_serve_on_a_taken_port_names_the_port() -> None:
    from sim.openai.server import serve

    async def go() -> None:
        holder = web.AppRunner(web.Application())
        await holder.setup()
        site = web.TCPSite(holder, "127.0.0.1", 0)
        await site.start()
        port = holder.addresses[0][1]
        try:
            await serve(web.Application(), "127.0.0.1", port, "m")
        finally:
            await holder.cleanup()

    with pytest.raises(ConfigError, match=r"^--port \d+: cannot listen on 127\.0\.0\.1 \("):
        asyncio.run(go())


# --- measure and validate: checked before anything runs -------------------------------------


def test_a_duration_limit_must_be_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["measure", str(TINY), "--out", str(tmp_path / "o"), "--max-duration-s", "0"]
    assert one_line_error(capsys, argv) == "--max-duration-s must be > 0 seconds, got 0"
    assert not (tmp_path / "o").exists()


def test_validate_takes_one_or_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [x for name in ("a", "b", "c") for x in ("--measured", str(tmp_path / name))]
    argv = ["validate", str(TINY), "--out", str(tmp_path / "v"), *runs]
    assert one_line_error(capsys, argv) == "--measured: give one or two measured runs"


def test_an_endpoint_refuses_prefix_groups_it_cannot_send(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Closed loops are measured as streams now; shared prefixes are not (the
    endpoint's prompts share none), so such a workload is refused before any request."""
    shared = ROOT / "scenarios" / "prefix_caching.yaml"
    # Port 9 (discard) is never asked: the workload is refused first.
    argv = ["measure", str(shared), "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path)]
    assert one_line_error(capsys, argv).startswith(
        "workload.prefix_groups: --endpoint sends prompts that share no prefix"
    )


def test_a_malformed_endpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["measure", str(TINY), "--endpoint", "localhost:8000", "--out", str(tmp_path / "o")]
    err = one_line_error(capsys, argv)
    assert err == "--endpoint 'localhost:8000': expected http://HOST:PORT[/v1[/completions]]"


def test_endpoint_options_reach_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim.validation import endpoint

    seen: list[endpoint.EndpointOptions] = []

    def stop_here(
        work: object, opts: endpoint.EndpointOptions, seed: int = 0, streams: object = None
    ) -> None:
        seen.append(opts)
        raise ConfigError("stopped by the test")

    monkeypatch.setattr(endpoint, "run_endpoint", stop_here)
    argv = [
        "measure",
        str(TINY),
        "--out",
        str(tmp_path / "o"),
        "--endpoint",
        "http://h:1/v1/chat/completions",
        "--model",
        "org/m",
        "--max-concurrency",
        "3",
        "--timeout-s",
        "7.5",
        "--retries",
        "2",
        "--no-ignore-eos",
        "--max-duration-s",
        "9",
        "-q",
    ]
    assert one_line_error(capsys, argv) == "stopped by the test"
    (opts,) = seen
    assert (opts.url, opts.model, opts.api) == ("http://h:1/v1/chat/completions", "org/m", None)
    assert (opts.max_concurrency, opts.timeout_s, opts.retries) == (3, 7.5, 2)
    assert (opts.ignore_eos, opts.max_duration_s, opts.progress) == (False, 9.0, False)


# --- a missing optional dependency is one line naming the extra ----------------------------


def test_an_endpoint_without_aiohttp_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "aiohttp", None)  # import aiohttp -> ImportError
    argv = ["measure", str(TINY), "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path)]
    assert one_line_error(capsys, argv) == "--endpoint needs aiohttp: pip install -e '.[http]'"


def test_serve_without_torch_names_the_extras(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    err = one_line_error(capsys, ["serve", str(TINY)])
    assert err.startswith("servesim serve needs PyTorch for the reference engine (")
    assert err.endswith("): pip install -e '.[calibrate,http]'")


def test_serve_refuses_what_the_reference_engine_cannot_run_before_building_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    import calibration.reference_engine

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("no engine may be built for a refused scenario")

    monkeypatch.setattr(calibration.reference_engine, "OnlineEngine", never)
    sets = ["--set", "engine.enable_prefix_caching=true"]
    err = one_line_error(capsys, ["serve", str(TINY), *sets])
    assert err.startswith("engine.enable_prefix_caching")
