"""``servesim measure --endpoint`` driven by load profiles and ``--max-concurrency`` (issue 31)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from aiohttp import web
from endpoint_fakes import FakeServer

from sim.cli import main as cli_main
from sim.validation.predict import replay_work
from sim.workload.listed_loop import ListedClosedLoop

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
COUNT = ["--set", "workload.num_requests=6", "--set", "workload.duration_s=null"]


def measure(tmp_path: Path, *flags: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    with FakeServer() as server:
        line = ["measure", str(SCENARIO), "-q", *COUNT, "--endpoint", server.url]
        code = cli_main([*line, "--out", str(out), *flags])
    return code, out


def most_in_flight(requests: pd.DataFrame) -> int:
    """Most requests between their send and their last chunk at one time."""
    done = requests.dropna(subset=["finish_s"])
    events = sorted([(t, 1) for t in done["arrival_s"]] + [(t, -1) for t in done["finish_s"]])
    return int(np.max(np.cumsum([step for _, step in events])))


def test_synchronous_sends_each_request_after_the_last_answer(tmp_path: Path) -> None:
    code, out = measure(tmp_path, "--profile", "synchronous")
    assert code == 0
    requests = pd.read_parquet(out / "requests.parquet").sort_values("request_id")
    assert len(requests) == 6 and requests["error"].isna().all()
    sent, finish = requests["arrival_s"].to_numpy(), requests["finish_s"].to_numpy()
    assert np.all(sent[1:] >= finish[:-1])
    assert (requests["scheduled_arrival_s"] == requests["arrival_s"]).all()  # no schedule


def test_concurrent_streams_and_a_capped_open_loop_bound_what_is_in_flight(tmp_path: Path) -> None:
    code, out = measure(tmp_path, "--profile", "concurrent", "--streams", "2")
    assert code == 0
    assert most_in_flight(pd.read_parquet(out / "requests.parquet")) <= 2
    code, out = measure(tmp_path / "capped", "--profile", "throughput", "--max-concurrency", "2")
    assert code == 0
    requests = pd.read_parquet(out / "requests.parquet")
    assert most_in_flight(requests) <= 2
    assert (requests["scheduled_arrival_s"] == 0.0).all()  # every request planned at once
    assert json.loads((out / "summary.json").read_text())["max_concurrency"] == 2


def test_the_folder_records_the_load_validate_replays(tmp_path: Path) -> None:
    code, out = measure(tmp_path, "--profile", "poisson", "--rate", "50", "--max-concurrency", "3")
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["load"] == {"max_concurrency": 3}
    code, out = measure(tmp_path / "sync", "--profile", "synchronous")
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["load"] == {"profile": "synchronous"}
    requests = pd.read_parquet(out / "requests.parquet")
    assert isinstance(replay_work(requests, summary["load"]), ListedClosedLoop)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--streams", "2"], "--streams applies only with --profile"),
        (["--profile", "concurrent"], "--profile concurrent: "),
        (["--profile", "synchronous", "--max-concurrency", "2"], "--max-concurrency applies to"),
        (["--profile", "constant"], "needs rate_per_s"),
    ],
)
def test_bad_flags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    code, _ = measure(tmp_path, *flags)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


class SlowServer(FakeServer):
    """A fake server that takes 50 ms before answering: concurrency pays, as on a GPU."""

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.05)
        return await super()._completions(request)


def test_a_sweep_measures_synchronous_throughput_then_rates_between(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    line = ["measure", str(SCENARIO), "-q", *COUNT, "--profile", "sweep", "--sweep-size", "4"]
    with SlowServer() as server:
        assert cli_main([*line, "--endpoint", server.url, "--out", str(out)]) == 0
    listing = json.loads((out / "phases.json").read_text())["phases"]
    assert [row["folder"] for row in listing] == ["phase-0", "phase-1", "phase-2", "phase-3"]
    synchronous, throughput = (row["request_throughput"] for row in listing[:2])
    assert [row["load"]["profile"] for row in listing] == [
        "synchronous",
        "throughput",
        "constant",
        "constant",
    ]
    rates = [row["load"]["rate_per_s"] for row in listing[2:]]
    np.testing.assert_allclose(rates, [(synchronous + throughput) / 2, throughput])
    for row, rate in zip(listing[2:], rates, strict=True):
        requests = pd.read_parquet(out / row["folder"] / "requests.parquet")
        gaps = np.diff(np.sort(requests["scheduled_arrival_s"].to_numpy()))
        np.testing.assert_allclose(gaps, 1 / rate)  # sent at that constant rate
    assert "sweep: 4 phases" in capsys.readouterr().out


def test_endpoint_options_without_an_endpoint_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = ["measure", str(SCENARIO), "-q", "--out", str(tmp_path), "--max-concurrency", "2"]
    assert cli_main(line) == 2
    assert "--max-concurrency applies with --endpoint" in capsys.readouterr().err
