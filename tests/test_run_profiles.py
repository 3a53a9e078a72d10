"""``servesim run --profile``: GuideLLM's load profiles on a simulated run, as
``measure --endpoint --profile`` drives a live server (sim.cli.run, sim.planning.profile_sweep)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from cli_errors import run_error

from sim.cli import main
from tests.small_scenario import write_scenario


def small(folder: Path, **workload: Any) -> Path:
    """40 requests of 96 + 24 tokens, Poisson at 20 per second (roofline)."""
    return write_scenario(folder, "small", 40, 20.0, 96, 24, **workload)


def run(folder: Path, scenario: Path, out: str, *args: str) -> Path:
    status = main(
        ["run", str(scenario), "--out", str(folder / out), "-q", "--figure-process", "no", *args]
    )
    assert status == 0
    return folder / out


def test_a_profile_flag_is_the_profile_written_in_the_scenario(tmp_path: Path) -> None:
    """``--profile concurrent --streams 4`` runs exactly what ``workload: {profile:
    concurrent, streams: 4, ...}`` in the file runs: the flag is a shortcut."""
    by_flag = run(tmp_path, small(tmp_path), "flag", "--profile", "concurrent", "--streams", "4")
    doc = yaml.safe_load(small(tmp_path).read_text())
    workload = doc["workload"]
    doc["workload"] = {
        "profile": "concurrent",
        "streams": 4,
        "num_requests": workload["num_requests"],
        "prompt_tokens": workload["prompt_tokens"],
        "output_tokens": workload["output_tokens"],
    }
    written = tmp_path / "written.yaml"
    written.write_text(yaml.safe_dump(doc))
    by_file = run(tmp_path, written, "file")
    flag_requests = pd.read_parquet(by_flag / "requests.parquet")
    pd.testing.assert_frame_equal(flag_requests, pd.read_parquet(by_file / "requests.parquet"))
    # Four streams: never more than four requests between arrival and the engine's
    # finish. (A stream sends its next request at the engine's finish plus the way
    # out without queueing, a few µs before a lagging frontend delivers the last
    # token: docs/vllm-fidelity.md, so the client-side finish can overlap by that.)
    starts = flag_requests["arrival_s"].to_numpy()
    ends = flag_requests["engine_finish_s"].to_numpy()
    assert max(((starts <= t) & (ends > t)).sum() for t in starts) <= 4


def test_a_sweep_writes_guidellms_phases_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(tmp_path, small(tmp_path), "sweep", "--profile", "sweep", "--sweep-size", "4")
    printed = capsys.readouterr().out
    listing = json.loads((out / "phases.json").read_text())
    phases = listing["phases"]
    assert [p["folder"] for p in phases] == [f"phase-{i}" for i in range(len(phases))]
    profiles = [p["load"]["profile"] for p in phases]
    assert profiles[:2] == ["synchronous", "throughput"] and len(phases) <= 4
    synchronous, throughput = (p["request_throughput"] for p in phases[:2])
    rates = [p["load"]["rate_per_s"] for p in phases[2:]]
    # GuideLLM's rates: evenly spaced above the synchronous rate, the last the throughput's.
    assert all(synchronous < r <= throughput for r in rates)
    assert rates == sorted(rates) and (not rates or rates[-1] == pytest.approx(throughput))
    for phase in phases:
        summary = json.loads((out / phase["folder"] / "summary.json").read_text())
        assert summary["request_throughput"] == pytest.approx(phase["request_throughput"])
        assert phase["folder"] in printed
    # One request at a time in the synchronous phase.
    first = pd.read_parquet(out / "phase-0" / "requests.parquet").sort_values("arrival_s")
    assert (first["arrival_s"].to_numpy()[1:] >= first["finish_s"].to_numpy()[:-1]).all()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rate", "3"), "--rate applies only with --profile"),
        (("--profile", "poisson", "--request-rate", "3"), "--request-rate sets the arrivals"),
        (("--sweep-size", "3"), "--sweep-size applies only with --profile sweep"),
        (("--profile", "sweep", "--save-detailed", "x.json"), "--save-detailed does not apply"),
        (("--profile", "sweep", "--rate", "2"), "--rate does not apply to --profile sweep"),
    ],
)
def test_profile_flags_that_do_not_go_together_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert run_error(capsys, tmp_path, str(small(tmp_path)), *args).startswith(message)


def test_a_sweep_prints_each_phases_caveats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """40 requests put few samples beyond a p99: each phase's caveats are printed
    under the table, as a single run's printout gives them."""
    out = run(tmp_path, small(tmp_path), "sweep", "--profile", "sweep", "--sweep-size", "2")
    printed = capsys.readouterr().out
    for index in (0, 1):
        summary = json.loads((out / f"phase-{index}" / "summary.json").read_text())
        assert summary["caveats"]
        for text in summary["caveats"]:
            assert f"CAVEAT: phase-{index}: {text}" in printed
