"""The options several subcommands share say the same thing everywhere, and their
examples work.

``--set KEY=VALUE`` and ``--slo NAME=MS`` are declared once (``sim.cli``) for every
subcommand that takes them; an example in their help is a line a user may copy, so
it must run: each ``--set`` example overrides chat.yaml into a valid scenario, and
each ``--slo`` example parses into one target.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

import sim.cli as cli
from sim.metrics.slo_targets import parse_targets
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "scenarios" / "chat.yaml"


def _options(command: str) -> dict[str, argparse.Action]:
    parser = cli.build_parser(command, lazy=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        flag: action for action in sub.choices[command]._actions for flag in action.option_strings
    }


WITH_SET = ["run", "capacity", "plan", "cost-breakdown", "serve"]
WITH_SLO = ["capacity", "plan"]


@pytest.mark.parametrize("command", WITH_SET)
def test_each_set_example_overrides_a_scenario_into_a_valid_one(command: str) -> None:
    text = _options(command)["--set"].help or ""
    examples = re.findall(r"--set (\S+=\S+)", text)
    assert examples, f"{command} --set: no example in {text!r}"
    for example in examples:
        load_scenario(CHAT, [example])  # a ConfigError names the bad key


def test_every_set_option_says_the_same() -> None:
    helps = {command: _options(command)["--set"].help for command in WITH_SET}
    assert len(set(helps.values())) == 1, helps


@pytest.mark.parametrize("command", WITH_SLO)
def test_each_slo_example_is_one_target_and_the_metrics_are_named(command: str) -> None:
    text = _options(command)["--slo"].help or ""
    examples = re.findall(r"e\.g\. (\w+=\d+)", text)
    assert examples and all(len(parse_targets([e])) == 1 for e in examples)
    # The metric names a target may use are listed, so a user need not guess them.
    assert all(metric in text for metric in ("ttft", "tpot", "itl", "e2el"))
