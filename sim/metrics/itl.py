"""Inter-token latency from the step log: each step's gap, weighted by the tokens that saw it.

A run's compact log (``StepTable``, tens of millions of steps) is read a block
of segments at a time, so the only arrays its length are the (gap, weight)
pairs; an expanded one (a measured run's frame) is read whole. Both give the
same pairs in the same order, hence the same statistics to the bit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from sim.engine.records import floats, require_columns
from sim.engine.step_runs import StepTable
from sim.metrics.quantiles import Summary, latency_stats_ms

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.integer]

STEP_COLUMNS = ("start_s", "end_s", "num_itl_tokens")
_SEGMENTS_PER_BLOCK = 1 << 16  # a block's temporaries: a few MB


def itl_distribution(
    steps: pd.DataFrame | StepTable,
    extra_itl_s: npt.ArrayLike,
    percentiles: Sequence[float] = (90, 99),
) -> Summary:
    """ITL statistics (``mean_itl_ms`` ...): step gaps weighted by ``num_itl_tokens``
    plus each ``extra_itl_s`` gap with weight 1."""
    gaps, weights = step_itl_gaps_s(steps, extra_itl_s)
    return latency_stats_ms("itl", gaps, weights, percentiles, overwrite=True)


def step_itl_gaps_s(
    steps: pd.DataFrame | StepTable, extra_itl_s: npt.ArrayLike = ()
) -> tuple[FloatArray, FloatArray]:
    """Each step's inter-token gap and how many tokens see it, then ``extra_itl_s`` (weight 1).

    The gap is between the two steps' deliveries to the client (``delivered_s``;
    none when both left in one chunk, as ``vllm bench serve`` records one ITL per
    chunk), or the step's duration in a log without deliveries (the engine's own).
    """
    extra = np.asarray(extra_itl_s, dtype=np.float64).ravel()
    if not isinstance(steps, StepTable):  # a frame, one row per step
        gaps, weights = _frame_gaps_s(steps)
        if extra.size:
            gaps = np.concatenate([gaps, extra])
            weights = np.concatenate([weights, np.ones_like(extra)])
        return gaps, weights
    num_used = sum(int(np.count_nonzero(used)) for _, _, used in _blocks(steps))
    gaps = np.empty(num_used + extra.size)
    weights = np.empty(gaps.size)
    at = 0
    for block_gaps, counts, used in _blocks(steps):
        stop = at + int(np.count_nonzero(used))
        np.compress(used, block_gaps, out=gaps[at:stop])
        weights[at:stop] = counts[used]
        at = stop
    gaps[at:] = extra
    weights[at:] = 1.0
    return gaps, weights


def _frame_gaps_s(steps: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
    """``step_itl_gaps_s`` of a log with one row per step."""
    steps = require_columns(steps, STEP_COLUMNS, "steps")
    counts = steps["num_itl_tokens"].to_numpy()
    if "delivered_s" in steps.columns:
        delivered = steps["delivered_s"].to_numpy(dtype=np.float64)  # a view, not a copy
        gaps = np.zeros(len(steps))
        # The previous step: of the same replica wherever the count is positive.
        np.subtract(delivered[1:], delivered[:-1], out=gaps[1:])
        used = gaps > 0
        used &= counts > 0
    else:
        gaps = floats(steps["end_s"]) - floats(steps["start_s"])
        used = counts > 0
    return gaps[used], counts[used].astype(np.float64)


def _blocks(steps: StepTable) -> Iterator[tuple[FloatArray, IntArray, npt.NDArray[np.bool_]]]:
    """(gap, ``num_itl_tokens``, used) of every step, a block of segments at a time, as
    the expanded log's rows (a replica's first gap, from the one before's last step,
    is never used: its count is zero)."""
    previous_s: float | None = None
    for part in steps.parts:
        step = 0
        # Without delivery times (the engine's own log): each step's duration.
        delivery = part.delivery
        starts = part.column("start_s") if delivery is None else None
        segments = part.segments
        num_steps = segments["num_steps"]
        for first in range(0, num_steps.size, _SEGMENTS_PER_BLOCK):
            block = slice(first, first + _SEGMENTS_PER_BLOCK)
            counts = np.repeat(segments["num_itl_tokens"][block], num_steps[block])
            outputs = np.repeat(segments["num_outputs"][block], num_steps[block])
            stop = step + counts.size
            if delivery is None:
                assert starts is not None
                gaps = part.end_s[step:stop] - starts[step:stop]
                used = counts > 0
            else:
                delivered = delivery.times_s(part.end_s[step:stop], outputs, step)
                gaps = np.empty(counts.size)
                np.subtract(delivered[1:], delivered[:-1], out=gaps[1:])
                gaps[0] = 0.0 if previous_s is None else delivered[0] - previous_s
                used = gaps > 0
                used &= counts > 0
                previous_s = float(delivered[-1])
            yield gaps, counts, used
            step = stop
