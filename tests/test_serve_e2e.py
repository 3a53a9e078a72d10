"""End to end: ``servesim serve`` on localhost, ``measure --endpoint`` over HTTP, ``validate``.

The server runs in a subprocess on a free port (``--port 0``; its first
line names the URL). ~60 requests of ``validate_tiny_cpu`` (15 s of
arrivals at 4 req/s) are measured through the HTTP client, the folder is
validated against the simulator, and the server is stopped with SIGTERM.
~35 s on two shared cores.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.cli import main as cli_main
from sim.scenario import load_scenario
from sim.workload.generate import SyntheticWorkload, generate_open_loop

pytest.importorskip("torch")
pytest.importorskip("aiohttp")

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
OVERRIDES = ["workload.duration_s=15"]


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    return lines.get(timeout=timeout_s)


@pytest.mark.slow
def test_serve_measure_over_http_and_validate(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "serve", str(SCENARIO), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _first_line(server, timeout_s=120)
        assert line.startswith("servesim serve: tiny on http://127.0.0.1:"), line
        url = line.split(" on ")[1].split()[0]
        sets = [x for o in OVERRIDES for x in ("--set", o)]
        measured = tmp_path / "measured"
        line_args = ["measure", str(SCENARIO), "--endpoint", url, "--out", str(measured)]
        assert cli_main([*line_args, "-q", *sets]) == 0
        report = tmp_path / "validation"
        # Over HTTP the run cannot see the server's device: this test knows it is this CPU.
        validate_args = ["validate", str(SCENARIO), "--measured", str(measured)]
        validate_args += ["--assume-device", "cpu"]
        assert cli_main([*validate_args, "--out", str(report), *sets]) == 0
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert "servesim serve: stopped" in out

    scenario = load_scenario(SCENARIO, OVERRIDES)
    assert isinstance(scenario.workload, SyntheticWorkload)
    work = generate_open_loop(scenario.workload, np.random.default_rng(scenario.seed), ROOT)
    requests = pd.read_parquet(measured / "requests.parquet")
    summary = json.loads((measured / "summary.json").read_text())
    assert 45 <= len(requests) == len(work.arrival_s) <= 80
    assert summary["num_failed"] == 0 and summary["status"] == "complete"
    assert summary["prompt_tokens"].startswith("exact") and summary["ignore_eos"] is True
    # The server counted exactly the scenario's lengths, and streamed one chunk per token.
    # A chunk with no text is not counted by the client: the server holds back the
    # first byte of a character split across tokens (the rare sampled ids in the
    # byte range above 127; sim.openai.tokenizer), so a few requests have fewer.
    assert requests["num_prompt_tokens"].tolist() == work.num_prompt_tokens.tolist()
    assert requests["num_generated_tokens"].tolist() == work.num_output_tokens.tolist()
    assert (requests["num_chunks"] <= requests["num_generated_tokens"]).all()
    assert requests["num_chunks"].sum() >= 0.98 * requests["num_generated_tokens"].sum()
    assert (requests["arrival_s"] >= requests["scheduled_arrival_s"]).all()
    tokens = pd.read_parquet(measured / "tokens.parquet")
    assert len(tokens) == int(requests["num_chunks"].sum())

    validation = json.loads((report / "validation.json").read_text())
    (name, comparison), *_ = validation["predictions"].items()
    assert name.startswith("microbenchmarks")
    for metric in ("ttft", "tpot", "e2el"):
        assert comparison[metric]["paired"]["count"] == len(requests)
        assert np.isfinite(comparison[metric]["error_pct"]["p50"])
    assert "TTFT" in (report / "report.md").read_text()
