"""Session 13: a multiplier fit that ends at its search limit is refused in one line
(the runs' best lies beyond the box: the coefficient is not identified); a run that
names no model asks for one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim import api
from sim.cli import main
from sim.cost.fitted import FitParameters, FittedCost
from sim.scenario import load_scenario
from sim.validation.fit import FitRun, Target, fit
from sim.validation.runs import REQUEST_COLUMNS, ImportedRun
from tests.cli_errors import one_line_error
from tests.test_fit_cli import SCENARIO, calibrate

# Prefill 100 times the base's price: beyond the multipliers' limit (x20).
BEYOND = FitParameters(prefill_multiplier=100.0)


def measured(
    tmp_path: Path, params: FitParameters, meta: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    """SCENARIO's file and an imported run ('meta': ``meta``) 'measured' on it with
    ``params``."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    result = api.run(path, wrap_cost=lambda base: FittedCost(base, params))
    run = ImportedRun(
        result.requests[list(REQUEST_COLUMNS)], meta or {"format": "test", "model": "tiny"}
    )
    run.write(tmp_path / "run")
    return path, tmp_path / "run"


def test_a_multiplier_fit_at_its_limit_is_refused_naming_the_term(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, run = measured(tmp_path, BEYOND)
    out = tmp_path / "fit.json"
    argv = calibrate("--from-run", str(run), "--scenario", str(scenario), "--out", str(out),
                     "--free", "prefill_multiplier", "--max-evals", "30",
                     "--no-cross-validation")  # fmt: skip
    message = one_line_error(capsys, argv)
    assert "prefill_multiplier" in message and "not identified" in message, message
    assert "limit" in message, message
    assert not out.exists()  # no artifact whose figure is the box's edge


def test_a_fit_inside_its_limits_names_nothing_at_them(tmp_path: Path) -> None:
    plain = load_scenario(measured(tmp_path, FitParameters())[0])
    inside = FitParameters(prefill_multiplier=2.0)
    result = api.run(plain, wrap_cost=lambda base: FittedCost(base, inside))
    run = FitRun("r", plain, result.requests, api.cost_model_for(plain))
    outcome = fit([run], [Target(0)], ("prefill_multiplier",), max_evaluations=30)
    assert outcome.at_limit == ()
    assert outcome.params.prefill_multiplier == pytest.approx(2.0, rel=0.05)


def test_a_run_that_names_no_model_asks_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, run = measured(tmp_path, FitParameters(), meta={"format": "test"})
    out = tmp_path / "fit.json"
    argv = calibrate("--from-run", str(run), "--scenario", str(scenario), "--out", str(out),
                     "--free", "decode_multiplier", "--max-evals", "4",
                     "--no-cross-validation")  # fmt: skip
    message = one_line_error(capsys, argv)
    assert "names no model" in message and "--assume-model" in message, message
    assert not out.exists()
    # Said, the fit goes on; another model said is refused as a recorded one is.
    assert main([*argv, "--assume-model", "tiny"]) == 0
    assert "not --model tiny" in one_line_error(capsys, [*argv, "--assume-model", "gpt2"])
