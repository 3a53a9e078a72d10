"""capacity.json is strict JSON: a non-finite number anywhere in it is null, as
plan.json and summary.json write one (``sim.metrics.report.jsonable``), never
``NaN``/``Infinity``, which strict parsers (JavaScript's JSON.parse, jq) refuse."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim.planning.capacity import CapacitySearch, LoadKnob, LoadPoint
from sim.planning.capacity_report import to_json, write_json


def strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_a_non_finite_mean_throughput_is_null_in_capacity_json(
    tmp_path: Path, value: float
) -> None:
    # One seed's request_throughput non-finite: its mean over seeds is too.
    records = [{"request_throughput": value, "request_goodput": 2.0}]
    at = LoadPoint(10.0, records, {"ttft": value}, {"ttft": 0.0}, "pass", value)
    search = CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0,))
    search.points, search.at_estimate = [at], at
    search.lower, search.upper, search.estimate = 10.0, 12.0, 10.0
    doc = strict(write_json(to_json(search, None, "x"), tmp_path).read_text())
    assert isinstance(doc, dict)
    for point in (doc["at_capacity"], doc["points"][0]):
        assert point["request_throughput"] is None  # main: Infinity / NaN
        assert point["worst_ratio_to_limit"] is None and point["mean"] == {"ttft": None}
        assert point["request_goodput"] == 2.0  # finite numbers untouched


def test_write_json_refuses_to_write_a_non_finite_number(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_json({"capacity": math.inf}, tmp_path)
