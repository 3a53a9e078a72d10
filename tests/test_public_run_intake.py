"""TTFT of a public run counted as vLLM counts it: from the engine's intake (issue 41, item 1).

vLLM stamps a request's ``queued_ts`` when its engine core's busy loop drains the
input queue (``EngineCoreProc.run_busy_loop`` -> ``_process_input_queue`` ->
``Scheduler.add_request``, event ``QUEUED``), at the top of each turn of the loop,
right before it schedules: once a step while busy, at once while idle. The public
runs' arrivals are those stamps and their TTFT and E2EL count from them
(``sim.validation.llmservingsim``), so a replay counts its own from the turn of its
engine's loop that took the request in: the first step start at or after it
arrives (the plan made then is the first that sees it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from benchmark_module import load_benchmark

from sim import api
from sim.scenario import scenario_from_dict
from sim.validation.intake import engine_intake_s

BENCH = load_benchmark("public_runs")
STEP_S = 0.05  # every step's price (linear cost: the overhead alone)


def test_the_engine_takes_a_request_in_at_the_first_step_start_after_it_arrives() -> None:
    steps = pd.DataFrame({"replica": [0, 0, 0, 1], "start_s": [0.0, 0.05, 0.10, 0.07]})
    requests = pd.DataFrame({"replica": [0, 0, 0, 1, 0], "ready_s": [0.0, 0.02, 0.05, 0.06, 0.06]})
    # Idle engine: taken in at once (0.0); arriving during a step: at the next
    # start (0.02 -> 0.05); at a start: then (0.05); each replica its own loop.
    alone = engine_intake_s(requests, steps, lockstep=False)
    np.testing.assert_array_equal(alone, [0.0, 0.05, 0.05, 0.07, 0.10])
    # Ranks in lockstep turn together: any rank's step start is the group's.
    together = engine_intake_s(requests, steps, lockstep=True)
    np.testing.assert_array_equal(together, [0.0, 0.05, 0.05, 0.07, 0.07])


def _two_requests(tmp_path: Path) -> dict[str, Any]:
    trace = tmp_path / "two.csv"
    # A at 0 s; B during A's second step (it runs 0.05-0.10 s).
    trace.write_text("timestamp,prompt_tokens,output_tokens\n0.0,100,10\n0.07,100,5\n")
    zero = {"way_in_s_per_request": 0, "tokenize_s_per_token": 0,
            "detokenize_s_per_token": 0, "output_step_s": 0}  # fmt: skip
    return {
        "name": "intake",
        "seed": 0,
        "cost": {"kind": "linear", "step_overhead_s": STEP_S},
        "scheduler": {"kind": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 2048},
        # Async scheduling, as the public runs (a linear cost times whole steps).
        "engine": {"vllm_version": "0.19.0"},
        "frontend": zero,
        "workload": {"kind": "trace", "format": "csv", "path": str(trace)},
    }


def test_a_replay_counts_ttft_from_the_engine_intake_as_vllm_does(tmp_path: Path) -> None:
    result = api.run(scenario_from_dict(_two_requests(tmp_path), "intake.yaml"))
    latencies = BENCH.predicted_latencies_s(result)
    # By hand, async scheduling (the plan of step n+1 is made while step n runs
    # and sees arrivals before step n started): steps start at 0, 0.05, 0.10,
    # 0.15. B arrives at 0.07, during step 2; vLLM's loop takes it in at the
    # next turn, 0.10 (step 2's output in), and schedules it into step 4 (step 3
    # was planned at 0.05), 0.15-0.20: TTFT 0.20 - 0.10 = 2 steps, where from
    # its arrival it is 0.13. A: taken in at once, first token after its prefill.
    ttft = dict(zip(result.requests["request_id"], latencies["ttft"], strict=True))
    assert ttft[0] == pytest.approx(STEP_S, abs=1e-12)
    assert ttft[1] == pytest.approx(2 * STEP_S, abs=1e-12)
    requests = result.requests
    first_token_s = dict(zip(requests["request_id"], requests["first_token_s"], strict=True))
    assert float(first_token_s[1]) - 0.07 == pytest.approx(0.13, abs=1e-12)  # from arrival


def test_intake_lies_between_arrival_and_first_scheduled_step_on_the_dp_run() -> None:
    run = next(r for r in BENCH.RUNS if r.name == "rtxpro6000-qwen3-30b-a3b-dp2-ep2-profile")
    result = api.run(BENCH.ROOT / run.scenario)
    requests = result.requests
    intake = engine_intake_s(requests, result.steps, lockstep=True)
    ready = requests["ready_s"].to_numpy()
    first_scheduled = requests["first_scheduled_s"].to_numpy()
    assert (intake >= ready).all()
    assert (intake <= first_scheduled).all()
    longest_step_s = float((result.steps["end_s"] - result.steps["start_s"]).max())
    assert (intake - ready <= longest_step_s).all()
