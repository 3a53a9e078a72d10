"""``servesim serve``: a scenario's engine behind vLLM's OpenAI-compatible HTTP server.

The server (``sim.openai``, aiohttp) is torch-free; the engine behind it is
built in one place, ``_engine``: the reference engine
(``calibration.reference_engine.OnlineEngine``, the scenario's model in
PyTorch, built by ``calibration.serve_cli.reference_engine``, which alone
imports torch). It serves until Ctrl-C or SIGTERM; with
``--port 0`` a free port is picked, and the first line printed names the URL.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.scenario import Scenario
    from sim.serving.stream import OnlineBackend

HELP = "serve a scenario's model on the reference engine as an OpenAI-compatible server"


def _engine(args: argparse.Namespace, scenario: Scenario) -> OnlineBackend:
    """The one place the engine behind the server is chosen and built (not started)."""
    if importlib.util.find_spec("calibration") is None:
        raise ConfigError(
            "servesim serve: the reference engine is in the calibration package, not installed here"
        )
    from calibration.serve_cli import reference_engine

    return reference_engine(args, scenario)


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from sim.openai.server import make_app, serve
    except ImportError as error:
        raise ConfigError(
            f"servesim serve needs aiohttp and prometheus-client ({error}): "
            "pip install -e '.[http]'"
        ) from None
    from sim.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.set or ())
    engine = _engine(args, scenario)
    engine.start()
    try:
        model = scenario.model.name
        asyncio.run(serve(make_app(engine, model), args.host, args.port, model))
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
    print("servesim serve: stopped", flush=True)
    return 0


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: any free one), refused by argparse in one line."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535 (0: any free one), got {port}")
    return port


def _torch_arguments(parser: argparse.ArgumentParser) -> None:
    """The reference engine's ``--device``, ``--dtype``, ``--threads`` (calibration's own)."""
    if importlib.util.find_spec("calibration") is None:
        return  # a sim-only install: no reference engine to configure
    from calibration.cli import add_torch_arguments

    add_torch_arguments(parser)


def add_parsers(subparsers: Any) -> None:
    """Register ``serve``."""
    parser = subparsers.add_parser("serve", help=HELP)
    parser.add_argument("scenario", help="scenario YAML, e.g. scenarios/validate_tiny_cpu.yaml")
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a scenario field"
    )
    _torch_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="(default 127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, default=8000, help="(default 8000; 0 = any free port)"
    )
    parser.set_defaults(handler=_cmd_serve)
