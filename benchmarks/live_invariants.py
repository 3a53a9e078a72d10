"""What ``servesim serve --simulate``'s live invariant checks cost the engine's loop.

The live engine (``sim.serving.realtime.SimulatedEngine``) calls
``sim.metrics.invariants.LiveChecks`` after each commit and at each empty plan.
Its loop falls behind real time (``servesim:simulation_lag_seconds``) only when
its own work on a step outlasts the step, so the figure that matters is the
checks' time per step against the steps' predicted length. Two measurements:

- ``cpu`` (default): the same workload driven on a clock of the script's own
  (``run_until``, no sleeping), with and without the checks, alternately,
  best of ``--repeats``: the loop's seconds per step each way, the difference
  as a share of the mean predicted step, and the slowest single check call
  (a whole stretch's, made while the engine is idle).
- ``--wall``: the engine's own thread on the wall clock, the same arrivals
  submitted at their times, each way: the lag of every committed step (p50,
  p99, max). Noisy on a shared machine: other processes decide how late the
  thread wakes.

    python benchmarks/live_invariants.py
    python benchmarks/live_invariants.py --wall --num-requests 200
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.api import engine_for  # noqa: E402
from sim.engine.scheduler import EngineCore  # noqa: E402
from sim.metrics.invariants import LiveChecks  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402
from sim.serving.realtime import SimulatedEngine  # noqa: E402
from sim.serving.replica_config import ReplicaConfig  # noqa: E402
from sim.serving.stream import Emitted, Submission  # noqa: E402

SCENARIO = ROOT / "scenarios" / "llama70b_tp.yaml"  # 4 H100s, roofline: steps of ~15 ms


class Clock:
    """A clock the script sets (s)."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class TimedChecks:
    """``LiveChecks``, each call's time kept."""

    def __init__(self) -> None:
        self.checks = LiveChecks()
        self.calls_s: list[float] = []

    def __call__(self, core: EngineCore) -> None:
        start = time.perf_counter()
        self.checks(core)
        self.calls_s.append(time.perf_counter() - start)


def workload(num: int, rate_per_s: float, seed: int) -> tuple[list[float], list[int], list[int]]:
    """Poisson arrivals, prompts 16-900 tokens, outputs 1-256 (s, tokens, tokens)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_per_s, num)).tolist()
    return arrivals, rng.integers(16, 900, num).tolist(), rng.integers(1, 256, num).tolist()


def prompt(index: int, num_tokens: int) -> list[int]:
    return [3 + index // 256, 3 + index % 256] + [65] * (num_tokens - 2)


def ignore(_: Emitted) -> None:
    pass


def drive(
    config: ReplicaConfig,
    work: tuple[list[float], list[int], list[int]],
    check: Callable[[EngineCore], None] | None,
) -> tuple[float, int, float]:
    """The loop's seconds on the workload, its steps, and their predicted seconds."""
    clock = Clock()
    engine = SimulatedEngine(config, clock, check=check)
    arrivals, prompts, outputs = work
    start = time.perf_counter()
    for i, arrival_s in enumerate(arrivals):
        engine.run_until(arrival_s)
        clock.now_s = arrival_s
        engine.submit(Submission(prompt(i, prompts[i]), outputs[i], True, ignore))
    engine.run_until(float("inf"))
    loop_s = time.perf_counter() - start
    steps = engine.core.steps.frame()
    return loop_s, len(steps), float((steps["end_s"] - steps["start_s"]).sum())


def cpu(
    config: ReplicaConfig, work: tuple[list[float], list[int], list[int]], repeats: int
) -> None:
    best = {"off": np.inf, "on": np.inf}
    num_steps = busy_s = 0.0
    slowest_s = 0.0
    per_call: list[float] = []
    for _ in range(repeats):
        loop_s, num_steps, busy_s = drive(config, work, None)
        best["off"] = min(best["off"], loop_s)
        timed = TimedChecks()
        loop_s, _, _ = drive(config, work, timed)
        best["on"] = min(best["on"], loop_s)
        slowest_s = max(slowest_s, max(timed.calls_s))
        per_call = timed.calls_s
    step_s = busy_s / num_steps
    off_us, on_us = (best[k] / num_steps * 1e6 for k in ("off", "on"))
    calls_us = np.asarray(per_call) * 1e6
    mean_ms = step_s * 1e3
    print(f"{len(work[0])} requests, {num_steps:.0f} steps of {mean_ms:.2f} ms predicted (mean)")
    print(f"loop per step: {off_us:.1f} us unchecked, {on_us:.1f} us checked (best of {repeats})")
    print(
        f"checks: +{on_us - off_us:.1f} us a step = {(on_us - off_us) / (step_s * 1e6):.2%} "
        f"of a predicted step; per call mean {calls_us.mean():.1f} us, p50 "
        f"{np.median(calls_us):.1f} us, p90 {np.percentile(calls_us, 90):.1f} us, slowest "
        f"{slowest_s * 1e3:.2f} ms (a call the OS preempts, on a shared machine, too)"
    )


def lags(
    config: ReplicaConfig,
    work: tuple[list[float], list[int], list[int]],
    check: Callable[[EngineCore], None] | None,
) -> list[float]:
    """Every committed step's lag (s) with the workload sent on the wall clock."""
    arrivals, prompts, outputs = work
    engine = SimulatedEngine(config, check=check)
    lags_s: list[float] = []
    note = engine._note_lag

    def keep(lag_s: float) -> None:
        lags_s.append(lag_s)
        note(lag_s)

    engine._note_lag = keep  # type: ignore[method-assign]
    done = threading.Semaphore(0)

    def sink(event: Emitted) -> None:
        if event.finish_reason is not None:
            done.release()

    engine.start()
    origin = time.perf_counter()
    for i, arrival_s in enumerate(arrivals):
        time.sleep(max(0.0, arrival_s - (time.perf_counter() - origin)))
        engine.submit(Submission(prompt(i, prompts[i]), outputs[i], True, sink))
    for _ in arrivals:
        done.acquire(timeout=60)
    engine.stop()
    return lags_s


def wall(config: ReplicaConfig, work: tuple[list[float], list[int], list[int]]) -> None:
    for label, check in (("unchecked", None), ("checked", LiveChecks())):
        lags_ms = np.maximum(np.asarray(lags(config, work, check)), 0.0) * 1e3
        print(
            f"{label:9}: {len(lags_ms)} steps, lag p50 {np.median(lags_ms):.3f} ms, "
            f"p99 {np.percentile(lags_ms, 99):.3f} ms, max {lags_ms.max():.3f} ms"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=12.0, help="requests per second")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wall", action="store_true", help="the real thread's lag instead")
    args = parser.parse_args(argv)
    config = engine_for(load_scenario(SCENARIO))
    work = workload(args.num_requests, args.rate, seed=0)
    if args.wall:
        wall(config, work)
    else:
        # A script's clock jumps from arrival to arrival: the loop's lag warnings are moot.
        logging.getLogger("servesim.serve").setLevel(logging.ERROR)
        cpu(config, work, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
