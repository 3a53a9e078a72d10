"""Issue 39, a new user's round: workloads whose numbers the run cannot hold.

An arrival rate of 1e-300 req/s put the last of 50 arrivals near 5e301 s;
there a float64's spacing is ~1e285 s, so every step of a few ms rounded
away and each latency read exactly 0 ms: a silently wrong answer. A CSV
trace with a wanted column twice in its header was read from the first.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from cli_errors import run_error

from sim.errors import ConfigError
from sim.workload.generate import MAX_ARRIVAL_S, RequestArrays

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


def test_the_limit_is_where_the_clock_stops_resolving_a_microsecond() -> None:
    # Spacing of float64 at t is 2**(floor(log2 t) - 52): ~1 us at 2**32 s.
    assert math.ulp(MAX_ARRIVAL_S) <= 1e-6 < math.ulp(MAX_ARRIVAL_S * 4)


@pytest.mark.parametrize("rate", [1e-300, 1e-20])
def test_a_rate_whose_arrivals_outrun_the_clock_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: float
) -> None:
    workload = {**SCENARIO["workload"], "arrival": {"kind": "poisson", "rate_per_s": rate}}
    doc = {**SCENARIO, "workload": workload}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    message = run_error(capsys, tmp_path, str(path))
    assert message.startswith("workload:") and "arrival rate" in message
    assert not (tmp_path / "err").exists()


def test_a_trace_time_past_the_limit_is_refused_and_one_below_is_kept() -> None:
    lengths = np.array([10, 10], dtype=np.int64)
    with pytest.raises(ConfigError, match=r"^workload:"):
        RequestArrays(np.array([0.0, 1e12]), lengths, lengths.copy())
    kept = RequestArrays(np.array([0.0, MAX_ARRIVAL_S]), lengths, lengths.copy())
    assert len(kept) == 2


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
    "think", [{"kind": "fixed", "value_s": 1e300}, {"kind": "exponential", "mean_s": 1e300}]
)
def test_closed_loop_think_times_past_the_clock_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], think: dict[str, Any]
) -> None:
    # A think time of 1e300 s read every latency as 0 ms, as the open loop's rate did.
    path = tmp_path / "closed.yaml"
    path.write_text(yaml.safe_dump(_closed_loop(think)))
    message = run_error(capsys, tmp_path, str(path))
    assert "workload: think_time_s:" in message and not (tmp_path / "err").exists()


def test_the_closed_loop_limit_counts_each_users_requests() -> None:
    # 10 requests over 2 users: 5 thinks each; at the limit / 5 each it just fits.
    from sim.scenario import scenario_from_dict

    fits = _closed_loop({"kind": "fixed", "value_s": MAX_ARRIVAL_S / 5})
    scenario_from_dict(fits, "fits")
    over = _closed_loop({"kind": "fixed", "value_s": MAX_ARRIVAL_S / 4})
    with pytest.raises(ConfigError, match=r"think_time_s"):
        scenario_from_dict(over, "over")


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
