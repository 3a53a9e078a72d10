"""The end times of a skip-ahead run: a plan's step, then plain decode steps.

The replica (``sim.serving.replica``) turns a plan promising ``num_steps``
steps into one SimPy timeout, and needs each step's end time: the first
step's, then ``end[j] = end[j - 1] + d[j]`` with the cost model's decode-step
durations ``d``, summed in the same order as step-by-step execution so both
modes agree to the bit. An open-loop run stops early, ``num_after`` steps
after the first that ends at or after the next arrival (``stop_s``).

``ends_until_cut`` is the one loop that sums and cuts, whatever the cost
model. The durations come lazily from the model's ``decode_durations_s``
when it has one (the roofline, kernel tables: a step past the cut is never
priced, and an open-loop run usually stops long before its first finish),
else from its ``decode_steps_s``, all priced at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial

from sim.cost.base import CostModel

# (first_end_s, num_seqs, context_tokens, num_decode_steps, stop_s, num_after) -> ends
RunEnds = Callable[[float, int, int, int, float, int], list[float]]
# (num_seqs, context_tokens, num_decode_steps) -> decode-step durations (s), in order
Durations = Callable[[int, int, int], Iterable[float]]


def ends_until_cut(
    durations_s: Iterable[float],
    first_end_s: float,
    num_decode_steps: int,
    stop_s: float,
    num_after: int,
) -> list[float]:
    """End times (s) of a run's first step and of up to ``num_decode_steps`` decode
    steps after it, lasting ``durations_s`` in order; cut ``num_after`` steps after
    the first to end at or after ``stop_s`` (``num_after`` >= 1: that step itself
    is the first kept). Takes no duration past the cut from ``durations_s``."""
    # Decode steps still to sum: all, unless one ends at or after stop_s.
    left = num_decode_steps if first_end_s < stop_s else min(num_decode_steps, num_after - 1)
    end = first_end_s
    ends = [end]
    if left <= 0:
        return ends
    for step_s in durations_s:
        end += step_s
        ends.append(end)
        left -= 1
        if end >= stop_s:  # the cut: num_after - 1 more steps at most
            left = min(left, num_after - 1)
            stop_s = float("inf")
        if left <= 0:
            break
    return ends


def run_ends_for(cost: CostModel) -> RunEnds:
    """``run_ends_s`` bound to ``cost``, its durations' source looked up once (for
    an executor that prices a run per plan)."""
    durations: Durations | None = getattr(cost, "decode_durations_s", None)
    return partial(_run_ends, durations or partial(_all_priced, cost))


def run_ends_s(
    cost: CostModel,
    first_end_s: float,
    num_seqs: int,
    context_tokens: int,
    num_decode_steps: int,
    stop_s: float = float("inf"),
    num_after: int = 1,
) -> list[float]:
    """``ends_until_cut`` of ``num_decode_steps`` decode steps of ``num_seqs``
    sequences with ``context_tokens`` summed context in the first of them."""
    return run_ends_for(cost)(
        first_end_s, num_seqs, context_tokens, num_decode_steps, stop_s, num_after
    )


def _run_ends(
    durations: Durations,
    first_end_s: float,
    num_seqs: int,
    context_tokens: int,
    num_decode_steps: int,
    stop_s: float,
    num_after: int,
) -> list[float]:
    return ends_until_cut(
        durations(num_seqs, context_tokens, num_decode_steps),
        first_end_s,
        num_decode_steps,
        stop_s,
        num_after,
    )


def _all_priced(
    cost: CostModel, num_seqs: int, context_tokens: int, num_steps: int
) -> Iterator[float]:
    """Every decode step priced at once by ``decode_steps_s`` (the generic source)."""
    return iter(cost.decode_steps_s(num_seqs, context_tokens, num_steps).tolist())
