"""``servesim validate`` on a run whose arrivals are vLLM's ``queued_ts`` counts the
replay's TTFT and E2EL from its engine's intake (``sim.validation.intake``), as
``benchmarks/public_runs.py`` does: one rule, one home (issue 41).

vLLM stamps ``queued_ts`` when its busy loop drains the input queue, right before
it schedules, so an LLMServingSim run's latencies count from a step start. A
replay puts the request at the engine at the stamp, mid-step, and takes it in at
the next step start: counted from the stamp, its TTFT carries the rest of the step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from intake_runs import STEP_S, run_folder, scenario_doc

from calibration.compare_measured import load_measured, validate
from sim.cli import main
from sim.scenario import scenario_from_dict
from sim.validation.importers import import_run


def test_validate_counts_an_llmservingsim_replay_from_the_engine_intake(tmp_path: Path) -> None:
    run = run_folder(tmp_path / "vllm")
    import_run(run).write(tmp_path / "imported")
    scenario = scenario_from_dict(scenario_doc(tmp_path / "imported" / "trace.csv"), "intake.yaml")
    measured = load_measured(run, assume_device="h100")
    validation = validate(scenario, measured)
    predicted = validation.latencies["predicted: microbenchmarks"].per_request
    # By hand (async scheduling: step n+1 is planned as step n starts): steps start
    # at 0, 0.05, 0.10, 0.15. A is taken in at 0 and has its first token at the end
    # of step 1: TTFT one step. B, stamped at 0.07, is taken in at 0.10 and, step 3
    # being planned already, is prefilled in step 4 (0.15-0.20): TTFT 0.20 - 0.10,
    # two steps, where from its stamp it would be 0.13.
    assert predicted.loc[0, "ttft_s"] == pytest.approx(STEP_S, abs=1e-12)
    assert predicted.loc[1, "ttft_s"] == pytest.approx(2 * STEP_S, abs=1e-12)
    # B's four more tokens end steps 5 to 8 (0.40 s): E2EL six steps from its
    # intake (0.33 s from its stamp). The measured run counts the same from its
    # stamp (its vLLM took B in at it): no error on either.
    assert predicted.loc[1, "e2el_s"] == pytest.approx(6 * STEP_S, abs=1e-12)
    (comparison,) = validation.comparisons.values()
    for metric in ("ttft", "e2el"):
        assert comparison[metric]["error_pct"]["p50"] == pytest.approx(0.0, abs=1e-9)


def test_an_imported_llmservingsim_folder_keeps_counting_from_the_intake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_folder(tmp_path / "vllm")
    import_run(run).write(tmp_path / "imported")
    scenario = tmp_path / "intake.yaml"
    scenario.write_text(json.dumps(scenario_doc(tmp_path / "imported" / "trace.csv")))
    args = ["validate", str(scenario), "--assume-device", "h100", "--out"]
    assert main([*args, str(tmp_path / "v1"), "--measured", str(run)]) == 0
    assert main([*args, str(tmp_path / "v2"), "--measured", str(tmp_path / "imported")]) == 0
    first = json.loads((tmp_path / "v1" / "validation.json").read_text())["predictions"]
    second = json.loads((tmp_path / "v2" / "validation.json").read_text())["predictions"]
    assert first == second  # the run and its import-run folder replay alike
    (ttft,) = [p["ttft"] for p in first.values()]
    assert ttft["error_pct"]["p50"] == pytest.approx(0.0, abs=1e-9)
    capsys.readouterr()
