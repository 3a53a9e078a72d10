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

from sim.cost.fitted import FitParameters
from sim.hardware.specs import model_preset
from sim.validation.fit_runs import replay_runs

STEP_S = 0.05  # every step's price (linear cost: the overhead alone)
STAMP_B_S = 0.07  # request B's stamp, during the replay's second step (0.05-0.10 s)


def _llmservingsim_run(folder: Path) -> Path:
    """Two requests as vLLM would have served them on the scenario's engine, each
    TTFT counted from its stamp (its intake): A one step, B two."""
    folder.mkdir()
    rows = [
        {"input_toks": 100, "output_toks": 10, "queued_ts": 0.0, "scheduled_ts": 0.0,
         "first_token_ts": STEP_S, "last_token_ts": 10 * STEP_S},
        {"input_toks": 100, "output_toks": 5, "queued_ts": STAMP_B_S,
         "scheduled_ts": 3 * STEP_S, "first_token_ts": STAMP_B_S + 2 * STEP_S,
         "last_token_ts": STAMP_B_S + 6 * STEP_S},
    ]  # fmt: skip
    (folder / "requests.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "meta.json").write_text(json.dumps({"model": "llama-3-8b"}))
    return folder


def test_a_fit_replay_of_an_llmservingsim_run_counts_from_the_engine_intake(
    tmp_path: Path,
) -> None:
    run = _llmservingsim_run(tmp_path / "vllm")
    zero = {"way_in_s_per_request": 0, "tokenize_s_per_token": 0,
            "detokenize_s_per_token": 0, "output_step_s": 0}  # fmt: skip
    scenario = tmp_path / "intake.yaml"
    scenario.write_text(
        json.dumps(
            {
                "name": "intake",
                "seed": 0,
                "model": "llama-3-8b",
                "hardware": "h100",
                "cost": {"kind": "linear", "step_overhead_s": STEP_S},
                "scheduler": {"kind": "continuous", "max_num_seqs": 8,
                              "max_num_batched_tokens": 2048},
                "engine": {"vllm_version": "0.19.0"},  # async scheduling
                "frontend": zero,
                "workload": {"kind": "trace", "format": "csv", "path": "trace.csv"},
            }
        )
    )  # fmt: skip
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
