"""``servesim lab``: the queueing lab, a local page that reruns the simulator on each move."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

from sim.cli import HELP, Subparsers, add_listen_arguments
from sim.errors import ConfigError
from sim.lab.controls import SOURCE, scenario_for
from sim.lab.runs import run_doc
from sim.scenario import read_yaml


def _cmd_lab(args: argparse.Namespace) -> int:
    try:  # aiohttp: an optional extra (.[lab])
        from sim.lab.server import LAB, make_app, serve
    except ImportError as error:  # aiohttp missing
        raise ConfigError(
            f"servesim lab needs aiohttp and plotly ({error}): pip install -e '.[lab]'"
        ) from None

    base_doc = None
    base_dir = Path.cwd()
    if args.scenario is not None:
        base_doc = read_yaml(args.scenario, "scenario")
        base_dir = Path(args.scenario).parent
    app = make_app(base_doc, base_dir)
    lab = app[LAB]
    try:
        scenario = scenario_for(lab.base_doc, base_dir)
    except ConfigError as error:
        raise ConfigError(str(error).replace(SOURCE, str(args.scenario), 1)) from None
    if scenario.workload.kind != "synthetic":
        # The page's load is an arrival rate; a trace or closed loop has none.
        raise ConfigError(
            f"{args.scenario}: workload.kind: servesim lab drives a synthetic workload's "
            f"arrival rate, not a {scenario.workload.kind} one"
        )
    if scenario.workload.max_concurrency is not None:
        # Under a cap the clients set the load: every rate of the knee would pass
        # (no served check applies) and its capacity read as the grid's top rate.
        raise ConfigError(
            f"{args.scenario}: workload.max_concurrency {scenario.workload.max_concurrency}: "
            "servesim lab drives the arrival rate, but under a cap the load is the number "
            "of clients (servesim capacity searches over them); remove workload.max_concurrency"
        )
    # The compiled loop loads (~4 s from numba's cache, ~50 s the first time ever)
    # while the page opens, not on its first move.
    lab.pool.submit(run_doc, lab.base_doc, base_dir)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the way to stop it
        asyncio.run(serve(app, args.host, args.port))
    print("servesim lab: stopped", flush=True)
    return 0


def add_parsers(subparsers: Subparsers) -> None:
    """Register ``lab``."""
    parser = subparsers.add_parser("lab", help=HELP["lab"])
    parser.add_argument(
        "scenario",
        nargs="?",
        default=None,
        help="the scenario the page starts from (default: scenarios/chat.yaml's chat)",
    )
    add_listen_arguments(parser, 8765)
    parser.set_defaults(handler=_cmd_lab)
