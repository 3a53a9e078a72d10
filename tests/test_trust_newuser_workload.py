"""Issue 39, a new user's round: workload inputs read as something else.

A CSV trace with a wanted column twice in its header was read from the
first; ``--save-result`` naming the scenario replaced it with the run's
JSON; a closed loop's ``.inf`` think time ran with numpy's invalid-value
warning and exit 0. (Arrivals past the float64 clock's precision, which
this round also found, are refused by ``sim.workload.arrivals.check_clock``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_errors import run_error

SCENARIO: dict[str, Any] = {
    "name": "tiny",
    "model": "llama-3-8b",
    "hardware": "h100",
    "workload": {
        "kind": "synthetic",
        "num_requests": 20,
        "arrival": {"kind": "poisson", "rate_per_s": 1e-300},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 10},
    },
}


def test_a_csv_trace_naming_a_column_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_text(
        "timestamp,prompt_tokens,timestamp,output_tokens\n0,100,5,10\n1,100,6,10\n"
    )
    doc = {k: v for k, v in SCENARIO.items() if k != "workload"}
    doc["workload"] = {"kind": "trace", "format": "csv", "path": "t.csv"}
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(doc))
    message = run_error(capsys, tmp_path, str(path))
    assert "t.csv" in message and "'timestamp'" in message and "twice" in message


@pytest.mark.parametrize("option", ["--save-result", "--save-detailed"])
def test_a_save_file_that_is_the_scenario_is_refused_and_the_scenario_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    # It was replaced by the run's JSON, with only a note that it "will be replaced".
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    before = path.read_text()
    message = run_error(capsys, tmp_path, str(path), option, str(path))
    assert message.startswith(f"{option} {path}") and "scenario" in message
    assert path.read_text() == before and not (tmp_path / "err").exists()


def _closed_loop(think: dict[str, Any], num_requests: int = 10) -> dict[str, Any]:
    workload = {
        "kind": "closed_loop",
        "num_users": 2,
        "num_requests": num_requests,
        "think_time_s": think,
        "prompt_tokens": {"kind": "fixed", "tokens": 10},
        "output_tokens": {"kind": "fixed", "tokens": 5},
    }
    return {**SCENARIO, "workload": workload}


@pytest.mark.parametrize(
    ("think", "field"),
    [
        ({"kind": "fixed", "value_s": ".inf"}, "value_s"),
        ({"kind": "exponential", "mean_s": ".inf"}, "mean_s"),
    ],
)
def test_an_infinite_think_time_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], think: dict[str, Any], field: str
) -> None:
    # It ran with numpy's "invalid value encountered in subtract" and exit 0.
    path = tmp_path / "closed.yaml"
    path.write_text(yaml.safe_dump(_closed_loop(think)).replace("'.inf'", ".inf"))
    message = run_error(capsys, tmp_path, str(path))
    assert f"workload.think_time_s.{field}" in message and "finite" in message
