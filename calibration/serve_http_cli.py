"""``servesim serve SCENARIO``: the command line of the reference HTTP server.

Registering the command imports neither torch nor aiohttp; running it builds
the scenario's calibration model and engine (``calibration.online``) and
serves it with ``calibration.http_server`` until Ctrl-C or SIGTERM. With
``--port 0`` a free port is picked; the first line printed names the URL.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from sim.errors import ConfigError


async def _serve(app: Any, host: str, port: int, model: str) -> None:
    from aiohttp import web

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


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import torch

        from calibration.http_server import make_app
        from calibration.measure import _DTYPES
        from calibration.online import OnlineEngine
    except ImportError as error:
        raise ConfigError(
            f"servesim serve needs PyTorch and aiohttp ({error}): "
            "pip install -e '.[calibrate,http]'"
        ) from None
    from sim.api import reference_engine_problem
    from sim.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.set or ())
    problem = reference_engine_problem(scenario)
    if problem is None and scenario.async_scheduling:
        # The online engine plans each step after the previous one (no visible_until).
        problem = (
            "engine.async_scheduling: servesim serve schedules synchronously; "
            "set engine.async_scheduling: false"
        )
    if problem is not None:
        raise ConfigError(problem)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available here")
    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    dtype = _DTYPES[args.dtype or ("fp32" if args.device == "cpu" else "bf16")]
    engine = OnlineEngine(scenario, dtype, torch.device(args.device), args.threads)
    engine.start()
    try:
        asyncio.run(
            _serve(make_app(engine, scenario.model.name), args.host, args.port, scenario.model.name)
        )
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
    print("servesim serve: stopped", flush=True)
    return 0


def add_parsers(subparsers: Any) -> None:
    """Register ``serve``."""
    serve = subparsers.add_parser(
        "serve",
        help="serve a scenario's model on the reference engine as an OpenAI-compatible server",
    )
    serve.add_argument(
        "scenario",
        help="scenario YAML (model, scheduler, KV pool), e.g. scenarios/validate_tiny_cpu.yaml",
    )
    serve.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field")
    serve.add_argument("--host", default="127.0.0.1", help="(default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="(default 8000; 0 = any free port)")
    serve.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    serve.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="default: fp32 on cpu")
    serve.add_argument("--threads", type=int, default=1, help="torch threads on CPU (default 1)")
    serve.set_defaults(handler=_cmd_serve)
