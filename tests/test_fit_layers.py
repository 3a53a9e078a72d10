"""Black-box calibration's checks and table, called below the command line.

``servesim calibrate --from-run`` (``sim.cli.fit``) parses and prints; reading the
runs (``fit_runs.replay_runs``), choosing the free parameters
(``identify.free_parameters``) and the coefficient table (``identify.coefficient_table``)
live in ``sim.validation``. These tests call them there, without a parser.
"""

from __future__ import annotations

import pytest

from sim.cost.fitted_cpu import CoefficientInterval
from sim.errors import ConfigError
from sim.hardware.specs import model_preset
from sim.validation.fit import PARAMETERS
from sim.validation.fit_runs import replay_runs
from sim.validation.identify import coefficient_table, free_parameters


def test_replay_runs_refuses_no_runs() -> None:
    with pytest.raises(ConfigError, match=r"^--from-run: no runs given$"):
        replay_runs([], model_preset("tiny"), "cpu-2core", None, "multipliers")


def test_replay_runs_needs_the_hardware() -> None:
    with pytest.raises(ConfigError, match="--from-run needs --hardware"):
        replay_runs(["run"], model_preset("tiny"), None, None, "multipliers")


def test_free_parameters_default_and_refusal_of_another_modes() -> None:
    # Multipliers: all three by default, whatever the runs (none read here).
    assert free_parameters("multipliers", None, []) == PARAMETERS
    assert free_parameters("multipliers", " decode_multiplier, ", []) == ("decode_multiplier",)
    with pytest.raises(ConfigError, match="--free 'per_step_s' with --fit-kind multipliers"):
        free_parameters("multipliers", "per_step_s", [])  # an engine-CPU coefficient
    with pytest.raises(ConfigError, match="choose from"):
        free_parameters("engine-cpu", ",", [])  # names nothing


def test_coefficient_table_in_microseconds() -> None:
    # 2 ms ± 0.1 ms on 10 degrees of freedom: 2000.00 us, 100.00 us, 1800.00 .. 2200.00 us.
    row = CoefficientInterval(
        name="per_step_s",
        value_s=2e-3,
        std_error_s=1e-4,
        low_s=1.8e-3,
        high_s=2.2e-3,
        degrees_of_freedom=10,
    )
    bare = CoefficientInterval(name="non_overlapped_s", value_s=5e-6, degrees_of_freedom=0)
    lines = coefficient_table([row, bare], {"per_token_s": 1.5e-6}, "vllm 0.10 estimate")
    assert lines[2] == (
        "| per_step_s | 2000.00 us | 100.00 us | 1800.00 .. 2200.00 us | "
        "fitted (10 degrees of freedom) |"
    )
    assert lines[3] == "| non_overlapped_s | 5.00 us | n/a | n/a | fitted (0 degrees of freedom) |"
    assert lines[4] == "| per_token_s | 1.50 us | — | — | held: vllm 0.10 estimate |"
    assert len(lines) == 5  # header, rule, two fitted, one held
