"""An option given in a mode that never reads it is refused; whether it was given is
read against its parser's default (``sim.cli.options_given``), which is typed once,
in ``add_argument``: a changed default needs no second edit in a refusal."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import calibration.cli
import calibration.serve_cli
import sim.cli.endpoint_options
import sim.cli.fit
import sim.cli.serve
from sim.cli import options_given
from sim.errors import ConfigError
from sim.scenario import load_scenario

CHAT = Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml"
CHANGED = "a changed default"


def _serve_simulate(args: argparse.Namespace) -> None:
    args.scenario = str(CHAT)
    sim.cli.serve._simulated_engine(args, load_scenario(CHAT))


# Each refusal: the module and name of the function adding the options it reads, and
# a call of it.
REFUSALS: list[tuple[Any, str, Callable[[argparse.Namespace], object]]] = [
    (calibration.cli, "add_torch_arguments", lambda a: calibration.cli.refuse_torch_options(a, "")),
    (
        calibration.cli,
        "_add_arguments",
        lambda a: calibration.cli._refuse_unread(a, ("--grid", "--fit", "--seed"), ""),
    ),
    (sim.cli.fit, "add_arguments", sim.cli.fit.refuse_from_run_options),
    (
        sim.cli.endpoint_options,
        "add_endpoint_arguments",
        sim.cli.endpoint_options.refuse_endpoint_options,
    ),
    (
        calibration.serve_cli,
        "_common",
        lambda a: calibration.serve_cli._refuse_sampling_options(a, ""),
    ),
    (sim.cli.serve, "_torch_arguments", _serve_simulate),
]


def _parser(add: Callable[[argparse.ArgumentParser], object]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add(parser)
    return parser


def _defaults(parser: argparse.ArgumentParser) -> argparse.Namespace:
    return argparse.Namespace(**{a.dest: parser.get_default(a.dest) for a in parser._actions})


@pytest.mark.parametrize(("module", "name", "refuse"), REFUSALS)
def test_a_changed_default_is_not_an_option_given(
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    name: str,
    refuse: Callable[[argparse.Namespace], object],
) -> None:
    add = getattr(module, name)  # the module's function by its name: the one patched

    def add_changed(parser: argparse.ArgumentParser) -> None:
        add(parser)
        parser.set_defaults(**{a.dest: CHANGED for a in parser._actions if a.option_strings})

    monkeypatch.setattr(module, name, add_changed)
    # Before: each refusal compared with its own copy of the defaults, and refused these.
    refuse(_defaults(_parser(add_changed)))


def test_options_given_names_the_options_off_their_defaults_in_order() -> None:
    def add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")  # a positional: no option
        parser.add_argument("-q", "--quiet", action="store_true")
        parser.add_argument("--rate", type=float, default=1.0)
        parser.add_argument("--seed", type=int)

    args = _defaults(_parser(add))
    assert options_given(args, add) == {}
    args.quiet, args.rate, args.seed, args.name = True, 2.0, 0, "x"
    assert options_given(args, add) == {"--quiet": True, "--rate": 2.0, "--seed": 0}
    assert options_given(args, add, ("--seed", "--rate")) == {"--rate": 2.0, "--seed": 0}
    del args.rate  # an option the namespace lacks (a parser without it) is not given
    assert list(options_given(args, add)) == ["--quiet", "--seed"]


def test_options_given_still_refuses_each_option_at_the_real_defaults() -> None:
    args = _defaults(_parser(calibration.cli.add_torch_arguments))
    args.threads = 2
    with pytest.raises(ConfigError, match=r"^--threads 2: no model runs in this process"):
        calibration.cli.refuse_torch_options(args, "why")
