"""A run of decode steps priced two ways, for the cost tests.

``run_prices`` takes a run's prices from ``sim.cost.base.decode_run_s`` (what
skip-ahead sums where the public table does not cover a run); ``by_loop`` builds
each step's shape by hand (step ``j``: every context ``j`` tokens longer) and
prices it with ``step_s``.
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from sim.config import FloatArray
from sim.cost.base import CostModel, StepShape, decode_run_s


def run_prices(
    cost: CostModel,
    num_seqs: int,
    context_tokens: int,
    num_steps: int,
    *,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> FloatArray:
    """The first ``num_steps`` prices of ``decode_run_s``, as an array."""
    run = decode_run_s(cost, num_seqs, context_tokens, max_context_tokens, min_context_tokens)
    return np.fromiter(islice(run, num_steps), np.float64, num_steps)


def by_loop(
    cost: CostModel,
    num_seqs: int,
    context_tokens: int,
    num_steps: int,
    *,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> FloatArray:
    """Each step's shape written out and priced by ``step_s``."""
    out = np.empty(num_steps, dtype=np.float64)
    for j in range(num_steps):
        out[j] = cost.step_s(
            StepShape(
                num_decode_seqs=num_seqs,
                num_decode_context_tokens=context_tokens + j * num_seqs,
                max_decode_context_tokens=max_context_tokens + j,
                min_decode_context_tokens=min_context_tokens + j,
            )
        )
    return out
