"""TTFT as a client measures it, and its parts: the way in, queueing, prefill, the way out.

A lone request on an idle server is hand-computed from the frontend's and the
linear cost model's coefficients; the parts' sum under load is a property
(``tests/properties/test_ttft_parts_sum.py``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from sim import api
from sim.engine.records import RequestTable
from sim.errors import ConfigError
from sim.metrics.report import format_summary_table, summary_to_json
from sim.metrics.stats import TTFT_PARTS, latency_columns, request_columns
from sim.scenario import scenario_from_dict
from sim.serving.replica_config import FrontendConfig

# Linear step prices (s) and the frontend's coefficients, all distinct so that a
# term counted twice or left out shows.
OVERHEAD_S, PER_PREFILL_TOKEN_S, PER_DECODE_SEQ_S = 1.3e-3, 7e-5, 4e-3
WAY_IN_S, TOKENIZE_S, DETOKENIZE_S, OUTPUT_STEP_S = 0.011, 3e-6, 5e-5, 7e-4
PROMPT_TOKENS = 300
PARTS = [column for column, _ in TTFT_PARTS]


def doc(
    frontend: dict[str, Any] | None = None, num_requests: int = 1, rate_per_s: float = 2.0
) -> dict[str, Any]:
    """Fixed lengths, a budget above the prompt (one prefill step), synchronous scheduling."""
    return {
        "cost": {
            "kind": "linear",
            "step_overhead_s": OVERHEAD_S,
            "per_prefill_token_s": PER_PREFILL_TOKEN_S,
            "per_decode_seq_s": PER_DECODE_SEQ_S,
        },
        "scheduler": {"kind": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 512},
        "engine": {"async_scheduling": False},
        "frontend": {
            "way_in_s_per_request": WAY_IN_S,
            "tokenize_s_per_token": TOKENIZE_S,
            "detokenize_s_per_token": DETOKENIZE_S,
            "output_step_s": OUTPUT_STEP_S,
        }
        if frontend is None
        else frontend,
        "workload": {
            "kind": "synthetic",
            "num_requests": num_requests,
            "arrival": {"kind": "constant", "rate_per_s": rate_per_s},
            "prompt_tokens": {"kind": "fixed", "tokens": PROMPT_TOKENS},
            "output_tokens": {"kind": "fixed", "tokens": 4},
        },
    }


def run(document: dict[str, Any]) -> api.Result:
    return api.run(scenario_from_dict(document, "test_ttft_parts"))


def test_a_lone_request_waits_the_way_in_its_prefill_and_the_way_out() -> None:
    result = run(doc())
    row = result.requests.iloc[0]
    way_in_s = WAY_IN_S + TOKENIZE_S * PROMPT_TOKENS
    prefill_s = OVERHEAD_S + PER_PREFILL_TOKEN_S * PROMPT_TOKENS  # one step, the whole prompt
    way_out_s = OUTPUT_STEP_S + DETOKENIZE_S  # an idle frontend, one output in the step
    assert row["way_in_s"] == pytest.approx(way_in_s, abs=1e-12)
    assert row["queue_s"] == pytest.approx(0.0, abs=1e-12)  # an idle server takes it at once
    assert row["prefill_s"] == pytest.approx(prefill_s, abs=1e-12)
    assert row["way_out_s"] == pytest.approx(way_out_s, abs=1e-12)
    ttft_s = way_in_s + prefill_s + way_out_s
    assert row["ttft_s"] == pytest.approx(ttft_s, abs=1e-12)
    summary = result.summary
    assert summary["mean_ttft_ms"] == pytest.approx(1e3 * ttft_s)
    expected_ms = {"way_in": way_in_s, "queue": 0.0, "prefill": prefill_s, "way_out": way_out_s}
    for part, seconds in expected_ms.items():
        assert summary[f"mean_ttft_{part}_ms"] == pytest.approx(1e3 * seconds, abs=1e-9)
        assert summary[f"median_ttft_{part}_ms"] == pytest.approx(1e3 * seconds, abs=1e-9)


def test_without_a_way_in_the_engine_queues_the_request_at_its_arrival() -> None:
    frontend = {"way_in_s_per_request": 0.0, "tokenize_s_per_token": 0.0}
    result = run(doc(frontend))
    row = result.requests.iloc[0]
    assert row["ready_s"] == row["arrival_s"] and row["way_in_s"] == 0.0
    # The way out is still the default estimate's.
    default = FrontendConfig()
    expected_s = default.output_step_s + default.detokenize_s_per_token
    assert row["way_out_s"] == pytest.approx(expected_s, abs=1e-12)


def test_the_way_in_moves_ttft_by_its_own_length_and_nothing_else() -> None:
    # Requests far apart: each finds the server idle, so only the way in differs.
    zero = {**doc()["frontend"], "way_in_s_per_request": 0.0}
    slow = run(doc(num_requests=5, rate_per_s=1.0)).requests
    fast = run(doc(zero, num_requests=5, rate_per_s=1.0)).requests
    np.testing.assert_allclose(slow["ttft_s"] - fast["ttft_s"], WAY_IN_S, rtol=0, atol=1e-12)
    for part in ("queue_s", "prefill_s", "way_out_s"):
        np.testing.assert_allclose(slow[part], fast[part], rtol=0, atol=1e-12)


def test_the_parts_are_columns_of_the_written_requests_table() -> None:
    result = run(doc(num_requests=20, rate_per_s=200.0))
    records = result.raw.records
    assert isinstance(records, RequestTable)  # not disaggregated: the run's columns
    columns = request_columns(records)  # what servesim run writes (parquet / csv)
    frame = result.requests
    for part in PARTS:
        np.testing.assert_array_equal(columns[part], frame[part].to_numpy())
    total = sum(frame[part] for part in PARTS)
    np.testing.assert_allclose(total, frame["ttft_s"], rtol=1e-12, atol=1e-12)
    assert (frame["queue_s"] > 0).any()  # a burst: some requests queue


def test_summary_json_and_printout_label_the_frontends_estimates() -> None:
    set_all = run(doc())
    assert set_all.summary["frontend"]["estimated"] == []
    printed = format_summary_table(set_all.summary)
    assert "TTFT by Part" in printed and "Frontend estimates" not in printed
    for name in ("Way in", "Queueing", "Prefill", "Way out"):
        assert f"{name} (ms, mean / median):" in printed
    # Only the per-token tokenization set: the other three are the default estimates.
    partial = run(doc({"tokenize_s_per_token": TOKENIZE_S}))
    frontend = json.loads(summary_to_json(partial.summary))["frontend"]
    assert frontend["estimated"] == [
        "way_in_s_per_request",
        "detokenize_s_per_token",
        "output_step_s",
    ]
    assert frontend["way_in_s_per_request"] == FrontendConfig().way_in_s_per_request
    line = next(
        line for line in format_summary_table(partial.summary).splitlines() if "estimates" in line
    )
    named = line.split(":", 1)[1].strip().split(", ")
    assert named == ["way_in_s_per_request", "detokenize_s_per_token", "output_step_s"]


def test_a_measured_table_without_engine_times_has_no_way_out() -> None:
    frame = run(doc(num_requests=3)).raw.requests.drop(
        columns=["engine_first_token_s", "engine_finish_s"]
    )
    parts = latency_columns(RequestTable.from_frame(frame))
    np.testing.assert_array_equal(parts["way_out_s"], np.zeros(3))
    np.testing.assert_allclose(sum(parts[p] for p in PARTS), parts["ttft_s"], rtol=1e-12)


@pytest.mark.parametrize(
    ("value", "problem"),
    [(-0.01, "greater than or equal to 0"), (float("nan"), "finite"), ("fast", "valid number")],
)
def test_a_bad_frontend_value_is_one_line_naming_the_field(value: object, problem: str) -> None:
    bad = doc({"way_in_s_per_request": value})
    with pytest.raises(ConfigError) as error:
        scenario_from_dict(bad, "chat.yaml")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("chat.yaml") and "frontend.way_in_s_per_request" in message
    assert problem in message


def test_an_unknown_frontend_field_is_named() -> None:
    with pytest.raises(ConfigError, match=r"frontend\.way_in_s\b"):
        scenario_from_dict(doc({"way_in_s": 0.01}), "chat.yaml")


def test_undefined_parts_print_as_not_available() -> None:
    summary = {
        "mean_ttft_ms": None,
        **{f"{stat}_ttft_{part}_ms": None for stat in ("mean", "median") for part in ("way_in",)},
    }
    printed = format_summary_table(summary).splitlines()
    assert "Way in (ms, mean / median):" in printed[-2] and printed[-2].endswith("n/a / n/a")
    # No summary parts, no section (a measured run's summary).
    assert "TTFT by Part" not in format_summary_table({"mean_ttft_ms": 1.0})
