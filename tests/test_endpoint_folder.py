"""A live-server run's rows, summary and folder in the cases ``test_endpoint_tables`` leaves out.

Hand-made outcomes (no server, no clock; origin 10 s): a request still in
flight when the run stopped, one cut mid-stream, one without a usage chunk,
a run stopped by its time limit, one that never started, and the files
``EndpointRun.write`` lays out (what ``servesim validate`` and ``import-run``
read back).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.metrics.itl import STEP_COLUMNS
from sim.scenario import load_scenario
from sim.validation.endpoint import (
    CLOSED,
    EndpointOptions,
    Outcome,
    RunState,
    endpoint_run,
    request_frame,
    timeseries_frame,
    token_frame,
)
from sim.validation.endpoint_prompts import Prompt
from sim.workload.generate import RequestArrays

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "validate_tiny_cpu.yaml"
WORK = RequestArrays(np.array([0.0, 0.5, 1.0]), np.array([4, 5, 6]), np.array([2, 2, 2]))
OPTIONS = EndpointOptions(url="http://h:9/v1", max_concurrency=7, timeout_s=12.0, retries=1)


def stopped_run() -> RunState:
    """Request 0 completed without usage (3 chunks); 1 was cut mid-stream after one
    chunk; 2 was in flight (sent, nothing back) when the time limit stopped the run."""
    run = RunState(3, model="m", origin_s=10.0, end_s=12.5, status="time limit")
    run.message = "stopped at the 2.5 s limit"
    run.prompts = [Prompt("a", 4, True), Prompt("b", 5, False), Prompt("c", 6, True)]
    run.outcomes = [
        Outcome(
            sent_s=10.0,
            chunk_s=[10.25, 10.5, 11.0],
            done=True,
            status=200,
            ended_s=11.0,
            text="xyz",
        ),
        Outcome(sent_s=10.5, chunk_s=[10.75], status=200, error=CLOSED, ended_s=10.875),
        Outcome(sent_s=11.0, status=None, ended_s=None),
    ]
    return run


def test_rows_of_a_cut_and_an_in_flight_request() -> None:
    frame = request_frame(stopped_run(), WORK)
    done, cut, flying = (frame.iloc[i] for i in range(3))
    assert (done.first_token_s, done.finish_s, done.num_chunks) == (0.25, 1.0, 3)
    assert done.num_generated_tokens == 3  # no usage chunk: the chunks are counted
    assert done.num_prompt_tokens == 4 and bool(done.prompt_tokens_exact)
    # Cut after one chunk: its first token is known, its finish is not.
    assert cut.first_token_s - cut.arrival_s == 0.25  # sent at 0.5, first chunk at 0.75
    assert math.isnan(cut.finish_s) and cut.error == CLOSED
    assert cut.num_chunks == 1 and cut.num_generated_tokens == 1
    assert not bool(cut.prompt_tokens_exact)  # the approximate prompt, no usage
    assert flying.error == "in flight when the run stopped" and flying.arrival_s == 1.0
    assert math.isnan(flying.first_token_s) and flying.num_chunks == 0
    assert pd.isna(flying.http_status) and str(frame["http_status"].dtype) == "Int64"
    assert frame["rejection_reason"].isna().all()


def test_only_the_completed_request_has_token_rows() -> None:
    tokens = token_frame(stopped_run())
    assert tokens["request_id"].tolist() == [0, 0, 0]
    assert tokens["time_s"].tolist() == [0.25, 0.5, 1.0]


def test_no_token_rows_when_nothing_completed() -> None:
    run = RunState(2, origin_s=0.0, end_s=1.0)
    run.outcomes = [Outcome(sent_s=0.0, error="HTTP 500: x", status=500, ended_s=0.5), None]
    tokens = token_frame(run)
    assert len(tokens) == 0 and list(tokens.columns) == ["request_id", "token_index", "time_s"]
    assert [str(t) for t in tokens.dtypes] == ["int64", "int64", "float64"]


def test_a_request_still_in_flight_runs_until_the_end_of_the_run() -> None:
    run = stopped_run()
    series = timeseries_frame(request_frame(run, WORK), run)
    rows = list(zip(series["time_s"], series["num_waiting"], series["num_running"], strict=True))
    assert rows == [
        (0.0, 1, 0),
        (0.0, 0, 1),  # request 0 sent at its time
        (0.5, 1, 1),
        (0.5, 0, 2),  # request 1
        (0.875, 0, 1),  # request 1 cut
        (1.0, 1, 1),
        (1.0, 0, 2),  # request 2 sent ...
        (1.0, 0, 1),  # ... as request 0 ends
        (2.5, 0, 0),  # request 2 counted running until the run's end (12.5 - 10)
    ]


def test_the_summary_of_a_run_stopped_by_its_limit() -> None:
    run = endpoint_run(load_scenario(SCENARIO), WORK, stopped_run(), OPTIONS)
    s = run.summary
    assert s["status"] == "time limit" and s["partial"] is True
    assert s["message"] == "stopped at the 2.5 s limit; 2 failed"
    assert s["completed"] == 1 and s["num_failed"] == 2 and s["wall_s"] == 2.5
    assert s["failures"] == {CLOSED: 1, "in flight when the run stopped": 1}
    assert (s["max_concurrency"], s["timeout_s"], s["retries"]) == (7, 12.0, 1)
    assert s["endpoint"] == "http://h:9/v1/completions" and s["api"] == "completions"
    assert s["device"] == "http" and s["device_name"] == "m at http://h:9"
    assert s["mode"] == "measured" and s["cost_model"] == "measured"
    assert s["mean_ttft_ms"] == pytest.approx(250.0)  # the completed request only
    assert s["mean_itl_ms"] == pytest.approx((250.0 + 500.0) / 2)  # its two gaps
    assert run.samples == {"0": "xyz"}


def test_itl_never_spans_two_requests() -> None:
    run = RunState(2, model="m", origin_s=0.0, end_s=3.0)
    run.prompts = [Prompt("a", 4, True), Prompt("b", 5, True)]
    run.outcomes = [
        Outcome(sent_s=0.0, chunk_s=[0.5, 1.0], done=True, ended_s=1.0),
        Outcome(sent_s=0.0, chunk_s=[2.0, 3.0], done=True, ended_s=3.0),
    ]
    work = RequestArrays(np.zeros(2), np.array([4, 5]), np.array([2, 2]))
    s = endpoint_run(load_scenario(SCENARIO), work, run, OPTIONS).summary
    # Gaps 0.5 and 1.0 within requests; 1.0 -> 2.0 across them is not an ITL.
    assert s["mean_itl_ms"] == pytest.approx(750.0)


def test_a_run_that_never_started_has_no_wall_time() -> None:
    run = RunState(3, model="m")  # stopped before its clock started: nothing sent
    s = endpoint_run(load_scenario(SCENARIO), WORK, run, OPTIONS).summary
    assert s["wall_s"] == 0.0 and s["completed"] == 0 and s["num_failed"] == 3
    assert s["failures"] == {"never sent: the run stopped first": 3}


def test_samples_are_the_first_five_completed_cut_to_200_characters() -> None:
    n = 7
    run = RunState(n, model="m", origin_s=0.0, end_s=1.0)
    run.prompts = [Prompt("p", 4, True)] * n
    run.outcomes = [
        Outcome(sent_s=0.0, chunk_s=[0.5], done=True, ended_s=0.5, text=f"{i}" * 300)
        for i in range(n)
    ]
    run.outcomes[1] = Outcome(sent_s=0.0, error="HTTP 500: x", status=500, ended_s=0.1)
    work = RequestArrays(np.zeros(n), np.full(n, 4), np.full(n, 1))
    samples = endpoint_run(load_scenario(SCENARIO), work, run, OPTIONS).samples
    assert list(samples) == ["0", "2", "3", "4", "5"]
    assert samples["2"] == "2" * 200


def test_the_folder_reads_back(tmp_path: Path) -> None:
    run = endpoint_run(load_scenario(SCENARIO), WORK, stopped_run(), OPTIONS)
    run.write(tmp_path)
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta == {
        "api": "completions",
        "completed": 1,
        "endpoint": "http://h:9/v1/completions",
        # Told nothing of the server (--server-setting): its layout is unknown.
        "engine_settings": {
            "data_parallel_size": "unknown",
            "expert_parallel_size": "unknown",
            "pipeline_parallel_size": "unknown",
            "tensor_parallel_size": "unknown",
        },
        "format": "servesim-endpoint",
        "message": "stopped at the 2.5 s limit; 2 failed",
        "mode": "measured",
        "model": "m",
        "num_failed": 2,
        "partial": True,
        "status": "time limit",
    }
    assert json.loads((tmp_path / "sample_outputs.json").read_text()) == {"0": "xyz"}
    steps = pd.read_parquet(tmp_path / "steps.parquet")
    assert len(steps) == 0 and tuple(steps.columns) == STEP_COLUMNS
    tokens = pd.read_parquet(tmp_path / "tokens.parquet")
    pd.testing.assert_frame_equal(tokens, run.tokens)
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert requests["error"].tolist()[1:] == [CLOSED, "in flight when the run stopped"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["partial"] is True and summary["status"] == "time limit"
