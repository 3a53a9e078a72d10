"""``measure --endpoint --profile sweep --max-concurrency N``: GuideLLM's sweep caps its
throughput and rate benchmarks, never its synchronous one (one request at a time
already), as ``servesim run --profile sweep`` does (``sim.planning.profile_sweep``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pandas as pd
from aiohttp import web
from endpoint_fakes import FakeServer

from sim.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
COUNT = ["--set", "workload.num_requests=6", "--set", "workload.duration_s=null"]


class SlowServer(FakeServer):
    """Takes 50 ms before answering: concurrency pays, so throughput beats synchronous."""

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.05)
        return await super()._completions(request)


def most_in_flight(requests: pd.DataFrame) -> int:
    """Most requests between their send and their last chunk at one time."""
    done = requests.dropna(subset=["finish_s"])
    events = sorted([(t, 1) for t in done["arrival_s"]] + [(t, -1) for t in done["finish_s"]])
    return int(np.max(np.cumsum([step for _, step in events])))


def test_a_capped_sweep_caps_all_but_its_synchronous_phase(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    line = ["measure", str(SCENARIO), "-q", *COUNT, "--profile", "sweep", "--sweep-size", "3"]
    with SlowServer() as server:
        flags = ["--endpoint", server.url, "--out", str(out), "--max-concurrency", "2"]
        assert cli_main([*line, *flags]) == 0  # main: exit 2, the cap refused on a closed loop
    phases = json.loads((out / "phases.json").read_text())["phases"]
    loads = [row["load"] for row in phases]
    assert loads[0] == {"profile": "synchronous"}
    assert [load["profile"] for load in loads] == ["synchronous", "throughput", "constant"]
    # The cap is in each later phase's listed load, beside its profile, as `run` lists it.
    assert all(load["max_concurrency"] == 2 for load in loads[1:])
    for row in phases[1:]:
        summary = json.loads((out / row["folder"] / "summary.json").read_text())
        assert summary["max_concurrency"] == 2
        assert most_in_flight(pd.read_parquet(out / row["folder"] / "requests.parquet")) <= 2
    # Synchronous: each request sent after the previous one's last chunk.
    first = pd.read_parquet(out / "phase-0" / "requests.parquet").sort_values("arrival_s")
    assert (first["arrival_s"].to_numpy()[1:] >= first["finish_s"].to_numpy()[:-1]).all()
