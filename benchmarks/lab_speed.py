"""servesim lab's responsiveness: how long a slider move takes to come back as plots.

Starts ``servesim lab --port 0`` as a user would (the default chat scenario, 2,000
requests), waits for its first run (the compiled loop loading), then times moves
of the page's controls as the page makes them, one after another:

- ``rate``: the arrival-rate slider (the knee's other rates come from its cache);
- ``max_num_seqs``: an engine limit (every rate of the knee is run again).

For each move it prints the time until the run's answer (the CDFs, time series,
waterfall and summary: what the page redraws first) and until the knee's (the
knee and the caption). ``--browser`` times the same moves in the page itself
(Debian's chromium via Playwright), from the slider's input event to the plots
drawn. The target (issue 42): a slider move answered in under 1 s on 2 cores.

    python benchmarks/lab_speed.py [--moves 8] [--browser]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATE_KEY = "workload.arrival.rate_per_s"


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        found: dict[str, object] = json.loads(answer.read())
        return found


def start_lab(root: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``servesim lab --port 0`` of the tree at ``root`` (``args``: e.g. its scenario),
    started as a user would, and
    the URL it printed (also ``tests/test_lab_browser.py``'s server). RuntimeError,
    with what it printed, when its first line holds no URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "lab", *args, "--port", "0"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"http://\S+/", line)
    if match is None:
        process.kill()
        raise RuntimeError(f"servesim lab did not print its URL: {line}{process.stdout.read()}")
    return process, match.group(0)


def _moves(key: str, count: int) -> list[object]:
    if key == RATE_KEY:
        return [round(10 + 0.5 * (i + 1), 2) for i in range(count)]
    return [256 - 16 * (i + 1) for i in range(count)]


def http_moves(url: str, key: str, count: int, values: dict[str, object]) -> None:
    plots_ms, knee_ms = [], []
    request_id = 100 if key == RATE_KEY else 200
    for value in _moves(key, count):
        request_id += 1
        moved = {**values, key: value}
        started = time.perf_counter()
        answer = _post(url + "api/run", {"id": request_id, "values": moved})
        plots_ms.append(1000 * (time.perf_counter() - started))
        assert "summary" in answer, answer
        knee = _post(url + "api/knee", {"id": request_id, "values": moved})
        knee_ms.append(1000 * (time.perf_counter() - started))
        assert "knee" in knee, knee
    print(
        f"{key:<32} plots: median {statistics.median(plots_ms):6.0f} ms, max "
        f"{max(plots_ms):6.0f} ms | with the knee: median {statistics.median(knee_ms):6.0f} ms,"
        f" max {max(knee_ms):6.0f} ms  ({count} moves)"
    )


def browser_moves(url: str, count: int) -> None:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("SERVESIM_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        raise SystemExit("--browser: no chromium on PATH")
    low, high = 0.25, 200.0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 1250})
        page.goto(url)
        page.wait_for_function("window.lab && window.lab.drawnKnee > 0", timeout=600_000)
        plots_ms, knee_ms = [], []
        import math

        for rate in _moves(RATE_KEY, count):
            position = round(1000 * math.log(float(str(rate)) / low) / math.log(high / low))
            started = time.perf_counter()
            page.fill("#c-workload-arrival-rate_per_s", str(position))
            page.wait_for_function("window.lab.drawnRun === window.lab.lastId", polling=5)
            plots_ms.append(1000 * (time.perf_counter() - started))
            page.wait_for_function("window.lab.drawnKnee === window.lab.lastId", polling=5)
            knee_ms.append(1000 * (time.perf_counter() - started))
        browser.close()
    print(
        f"{'in the page (rate slider)':<32} plots: median {statistics.median(plots_ms):6.0f} ms,"
        f" max {max(plots_ms):6.0f} ms | with the knee: median "
        f"{statistics.median(knee_ms):6.0f} ms, max {max(knee_ms):6.0f} ms  ({count} moves)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=8)
    parser.add_argument("--browser", action="store_true", help="also time moves in chromium")
    args = parser.parse_args()
    process, url = start_lab(ROOT)
    try:
        setup = json.loads(urllib.request.urlopen(url + "api/setup").read())
        values = setup["values"]
        started = time.perf_counter()
        _post(url + "api/run", {"id": 1, "values": values})
        _post(url + "api/knee", {"id": 1, "values": values})
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        print(
            f"servesim lab, default scenario ({values['workload.num_requests']} requests), "
            f"{cpus} CPUs; first run and knee (compiled loop loading): "
            f"{time.perf_counter() - started:.1f} s"
        )
        http_moves(url, RATE_KEY, args.moves, values)
        http_moves(url, "scheduler.max_num_seqs", args.moves, values)
        if args.browser:
            browser_moves(url, args.moves)
    finally:
        process.terminate()
        process.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
