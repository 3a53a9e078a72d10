"""``servesim serve``: a scenario's engine behind vLLM's OpenAI-compatible HTTP server.

The server (``sim.openai``) is torch-free; the engine behind it is chosen in
one place, ``_engine``: the reference engine (the scenario's model in PyTorch,
built by ``calibration.serve_cli``, which alone imports torch), or with
``--simulate`` the scenario's replica (or its cluster's, behind its router), each
step taking the time its cost model predicts. It serves until Ctrl-C or SIGTERM;
the first line printed names the URL (``--port 0``: a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

import numpy as np

from sim.api import engine_for
from sim.api.build import cluster_for
from sim.cli import (
    HELP,
    Subparsers,
    add_listen_arguments,
    add_scenario_arguments,
    has_calibration,
    options_given,
)
from sim.cost.label import cost_model_tag
from sim.errors import ConfigError
from sim.metrics.invariants import INVARIANTS, LiveChecks
from sim.openai.tokenizer import ByteTokenizer
from sim.scenario import load_scenario
from sim.serving.realtime import SimulatedEngine
from sim.serving.routed import RoutedEngines
from sim.serving.router import make_router

if TYPE_CHECKING:
    from aiohttp import web

    from sim.scenario import Scenario
    from sim.serving.stream import OnlineBackend


def _engine(args: argparse.Namespace, scenario: Scenario) -> OnlineBackend:
    """The one place the engine behind the server is chosen and built (not started)."""
    if args.simulate:
        return _simulated_engine(args, scenario)
    if not has_calibration():
        raise ConfigError(
            "servesim serve: the reference engine is in the calibration package, not installed here"
        )
    from calibration.serve_cli import reference_engine

    return reference_engine(args, scenario)


def _simulated_engine(args: argparse.Namespace, scenario: Scenario) -> OnlineBackend:
    """``--simulate``: the scenario's replica in wall-clock time, its cost model named on stderr."""

    torch_flags = list(options_given(args, _torch_arguments))  # none in a sim-only install
    if torch_flags:
        raise ConfigError(
            f"{', '.join(torch_flags)}: set the reference engine's model; "
            "servesim serve --simulate runs no model"
        )
    cluster = scenario.cluster
    if cluster is not None:
        refused = [
            name
            for name, given in (
                ("cluster.lockstep", cluster.lockstep),
                ("cluster.disaggregation", cluster.disaggregation is not None),
                ("cluster.router: central_queue", cluster.router == "central_queue"),
            )
            if given
        ]
        if refused:
            raise ConfigError(
                f"{refused[0]}: servesim serve --simulate routes requests over replicas "
                "of one pool (a router other than central_queue), nothing else"
            )
    config = engine_for(scenario)
    way_in_ms = config.frontend.way_in_s_per_request * 1e3
    replicas = "" if cluster is None else f", {cluster.num_replicas} replicas ({cluster.router})"
    print(
        f"servesim serve --simulate: {scenario.model.name} on {scenario.hardware.name}"
        f"{replicas}, steps priced by {cost_model_tag(config.cost.label)}: {config.cost.label}; "
        f"way in {way_in_ms:g} ms a request from its receipt (frontend.way_in_s_per_request)",
        file=sys.stderr,
        flush=True,
    )
    # Each replica keeps the run invariants as it serves (an offline run: once it ends).
    if cluster is None:
        return SimulatedEngine(config, check=LiveChecks())

    # The router's draws (power_of_two) from the scenario seed, as a run's.
    layout = cluster_for(scenario, np.random.default_rng(scenario.seed))
    assert layout is not None
    engines = [SimulatedEngine(config, check=LiveChecks()) for _ in range(cluster.num_replicas)]
    router = make_router(cluster.router, layout.rng)
    return RoutedEngines(engines, router, config.core.block_size_tokens)


def app_for(engine: OnlineBackend, scenario: Scenario, simulate: bool = False) -> web.Application:
    """The HTTP server around ``engine``: the scenario's model name and vocabulary,
    whether its policy schedules by priority (else a ``priority`` other than 0 is
    refused), and with ``simulate`` the invariants ``/metrics`` counts."""
    from sim.openai.server import make_app  # aiohttp: the http extra (_cmd_serve says so)

    tokenizer = ByteTokenizer(scenario.model.vocab_size)
    priority = scenario.scheduler.kind == "priority"
    checked = INVARIANTS if simulate else ()
    return make_app(
        engine, scenario.model.name, tokenizer, priority_scheduling=priority, invariants=checked
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from sim.openai.server import serve
    except ImportError as error:
        raise ConfigError(
            f"servesim serve needs aiohttp and prometheus-client ({error}): "
            "pip install -e '.[http]'"
        ) from None

    scenario = load_scenario(args.scenario, args.set or ())
    engine = _engine(args, scenario)
    engine.start()
    try:
        model = scenario.model.name
        app = app_for(engine, scenario, args.simulate)
        asyncio.run(serve(app, args.host, args.port, model))
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
    print("servesim serve: stopped", flush=True)
    return 0


def _torch_arguments(parser: argparse.ArgumentParser) -> None:
    """The reference engine's ``--device``, ``--dtype``, ``--threads`` (calibration's own)."""
    if not has_calibration():
        return  # a sim-only install: no reference engine to configure
    from calibration.cli import add_torch_arguments

    add_torch_arguments(parser)


def add_parsers(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("serve", help=HELP["serve"])
    add_scenario_arguments(parser, "scenario YAML file, e.g. scenarios/validate_tiny_cpu.yaml")
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="serve the scenario's predicted GPU: its replica as the simulator runs it, "
        "each step taking the time the cost model predicts (no model, no torch)",
    )
    _torch_arguments(parser)
    add_listen_arguments(parser, 8000)
    parser.set_defaults(handler=_cmd_serve)
