"""Does a step's time depend on what ran before it? Cache residency, measured.

    python benchmarks/cache_residency.py                 # tiny and smollm2-135m, ~1 min

A cost model prices a step from its shape alone. That holds when the model's
weights stream from memory every step (the step costs the same whatever ran
before), and fails when they half fit in the last-level cache: then a step
after an interruption re-reads them from DRAM, and the next few steps warm up
gradually. This benchmark times one batch-1 decode step at positions 1..8
after four interruptions, side by side in one process, one torch thread:

- ``none``: back-to-back steps (the reference);
- ``idle 100 ms``: ``time.sleep(0.1)``, as an engine waiting for arrivals;
- ``prefill``: one 256-token prefill step of the same model;
- ``other weights``: 30 ms of steps of a second instance of the same model
  (same shapes, other addresses), so only the cache contents differ.

It prints the median step time (ms) per position and the first step's ratio
to the back-to-back median. On this project's 2-core machine the 52 MB
``tiny`` model's first step after 100 ms of idling takes about 2x the
back-to-back time, and it takes ~5 steps to warm up again; SmolLM2-135M
(540 MB) moves by a few per cent. ``docs/validation.md`` uses this to explain
why the study runs on SmolLM2-135M.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration.model import DecodeItem, LlamaModel, PrefillChunk
from sim.hardware.specs import model_preset

NUM_POSITIONS = 8


def _decode_timer(model: LlamaModel) -> Callable[[], float]:
    """One batch-1 decode step at context 128; returns its wall time in seconds."""
    cache = model.new_cache(2, 512)

    def step() -> float:
        cache.lengths[0] = 127  # the same context every time: only history varies
        start = time.perf_counter()
        model.forward_step(cache, decode=[DecodeItem(0, 7)])
        return time.perf_counter() - start

    return step


def _interruptions(model: LlamaModel, other: LlamaModel) -> dict[str, Callable[[], None]]:
    cache = model.new_cache(2, 512)
    other_step = _decode_timer(other)
    prompt = list(range(3, 259))

    def prefill() -> None:
        cache.lengths[1] = 0
        model.forward_step(cache, [PrefillChunk(1, prompt)])

    def other_weights() -> None:
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            other_step()

    return {
        "none": lambda: None,
        "idle 100 ms": lambda: time.sleep(0.1),
        "prefill": prefill,
        "other weights": other_weights,
    }


def measure(model_name: str, repeats: int) -> dict[str, list[float]]:
    """Median ms per position after each interruption."""
    spec = model_preset(model_name)
    model = LlamaModel(spec, seed=0)
    other = LlamaModel(spec, seed=1)
    step = _decode_timer(model)
    out: dict[str, list[float]] = {}
    with torch.inference_mode():
        for _ in range(3):  # first calls allocate and dispatch
            step()
        for name, interrupt in _interruptions(model, other).items():
            rows = []
            for _ in range(repeats):
                interrupt()
                rows.append([step() * 1e3 for _ in range(NUM_POSITIONS)])
            out[name] = np.median(np.asarray(rows), axis=0).tolist()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"])
    parser.add_argument("--repeats", type=int, default=10, help="interruptions per kind")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.models:
        table = measure(name, args.repeats)
        reference = float(np.median(table["none"]))
        print(f"\n{name}: batch-1 decode step (ms) at positions 1..{NUM_POSITIONS} after ...")
        for kind, times in table.items():
            cells = " ".join(f"{t:6.1f}" for t in times)
            print(f"  {kind:14s} {cells}   first/back-to-back {times[0] / reference:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
