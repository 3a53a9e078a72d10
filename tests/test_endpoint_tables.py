"""A live-server run's tables, from hand-made outcomes (no server, no clock)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.scenario import load_scenario
from sim.validation.endpoint import (
    EndpointOptions,
    Outcome,
    RunState,
    endpoint_run,
    failure_counts,
    request_frame,
    timeseries_frame,
    token_frame,
)
from sim.validation.endpoint_prompts import Prompt
from sim.workload.generate import RequestArrays

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "validate_tiny_cpu.yaml"
WORK = RequestArrays(
    np.array([0.0, 0.125, 0.25, 0.375]), np.array([10, 11, 12, 13]), np.array([3, 3, 3, 3])
)


def state() -> RunState:
    """Origin 100 s: request 0 completes (no usage chunk), 1 was never sent,
    2 gets a 500, 3 was sent late (concurrency bound) and completes with usage."""
    run = RunState(4, model="m", origin_s=100.0, end_s=102.0)
    run.prompts = [Prompt(t, n, t != "d") for t, n in zip("abcd", (10, 11, 12, 13), strict=True)]
    run.outcomes = [
        Outcome(sent_s=100.0, chunk_s=[100.5, 100.75, 101.0], done=True, ended_s=101.125),
        None,
        Outcome(sent_s=100.25, error="HTTP 500: x", status=500, ended_s=100.375),
        Outcome(
            sent_s=100.5,
            chunk_s=[101.0, 101.25],
            done=True,
            ended_s=101.375,
            num_prompt_tokens=14,
            num_generated_tokens=3,
            status=200,
        ),
    ]
    return run


def test_request_rows_by_hand() -> None:
    frame = request_frame(state(), WORK)
    row = frame.iloc[0]
    assert (row.arrival_s, row.first_token_s, row.finish_s) == (0.0, 0.5, 1.0)
    assert row.num_generated_tokens == 3 and row.num_chunks == 3  # counted chunks
    assert row.num_prompt_tokens == 10 and pd.isna(row.error)
    never = frame.iloc[1]
    assert never.arrival_s == 0.125 and math.isnan(never.finish_s)
    assert never.error == "never sent: the run stopped first"
    failed = frame.iloc[2]
    assert failed.http_status == 500 and failed.error == "HTTP 500: x"
    assert math.isnan(failed.first_token_s) and math.isnan(failed.finish_s)
    late = frame.iloc[3]
    assert late.arrival_s == 0.5 and late.scheduled_arrival_s == 0.375
    assert late.num_prompt_tokens == 14 and bool(late.prompt_tokens_exact)  # from usage
    assert late.num_generated_tokens == 3 and late.num_chunks == 2  # merged chunk
    assert frame["first_scheduled_s"].isna().all()


def test_tokens_only_of_completed_requests() -> None:
    tokens = token_frame(state())
    assert tokens["request_id"].tolist() == [0, 0, 0, 3, 3]
    assert tokens["token_index"].tolist() == [0, 1, 2, 0, 1]
    assert tokens["time_s"].tolist() == pytest.approx([0.5, 0.75, 1.0, 1.0, 1.25])


def test_timeseries_by_hand() -> None:
    run = state()
    series = timeseries_frame(request_frame(run, WORK), run)
    rows = list(zip(series["time_s"], series["num_waiting"], series["num_running"], strict=True))
    # Times are exact binary fractions; at one time: queued, then sent, then ended.
    assert rows == [
        (0.0, 1, 0),  # request 0 queued ...
        (0.0, 0, 1),  # ... and sent at once
        (0.25, 1, 1),  # request 2 queued
        (0.25, 0, 2),  # and sent
        (0.375, 1, 2),  # request 3 queued (the bound holds it) ...
        (0.375, 1, 1),  # ... as request 2 ends with its 500
        (0.5, 0, 2),  # request 3 sent 0.125 s after its arrival time
        (1.125, 0, 1),
        (1.375, 0, 0),
    ]


def test_summary_and_failures() -> None:
    run = endpoint_run(load_scenario(SCENARIO), WORK, state(), EndpointOptions(url="http://h:1"))
    s = run.summary
    assert s["completed"] == 2 and s["num_failed"] == 2
    assert s["failures"] == {"never sent: the run stopped first": 1, "HTTP 500: x": 1}
    assert s["mode"] == "measured" and s["partial"] is False and s["wall_s"] == 2.0
    assert s["endpoint"] == "http://h:1/v1/completions" and s["model"] == "m"
    assert s["mean_ttft_ms"] == pytest.approx(500.0)  # (0.5 + 0.5) / 2
    assert s["mean_itl_ms"] == pytest.approx(250.0)  # three gaps of 0.25 s
    # TPOT = (E2E - TTFT) / (tokens - 1): request 0: 0.5 / 2, request 3: 0.25 / 2.
    assert s["mean_tpot_ms"] == pytest.approx((250 + 125) / 2)
    assert run.samples == {"0": "", "3": ""}


def test_failure_counts_cut_long_messages() -> None:
    frame = request_frame(state(), WORK)
    frame.loc[2, "error"] = "x" * 200
    assert failure_counts(frame)["x" * 80] == 1
