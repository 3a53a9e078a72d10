"""The planning layer's own checks and ``plan.json`` fields, called without the CLI.

``servesim plan`` only forwards ``--slo``, ``--target-rate`` and ``--headroom`` to
``check_asks`` and writes what ``plan_report.to_json`` returns; these tests hold the
planning layer to both without a search.
"""

from __future__ import annotations

import pytest

from sim.cost.model_error import ModelError
from sim.errors import ConfigError
from sim.metrics.slo_targets import parse_targets
from sim.planning.plan import Candidate, Outcome, PlanResult, check_asks
from sim.planning.plan_report import to_json

TARGETS = tuple(parse_targets(["ttft_p99_ms=500"]))


@pytest.mark.parametrize(
    ("targets", "rate_per_s", "headroom_pct", "expected"),
    [
        ((), 10.0, None, "--slo: give at least one SLO target"),
        (TARGETS, None, None, "--target-rate must be > 0"),  # not given
        (TARGETS, 0.0, None, "--target-rate must be > 0"),
        (TARGETS, float("nan"), None, "--target-rate must be > 0"),
        # No fleet serves an infinite rate: refused, not a traceback from ceil(inf).
        (TARGETS, float("inf"), None, "--target-rate must be > 0 and finite"),
        (TARGETS, 10.0, -5.0, "--headroom must be a percentage in [0, 1000), got -5"),
        (TARGETS, 10.0, 1000.0, "--headroom must be a percentage in [0, 1000)"),
    ],
)
def test_check_asks_refuses_what_no_plan_can_answer(
    targets: tuple[object, ...], rate_per_s: float | None, headroom_pct: float | None, expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace(")", r"\)")):
        check_asks(targets, rate_per_s, headroom_pct)  # type: ignore[arg-type]


def test_check_asks_passes_a_whole_ask() -> None:
    check_asks(TARGETS, 10.0, None)  # None: each configuration's own model error
    check_asks(TARGETS, 10.0, 0.0)


def _result(headroom_pct: float | None, error: ModelError | None) -> PlanResult:
    """One searched configuration, the best: $2/h for 20 req/s per GPU."""
    result = PlanResult(10.0, TARGETS, headroom_pct=headroom_pct)
    candidate = Candidate("h100", 1, 256, 8192, True)
    record = {"usd_per_hour": 2.0, "capacity_per_gpu": 20.0}
    result.outcomes.append(Outcome(candidate, "searched", record=record, model_error=error))
    return result


def test_plan_json_records_the_asked_headroom_and_the_best_ones_model_error() -> None:
    unvalidated = ModelError(kind=None, validated=None, why_none="uncalibrated roofline")
    doc = to_json(_result(5.0, unvalidated), "s", None, "roofline")
    assert doc["headroom"] == {
        "pct": 5.0,
        "source": "--headroom",
        "target_rate_per_s_asked": 10.0,
    }
    assert doc["model_error"]["text"] == "no validated error (uncalibrated roofline)"
    # No validated error: the answer says so once, among the plan's caveats.
    assert doc["caveats"] == ["model error: no validated error (uncalibrated roofline)"]


def test_plan_json_without_headroom_names_each_configurations_own() -> None:
    doc = to_json(_result(None, None), "s", None, "auto")
    assert doc["headroom"]["pct"] is None
    assert doc["headroom"]["source"] == "each configuration's model error"
    assert doc["model_error"] is None and "caveats" not in doc
