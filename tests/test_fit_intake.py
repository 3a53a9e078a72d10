"""``calibrate --from-run`` on a run whose arrivals are vLLM's ``queued_ts`` (``run.json``
``latency_from: engine_intake``) counts each replay's TTFT and E2EL from its engine's
intake, as ``servesim validate`` does (``sim.validation.intake``, the rule's one home):
otherwise every fit evaluation carries the half step between the stamp and the next
step start, and the fit pays for it in its parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from intake_runs import STEP_S, run_folder, scenario_doc

from sim.cost.fitted import FitParameters
from sim.hardware.specs import model_preset
from sim.validation.fit_runs import replay_runs


def test_a_fit_replay_of_an_llmservingsim_run_counts_from_the_engine_intake(
    tmp_path: Path,
) -> None:
    run = run_folder(tmp_path / "vllm")
    scenario = tmp_path / "intake.yaml"
    scenario.write_text(json.dumps(scenario_doc("trace.csv")))
    (fit_run,) = replay_runs(
        [str(run)], model_preset("llama-3-8b"), None, str(scenario), "multipliers"
    ).runs
    predicted = fit_run.simulate(FitParameters())  # the base cost, unadjusted
    # By hand (async scheduling: step n+1 is planned as step n starts): steps start
    # at 0, 0.05, 0.10, 0.15. B, stamped at 0.07, is taken in at 0.10 and prefilled
    # in step 4 (0.15-0.20): TTFT 0.10 s from its intake (0.13 s from its stamp);
    # its four more tokens end steps 5 to 8 (0.40 s): E2EL 0.30 s from its intake.
    assert predicted.loc[0, "ttft_s"] == pytest.approx(STEP_S, abs=1e-12)
    assert predicted.loc[1, "ttft_s"] == pytest.approx(2 * STEP_S, abs=1e-12)
    assert predicted.loc[1, "e2el_s"] == pytest.approx(6 * STEP_S, abs=1e-12)
    # The run counts the same from its stamps: the unadjusted base is already exact.
    measured = fit_run.measured
    for metric in ("ttft_s", "e2el_s"):
        assert predicted[metric].to_numpy() == pytest.approx(measured[metric].to_numpy())
