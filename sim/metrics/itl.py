"""Inter-token latency from the step log: each step's gap, weighted by the tokens that saw it.

A step log may hold tens of millions of steps. The compact log of a run
(``sim.engine.step_runs.StepTable``) is read a block of segments at a time,
delivery times included, so the only arrays its length are the (gap,
weight) pairs themselves, in step order, then ``extra_itl_s``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray, IntArray
from sim.engine.step_runs import StepTable
from sim.metrics.quantiles import Summary, latency_stats_ms

STEP_COLUMNS = ("start_s", "end_s", "num_itl_tokens")  # what ITL reads of a step
_SEGMENTS_PER_BLOCK = 1 << 16  # a block's temporaries: a few MB


def itl_distribution(
    steps: StepTable,
    extra_itl_s: npt.ArrayLike,
    percentiles: Sequence[float] = (90, 99),
) -> Summary:
    """ITL statistics (``mean_itl_ms`` ...): step gaps weighted by ``num_itl_tokens``
    plus each ``extra_itl_s`` gap with weight 1."""
    gaps, weights = step_itl_gaps_s(steps, extra_itl_s)
    return latency_stats_ms("itl", gaps, weights, percentiles, overwrite=True)


def step_itl_gaps_s(
    steps: StepTable, extra_itl_s: npt.ArrayLike = ()
) -> tuple[FloatArray, FloatArray]:
    """Each step's inter-token gap and how many tokens see it, then ``extra_itl_s`` (weight 1).

    The gap is between the two steps' deliveries to the client (``delivered_s``;
    none when both left in one chunk, as ``vllm bench serve`` records one ITL per
    chunk), or the step's duration in a log without deliveries (the engine's own).
    """
    extra = np.asarray(extra_itl_s, dtype=np.float64).ravel()
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
