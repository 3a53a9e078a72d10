"""``servesim serve --simulate`` against the simulator: does a client see the prediction?

Starts ``servesim serve --simulate SCENARIO --port 0`` in a subprocess, measures
the scenario's workload against it with ``servesim measure --endpoint`` (a
second subprocess, as a user would), and compares the client's p50 TTFT and
TPOT (and p90) with two offline predictions of the same workload:

- ``planned``: ``servesim run`` of the scenario (``sim.api.run``): the arrival
  times the client was asked to keep;
- ``as sent``: the same requests replayed at the times the client actually
  sent them (``sim.api.replay`` of the measured ``arrival_s``), which takes the
  client's own lateness out of the comparison.

The default workload is small (200 requests, Poisson at 8/s, prompts ~200
tokens, outputs ~64) on Llama-3-70B over 4 H100s (``scenarios/llama70b_tp.yaml``,
roofline): its steps take ~15 ms, so a millisecond of sleep jitter is a few per
cent of a token gap at worst. The wall time is the workload's (~25 s) plus
start-up. Target (issue 31): within 5 % at p50. Errors are printed, not
asserted: on a shared machine other processes' load decides how late the
server's threads wake.

    python benchmarks/simulated_server.py
    python benchmarks/simulated_server.py --set workload.arrival.rate_per_s=12
    python benchmarks/simulated_server.py --scenario scenarios/chat.yaml --no-default-sets
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = "scenarios/llama70b_tp.yaml"
DEFAULT_SETS = (
    "workload.num_requests=200",
    "workload.arrival.rate_per_s=8",
    "workload.prompt_tokens.median_tokens=200",
    "workload.prompt_tokens.max_tokens=800",
    "workload.output_tokens.median_tokens=64",
    "workload.output_tokens.min_tokens=2",
    "workload.output_tokens.max_tokens=256",
)


def layered_sets(*layers: Sequence[str]) -> list[str]:
    """``--set KEY=VALUE`` settings, each layer over the ones before
    (``sim.scenario.overrides.layered``: the faces refuse one key given twice with two
    values, however spelled; the defaults above are defaults, so a user's own ``--set``
    of the same key, or of its section whole, replaces them)."""
    from sim.scenario.overrides import layered

    sets: list[str] = []
    for layer in layers:
        sets = layered(sets, layer)
    return sets


TARGET = 0.05  # relative error at p50 (issue 31)
METRICS = ("median_ttft_ms", "median_tpot_ms", "p90_ttft_ms", "p90_tpot_ms")
START_TIMEOUT_S = 60.0


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sim.cli", *args]


def with_sets(sets: Sequence[str]) -> list[str]:
    return [part for item in sets for part in ("--set", item)]


def start_server(scenario: str, sets: Sequence[str]) -> tuple[subprocess.Popen[str], str]:
    """``serve --simulate`` on a free port; its URL from the first line it prints."""
    server = subprocess.Popen(
        cli("serve", "--simulate", scenario, *with_sets(sets), "--port", "0"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert server.stdout is not None and server.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(server.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
    try:
        line = lines.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        server.kill()
        raise SystemExit("serve --simulate printed no URL in time") from None
    if "http://" not in line:
        server.kill()
        raise SystemExit(f"serve --simulate failed: {line}{server.stderr.read()}")
    print(server.stderr.readline().strip())  # what prices the steps
    return server, "http://" + line.split("http://")[1].split()[0]


def measure(scenario: str, sets: Sequence[str], url: str, out: Path) -> dict[str, float]:
    """``servesim measure --endpoint``; its summary."""
    subprocess.run(
        cli("measure", scenario, *with_sets(sets), "--endpoint", url, "--out", str(out), "-q"),
        cwd=ROOT,
        check=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    summary: dict[str, float] = json.loads((out / "summary.json").read_text())
    return summary


def predictions(
    scenario: str, sets: Sequence[str], measured: pd.DataFrame
) -> tuple[dict[str, float], dict[str, float]]:
    """The planned workload's summary, and the summary of the requests as sent."""
    from sim import api
    from sim.scenario import load_scenario
    from sim.workload.generate import RequestArrays

    base_dir = (ROOT / scenario).parent
    loaded = load_scenario(ROOT / scenario, list(sets))
    planned = dict(api.run(loaded, base_dir=base_dir).summary)
    sent = measured.sort_values("arrival_s")
    work = RequestArrays(
        sent["arrival_s"].to_numpy(np.float64) - float(sent["arrival_s"].min()),
        sent["num_prompt_tokens"].to_numpy(np.int64),
        sent["num_output_tokens"].to_numpy(np.int64),
    )
    as_sent = dict(api.replay(loaded, work).summary)
    return planned, as_sent


def error(measured: float, predicted: float) -> float:
    return (measured - predicted) / predicted


def report(measured: dict[str, float], planned: dict[str, float], as_sent: dict[str, float]) -> int:
    """The comparison table; the number of p50 errors over the target (against as sent)."""
    print(f"{'metric':16} {'measured':>9} {'planned':>9} {'err':>7} {'as sent':>9} {'err':>7}")
    over = 0
    for key in METRICS:
        m, p, s = measured[key], planned[key], as_sent[key]
        print(f"{key:16} {m:9.2f} {p:9.2f} {error(m, p):+7.1%} {s:9.2f} {error(m, s):+7.1%}")
        if key.startswith("median") and abs(error(m, s)) > TARGET:
            over += 1
    print(
        f"completed {measured['completed']:.0f}, failed {measured.get('num_failed', 0)}; "
        f"target: p50 within {TARGET:.0%}"
    )
    return over


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=SCENARIO)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--no-default-sets", action="store_true", help="the scenario's own workload"
    )
    args = parser.parse_args(argv)
    sets = layered_sets([] if args.no_default_sets else DEFAULT_SETS, args.set)
    server, url = start_server(args.scenario, sets)
    try:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "measured"
            measured = measure(args.scenario, sets, url, out)
            requests = pd.read_parquet(out / "requests.parquet")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    planned, as_sent = predictions(args.scenario, sets, requests)
    return 1 if report(measured, planned, as_sent) else 0


if __name__ == "__main__":
    sys.exit(main())
