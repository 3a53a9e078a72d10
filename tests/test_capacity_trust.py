"""What a capacity answer rests on: the binding constraint, refused short runs, caveats.

An answer that cannot be trusted is an error or carries its caveat (issue 30):
a p99 from runs shorter than 100 requests has no sample beyond it (refused); a
served check failing at runs too short to measure the served ratio within its
margin, or a percentile resting on few samples, is reported as a caveat, in
the printout and in capacity.json, beside the constraint that bound the answer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_capacity import md1_doc

from sim.cli import main
from sim.errors import ConfigError
from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import (
    SERVED,
    SERVED_MARGIN_SDS,
    CapacitySearch,
    LoadKnob,
    caveats,
    judge,
)
from sim.planning.capacity_report import format_capacity, to_json
from sim.planning.served import SERVED_MIN_RATIO


def record(
    ttft_p99_ms: float, served: float | None, completed: int, **extra: Any
) -> dict[str, Any]:
    return {
        "p99_ttft_ms": ttft_p99_ms,
        "served_ratio": served,
        "completed": completed,
        "num_rejected": 0,
        **extra,
    }


def test_judge_names_the_constraint_with_the_worst_ratio() -> None:
    targets = parse_targets(["ttft_p99_ms=500"])
    slow = judge(10.0, [record(900.0, 1.0, 1000)], targets)
    assert slow.binding == "ttft_p99_ms" and slow.ratio == pytest.approx(1.8)
    starved = judge(10.0, [record(100.0, 0.5, 1000)], targets)
    assert starved.binding == SERVED
    assert starved.ratio == pytest.approx(SERVED_MIN_RATIO / 0.5)
    # A closed loop's runs have no served ratio (sim.planning.served): the target
    # binds even when it is met.
    closed = judge(10.0, [record(100.0, None, 1000)], targets)
    assert closed.binding == "ttft_p99_ms" and closed.ratio == pytest.approx(0.2)


def _search(points: list[Any], targets: str = "ttft_p99_ms=500") -> CapacitySearch:
    res = CapacitySearch(LoadKnob("rate", "workload.arrival.rate_per_s", 1.0), (), (0, 1))
    res.targets = tuple(parse_targets([targets]))
    res.points = points
    return res


def test_a_served_failure_from_noisy_short_runs_is_a_caveat() -> None:
    targets = parse_targets(["ttft_p99_ms=20000"])
    # 300 requests at 8 req/s with 2.5 s mean E2E: about 20 in the system, so the
    # served ratio's sd is sqrt(40) / 150 = 0.042 against a 0.05 margin.
    short = [record(200.0, 0.94, 300, offered_rate_per_s=8.0, mean_e2el_ms=2500.0)] * 2
    failed = judge(8.0, short, targets)
    res = _search([failed])
    res.at_estimate = judge(7.5, [record(190.0, 0.96, 300)] * 2, targets)
    notes = caveats(res, failed)
    served = [n for n in notes if n.startswith("the served check bound")]
    assert len(served) == 1
    sd = math.sqrt(2 * 8.0 * 2.5) / 150
    assert f"±{sd:.2f}" in served[0]
    needed = math.ceil(2 * SERVED_MARGIN_SDS * math.sqrt(2 * 8.0 * 2.5) / 0.05)
    assert served[0].endswith(f"--num-requests >= {needed}")
    # The same failure from runs long enough to resolve the margin is trusted.
    long = [record(200.0, 0.90, 20_000, offered_rate_per_s=8.0, mean_e2el_ms=2500.0)] * 2
    assert not [n for n in caveats(res, judge(8.0, long, targets)) if "served" in n]
    # And an SLO failure is never blamed on the served check.
    late = record(30_000.0, 0.94, 300, offered_rate_per_s=8.0, mean_e2el_ms=2500.0)
    slo = judge(8.0, [late], targets)
    assert not [n for n in caveats(res, slo) if "served" in n]


def test_a_percentile_on_few_samples_is_a_caveat() -> None:
    targets = parse_targets(["ttft_p99_ms=500"])
    res = _search([])

    def tails() -> list[str]:  # the run-length caveat (test_trust_capacity_length) aside
        return [n for n in caveats(res, None) if not n.startswith("runs of")]

    res.at_estimate = judge(5.0, [record(100.0, 1.0, 300)], targets)
    (note,) = tails()
    assert note.startswith("ttft_p99_ms rests on runs of 300 requests, about 3 beyond")
    res.at_estimate = judge(5.0, [record(100.0, 1.0, 1000)], targets)
    assert tails() == []
    res.targets = tuple(parse_targets(["ttft_mean_ms=500"]))  # a mean has no tail to count
    res.at_estimate = judge(5.0, [{"mean_ttft_ms": 1.0, "completed": 5}], res.targets)
    assert tails() == []


def test_the_report_and_json_say_what_bound_the_answer_and_why_to_doubt_it() -> None:
    targets = parse_targets(["ttft_p99_ms=500"])
    res = _search([])
    res.points = [judge(4.0, [record(100.0, 1.0, 300)], targets)]
    res.points.append(judge(8.0, [record(900.0, 1.0, 300)], targets))
    res.lower, res.upper, res.cell, res.estimate = 4.0, 8.0, (4.0, 8.0), 4.0
    res.at_estimate = res.points[0]
    res.binding = "ttft_p99_ms"
    res.caveats = ["a caveat"]
    text = format_capacity(res, "md1", None, 1, None)
    assert "bound by:               ttft_p99_ms, the first past its limit on average, at 8" in text
    assert "CAVEAT:                 a caveat" in text
    doc = to_json(res, None, "md1")
    assert doc["binding_constraint"] == "ttft_p99_ms" and doc["caveats"] == ["a caveat"]
    # At 4 req/s the served ratio (0.95 / 1.0) is nearer its limit than the p99 (100 / 500).
    assert [p["binding"] for p in doc["points"]] == [SERVED, "ttft_p99_ms"]
    json.dumps(doc, allow_nan=False)


def test_runs_too_short_for_a_p99_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "md1.yaml"
    path.write_text(yaml.safe_dump(md1_doc(1000)))
    argv = ["capacity", str(path), "--slo", "ttft_p99_ms=500", "--num-requests", "5", "-q"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--slo ttft_p99_ms: runs of 5 requests cannot estimate a p99" in err
    assert "--num-requests >= 1000" in err


def test_a_median_needs_only_two_requests() -> None:
    from sim.planning.capacity import _check_run_length

    _check_run_length([record(1.0, 1.0, 2)], parse_targets(["ttft_median_ms=5"]))
    with pytest.raises(ConfigError, match="runs of 1 requests cannot estimate a median"):
        _check_run_length([record(1.0, 1.0, 1)], parse_targets(["ttft_median_ms=5"]))
