"""Huge request counts are refused up front with a memory estimate, not after filling memory."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from sim import api
from sim.cli import main
from sim.errors import ConfigError
from sim.scenario import load_scenario
from sim.workload.size import (
    BASE_BYTES,
    BYTES_PER_REQUEST,
    available_bytes,
    check_run_size,
    expected_num_requests,
)

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
CHAT = SCENARIOS / "chat.yaml"


def workload(*sets: str):  # type: ignore[no-untyped-def]
    return load_scenario(CHAT, list(sets)).workload


def test_expected_counts_for_each_way_of_sizing_a_workload() -> None:
    assert expected_num_requests(workload("workload.num_requests=123")) == 123
    by_time = workload("workload.num_requests=null", "workload.duration_s=10.5")
    assert expected_num_requests(by_time) == 105  # 10 req/s x 10.5 s
    trace = load_scenario(SCENARIOS / "azure_trace.yaml", ["workload.max_requests=7"]).workload
    assert expected_num_requests(trace) == 7
    closed = load_scenario(SCENARIOS / "closed_loop.yaml", ["workload.num_requests=42"])
    assert expected_num_requests(closed.workload) == 42


def test_a_run_that_does_not_fit_is_refused_with_the_estimate_and_the_fix() -> None:
    memory = BASE_BYTES + 1000 * BYTES_PER_REQUEST  # room for exactly 1000 requests
    check_run_size(workload("workload.num_requests=1000"), memory)
    with pytest.raises(ConfigError) as error:
        check_run_size(workload("workload.num_requests=1001"), memory)
    message = str(error.value)
    assert "1,001 requests need about 0.2 GB" in message
    assert "lower workload.num_requests to fit at most 1,000 requests" in message
    with pytest.raises(ConfigError, match=r"lower workload\.duration_s"):
        check_run_size(workload("workload.num_requests=null", "workload.duration_s=1e4"), memory)


def test_a_long_run_is_warned_about_in_one_line() -> None:
    # 6e6 requests x 0.3 ms = 1,800 s = 0.5 h, over the 600 s threshold.
    with pytest.warns(UserWarning, match=r"6,000,000 requests will take about 0\.5 h"):
        check_run_size(workload("workload.num_requests=6000000"), 10**15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_run_size(workload("workload.num_requests=2000"), 10**15)


def test_this_machine_reports_its_memory() -> None:
    memory = available_bytes()
    assert memory is None or memory > 0


def test_a_billion_requests_are_refused_before_any_generation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_generation(*args: object, **kwargs: object) -> None:
        raise AssertionError("generated requests before the size check")

    monkeypatch.setattr(api, "generate_open_loop", no_generation)
    argv = ["run", str(CHAT), "--set", "workload.num_requests=1000000000"]
    assert main([*argv, "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "GB of memory" in err and "1,000,000,000" in err
