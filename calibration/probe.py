"""How fast the machine is right now: a few step shapes timed around a measured run.

A shared CPU host's speed wanders: on this project's 2-core cloud machine a
128-token prefill of SmolLM2-135M took 233-280 ms over two minutes, and a
measured run can go 10 % slower or faster than the calibration made minutes
before it. A probe times three fixed step shapes (a prefill, a decode batch,
a mixed step) on the run's model just before and just after the run, a few
seconds each. ``servesim validate`` divides them by the cost model's
prediction for the same shapes: the ratio tells how much of a miss is the
machine's drift rather than the cost model's, and a prediction scaled by it
stays out of sample (the probe is a microbenchmark, never the run itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from calibration.drift import PROBE_POINTS
from calibration.model import DecodeItem, LlamaModel, PrefillChunk


def _timer(
    model: LlamaModel, chunks: tuple[tuple[int, int], ...], contexts: tuple[int, ...]
) -> Callable[[], float]:
    """One step of this shape, timed; chunk i in slot i, decode j in slot len(chunks) + j."""
    longest = max([c + p for c, p in chunks] + list(contexts))
    cache = model.new_cache(len(chunks) + len(contexts), longest + 1)
    prefill = [PrefillChunk(i, [3 + j % 250 for j in range(c)]) for i, (c, _) in enumerate(chunks)]
    decode = [DecodeItem(len(chunks) + j, 7) for j in range(len(contexts))]
    cuda = model.device_.type == "cuda"

    def run() -> float:
        for slot, (_, cached) in enumerate(chunks):
            cache.lengths[slot] = cached
        for j, context in enumerate(contexts):
            cache.lengths[len(chunks) + j] = context - 1  # the step computes the last one
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        model.forward_step(cache, prefill, decode)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    return run


def run_probe(model: LlamaModel, num_repeats: int = 5) -> dict[str, float]:
    """Median wall time (s) per probe shape: ``num_repeats`` runs after one untimed run."""
    medians: dict[str, float] = {}
    with torch.inference_mode():
        for name, (chunks, contexts) in PROBE_POINTS.items():
            run = _timer(model, chunks, contexts)
            run()  # as in the profiler: a timed step follows one of the same shape
            medians[name] = float(np.median([run() for _ in range(num_repeats)]))
    return medians
