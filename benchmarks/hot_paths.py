"""Seconds of the vectorised hot paths against their goals, one run, side by side.

    python benchmarks/hot_paths.py             # full size: a million draws, requests, rows
    python benchmarks/hot_paths.py --scale 0.01

These goals were wall-clock asserts in ``tests/`` (issue 30: a shared, noisy
machine makes such a test flaky, and a slow CI hides them): drawing a million
arrival times or prompt lengths, generating a million-request workload, 200,000
closed-loop draws, one ``CalibratedCost.step_s`` call, and ``summarize`` over
200,000 requests and 2,000,000 steps. Each row prints the measured seconds,
the goal and their ratio (over 1: slower than the goal; the goals have a wide
margin, a per-element Python loop misses them by 10x or more). ``--scale``
shrinks every size (not the per-call goal) for a quick look; the goals then
scale with it. Exit status 0 whatever the figures: read the ratio column.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
from pydantic import TypeAdapter

from sim.cost.base import StepShape
from sim.cost.calibrated import CalibratedCost, FitCoefficients
from sim.engine.records import RequestTable
from sim.engine.step_runs import StepTable
from sim.metrics.stats import Slo, summarize
from sim.workload.arrivals import ArrivalConfig, arrival_times_s
from sim.workload.generate import (
    ClosedLoopSource,
    ClosedLoopWorkload,
    SyntheticWorkload,
    WorkloadConfig,
    generate_open_loop,
)
from sim.workload.lengths import LengthConfig, make_length_sampler

ARRIVALS = [
    {"kind": "poisson", "rate_per_s": 4.0},
    {"kind": "gamma", "rate_per_s": 4.0, "burstiness": 0.3},
    {"kind": "constant", "rate_per_s": 4.0},
]
LENGTHS = [
    {"kind": "uniform", "min_tokens": 10, "max_tokens": 1000},
    {"kind": "normal", "mean_tokens": 200, "std_tokens": 80, "max_tokens": 1000},
    {"kind": "lognormal", "median_tokens": 800, "sigma": 1.0, "max_tokens": 8000},
    {"kind": "exponential", "mean_tokens": 30},
]


@dataclass(frozen=True)
class Row:
    """One timed operation: what, its measured seconds and its goal (s)."""

    name: str
    seconds: float
    goal_s: float

    @property
    def ratio(self) -> float:
        return self.seconds / self.goal_s


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of ``fn`` (perf_counter)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def arrival_rows(n: int, goal_s: float) -> list[Row]:
    adapter: TypeAdapter[ArrivalConfig] = TypeAdapter(ArrivalConfig)
    rows = []
    for data in ARRIVALS:
        config = adapter.validate_python(data)
        seconds = timed(partial(arrival_times_s, config, np.random.default_rng(0), num_requests=n))
        rows.append(Row(f"{n:,} {data['kind']} arrival times", seconds, goal_s))
    return rows


def length_row(n: int, goal_s: float) -> Row:
    adapter: TypeAdapter[LengthConfig] = TypeAdapter(LengthConfig)
    samplers = [make_length_sampler(adapter.validate_python(data)) for data in LENGTHS]
    rng = np.random.default_rng(0)
    seconds = timed(lambda: [sampler.sample(rng, n) for sampler in samplers])
    kinds = ", ".join(str(data["kind"]) for data in LENGTHS)
    return Row(f"{n:,} lengths from each of {kinds}", seconds, goal_s)


def workload_rows(n: int, num_closed: int, goal_s: float) -> list[Row]:
    adapter: TypeAdapter[WorkloadConfig] = TypeAdapter(WorkloadConfig)
    open_config = adapter.validate_python(
        {
            "kind": "synthetic",
            "arrival": {"kind": "gamma", "rate_per_s": 50.0, "burstiness": 0.5},
            "prompt_tokens": LENGTHS[2],
            "output_tokens": LENGTHS[1],
            "num_requests": n,
        }
    )
    closed_config = adapter.validate_python(
        {
            "kind": "closed_loop",
            "num_users": 4,
            "think_time_s": {"kind": "exponential", "mean_s": 2.0},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 100},
            "output_tokens": {"kind": "exponential", "mean_tokens": 30},
            "num_requests": 100,
        }
    )
    assert isinstance(open_config, SyntheticWorkload)
    assert isinstance(closed_config, ClosedLoopWorkload)
    generate = timed(lambda: generate_open_loop(open_config, np.random.default_rng(0)))
    source = ClosedLoopSource(closed_config, np.random.default_rng(0))

    def draw() -> None:
        for _ in range(num_closed):
            source.next_lengths()
            source.next_think_s()

    return [
        Row(f"a {n:,}-request open-loop workload", generate, goal_s),
        Row(f"{num_closed:,} closed-loop lengths and think times", timed(draw), goal_s),
    ]


def step_row(num_calls: int) -> Row:
    cost = CalibratedCost(
        FitCoefficients(
            kind="piecewise",
            token_knots=[1, 4, 16, 256],
            token_knot_s=[5e-3, 6e-3, 4e-3, 30e-3],
            decode_batch_knots=[1, 8, 64],
            decode_batch_knot_s=[1e-4, 2e-3, 1e-2],
            per_prefill_seq_s=1e-3,
            per_prefill_attention_pair_s=1e-7,
            per_prefill_kv_read_token_s=2e-6,
            per_decode_seq_s=5e-4,
            decode_context_hinges=[0, 1024, 8192],
            per_decode_context_token_s=[1e-6, 0.0, 3e-6],
            floor_s=1e-3,
        )
    )
    shape = StepShape.build(prefill_chunks=[(128, 64)], decode_context_tokens=[500] * 30)

    def calls() -> None:
        for _ in range(num_calls):
            cost.step_s(shape)

    return Row("one CalibratedCost.step_s call", timed(calls) / num_calls, 50e-6)


def summary_row(num_requests: int, num_steps: int, goal_s: float) -> Row:
    rng = np.random.default_rng(7)
    arrival = np.sort(rng.uniform(0, 600, num_requests))
    generated = rng.integers(1, 300, num_requests)
    ttft = rng.exponential(0.2, num_requests) + 0.01
    rejected = np.flatnonzero(rng.random(num_requests) < 0.01)
    requests = RequestTable(
        {
            "request_id": np.arange(num_requests),
            "arrival_s": arrival,
            "ready_s": arrival,
            "first_scheduled_s": arrival + ttft / 2,
            "first_token_s": arrival + ttft,
            "finish_s": arrival + ttft + 0.02 * generated,
            "num_prompt_tokens": rng.integers(1, 2000, num_requests),
            "num_output_tokens": generated,
            "num_generated_tokens": generated,
        },
        {int(i): "kv" for i in rejected},
    )
    start = np.cumsum(rng.uniform(0.01, 0.03, num_steps))
    counts = {"num_prefill_tokens": 0, "num_decode_seqs": 0, "num_outputs": 0}
    itl_tokens = rng.integers(0, 64, num_steps)
    frame = pd.DataFrame(
        {"start_s": start, "end_s": start + 0.02, "num_itl_tokens": itl_tokens, **counts}
    )
    steps = StepTable.from_frame(frame)  # one segment per step: ITL's slowest log
    extra = rng.uniform(0, 1, 1000)
    seconds = timed(lambda: summarize(requests, steps, extra, Slo(ttft_ms=300)))
    return Row(f"summarize {num_requests:,} requests, {num_steps:,} steps", seconds, goal_s)


def measure(scale: float) -> list[Row]:
    """Every row at ``scale`` times its full size (goals scaled alike, per-call goal kept)."""

    def size(n: int) -> int:
        return max(1, round(n * scale))

    return [
        *arrival_rows(size(1_000_000), 1.0 * scale),
        length_row(size(1_000_000), 1.0 * scale),
        *workload_rows(size(1_000_000), size(200_000), 1.0 * scale),
        step_row(size(20_000)),
        summary_row(size(200_000), size(2_000_000), 10.0 * scale),
    ]


def format_rows(rows: Sequence[Row]) -> str:
    width = max(len(row.name) for row in rows)
    lines = [f"{'operation':<{width}}  {'seconds':>10}  {'goal s':>10}  {'ratio':>6}"]
    for row in rows:
        flag = "  over the goal" if row.ratio > 1.0 else ""
        lines.append(
            f"{row.name:<{width}}  {row.seconds:>10.3g}  {row.goal_s:>10.3g}  "
            f"{row.ratio:>6.2f}{flag}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="size factor (default 1)")
    args = parser.parse_args(argv)
    if not 0.0 < args.scale <= 1.0:
        parser.error(f"--scale must be in (0, 1], got {args.scale}")
    print(format_rows(measure(args.scale)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
