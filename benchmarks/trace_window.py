"""trace.json of a long run: the traced window read from the compact step log vs. the expanded one.

``Result.trace`` writes the first 100 requests' phases and the steps within
their time window. It reads that window from the compact step log
(``StepRuns.overlapping``), so its cost does not grow with the run; the
expanded log (a row per step, ``RawResult.steps``) costs time and memory in
proportion to the whole run. Both are timed here, one after the other, on the
base workload of ``sim_speed.py``, and the documents compared (they must be
equal). Peak memory (RSS) is the process's high-water mark, so the compact
path runs first: its figure is the rise it causes, the expanded path's the
rise after it.

    python benchmarks/trace_window.py                       # 300,000 requests
    python benchmarks/trace_window.py --num-requests 1000000
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from sim_speed import scenario

from sim import api
from sim.engine.step_runs import StepTable
from sim.metrics.trace import trace_document


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=300_000)
    parser.add_argument("--traced", type=int, default=100, help="requests in the trace")
    args = parser.parse_args(argv)
    result = api.run(scenario(args.num_requests), workers=1, trace_requests=args.traced)
    raw = result.raw
    print(f"{args.num_requests:,d} requests, {raw.step_table.num_steps:,d} steps")

    before_mb, started = peak_mb(), time.perf_counter()
    compact = result.trace()
    compact_s, compact_mb = time.perf_counter() - started, peak_mb() - before_mb

    before_mb, started = peak_mb(), time.perf_counter()
    spans = result.spans(args.traced)
    metadata = {"scenario": result.scenario.name, "num_traced_requests": args.traced}
    rows = StepTable.from_frame(raw.steps)  # the expanded log, one segment per step
    expanded = trace_document(spans, raw.records, rows, raw.timeseries, metadata)
    expanded_s, expanded_mb = time.perf_counter() - started, peak_mb() - before_mb

    print(f"compact log:  {compact_s:6.2f} s, peak +{compact_mb:6.0f} MB")
    print(f"expanded log: {expanded_s:6.2f} s, peak +{expanded_mb:6.0f} MB")
    print(f"ratio: {expanded_s / compact_s:.1f}x faster; same document: {compact == expanded}")
    return 0 if compact == expanded else 1


if __name__ == "__main__":
    sys.exit(main())
