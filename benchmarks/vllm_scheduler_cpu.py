"""The CPU time of vLLM's own v1 scheduler per step, by running sequences.

    <vllm venv>/bin/python benchmarks/vllm_scheduler_cpu.py [--batches 1,16,64,128,192,256]

Runs in a vLLM venv (``benchmarks/vllm_oracle_venv.sh VERSION``) and imports
nothing from ``sim``: it builds vLLM's ``Scheduler`` as
``benchmarks/vllm_oracle_driver.py`` does (CPU, config-only model, a KV pool
large enough that nothing is preempted, chunked prefill on, prefix caching
off), admits ``n`` requests, lets every one finish its prefill, then times
``schedule()`` + ``update_from_output()`` (the engine core's two scheduler
calls per step) over steps where all ``n`` sequences decode, with fabricated
model outputs. The clock is the thread's CPU time (``time.thread_time``): on a
shared machine wall time also counts other processes' turns on the core
(wall time here put 256 sequences at 10-30 ms a step, thread time at 2 ms).
Prints per batch the median µs per step, then the OLS line
``median = intercept + slope * n`` with the slope's standard error: the
slope is ``EngineCpuConfig.scheduler_per_seq_s`` (``sim.cost.engine_cpu``)
measured on this CPU, the intercept part of ``per_step_s``. JSON with
``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_oracle_driver as driver


def spec_for(num_seqs: int) -> dict[str, object]:
    """A scheduler with room for ``num_seqs`` decoding sequences and no preemption."""
    return {
        "max_model_len_tokens": 4096,
        "block_size_tokens": 16,
        "enable_prefix_caching": False,
        "num_kv_blocks": num_seqs * 64 + 64,  # 1,024 tokens each: never short
        "max_num_seqs": max(num_seqs, 1),
        "max_num_batched_tokens": max(2048, num_seqs),
        "async_scheduling": False,
    }


def add_decoding_requests(scheduler: Any, hasher: Any, num_seqs: int) -> None:
    """``num_seqs`` requests of a 32-token prompt that never finish while timed."""
    for rid in range(num_seqs):
        request = {
            "request_id": rid,
            "num_shared_prefix_tokens": 0,
            "prefix_group": None,
            "num_prompt_tokens": 32,
            "num_output_tokens": 900,  # never finishes while timed
            "arrival_s": 0.0,
        }
        scheduler.add_request(driver.make_request(request, hasher))


def step_us(num_seqs: int, num_steps: int, num_warm_steps: int) -> list[float]:
    """Microseconds of each timed step with ``num_seqs`` sequences decoding."""
    scheduler, hasher = driver.build(spec_for(num_seqs))
    add_decoding_requests(scheduler, hasher, num_seqs)
    out_us = []
    for step in range(num_warm_steps + num_steps):
        start = time.thread_time()
        out = scheduler.schedule()
        middle = time.thread_time()
        output = driver.fabricate(scheduler, out)  # not the engine's work: not timed
        resumed = time.thread_time()
        scheduler.update_from_output(out, output)
        end = time.thread_time()
        if step >= num_warm_steps:
            if len(out.num_scheduled_tokens) != num_seqs or out.total_num_scheduled_tokens != (
                num_seqs
            ):
                raise RuntimeError(f"step {step}: not all {num_seqs} sequences decoding")
            out_us.append(((middle - start) + (end - resumed)) * 1e6)
    return out_us


def ols(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Intercept, slope and the slope's OLS standard error of ``ys`` on ``xs``."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = mean_y - slope * mean_x
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    slope_se = (residual / (n - 2) / sxx) ** 0.5 if n > 2 else float("nan")
    return intercept, slope, slope_se


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16,64,128,192,256")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per batch")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    medians = []
    for n in batches:
        # Two warm-up steps finish every 32-token prefill (budget >= 2,048 tokens).
        values = step_us(n, args.steps, num_warm_steps=5)
        medians.append(statistics.median(values))
        print(f"{n:5d} running: median {medians[-1]:9.1f} us/step over {len(values)} steps")
    intercept, slope, slope_se = ols([float(b) for b in batches], medians)
    print(
        f"vllm {driver.vllm.__version__}: {slope:.2f} +- {slope_se:.2f} us per running "
        f"sequence (OLS slope, 1 s.e.), intercept {intercept:.1f} us"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "vllm_version": driver.vllm.__version__,
                    "batches": batches,
                    "median_us": medians,
                    "slope_us_per_seq": slope,
                    "slope_se_us": slope_se,
                    "intercept_us": intercept,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
