"""The end times of a skip-ahead run: a plan's step, then plain decode steps.

The replica (``sim.serving.replica``) turns a plan promising ``num_steps``
steps into one SimPy timeout, and needs each step's end time: the first
step's, then ``end[j] = end[j - 1] + d[j]`` with the cost model's decode-step
durations ``d``, summed in the same order as step-by-step execution so both
modes agree to the bit. An open-loop run stops early, ``num_after`` steps
after the first that ends at or after the next arrival (``stop_s``); the
steps past that would be priced and thrown away, so a cost model may offer
``decode_ends_s`` (same arguments, same result) that stops pricing there.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from functools import partial
from itertools import accumulate

from sim.cost.base import CostModel

# (first_end_s, num_seqs, context_tokens, num_decode_steps, stop_s, num_after) -> ends
RunEnds = Callable[[float, int, int, int, float, int], list[float]]


def run_ends_for(cost: CostModel) -> RunEnds:
    """``run_ends_s`` bound to ``cost``: its own ``decode_ends_s`` if it has one
    (looked up once, for an executor that prices a run per plan)."""
    fast: RunEnds | None = getattr(cost, "decode_ends_s", None)
    return fast if fast is not None else partial(_priced_then_cut, cost)


def run_ends_s(
    cost: CostModel,
    first_end_s: float,
    num_seqs: int,
    context_tokens: int,
    num_decode_steps: int,
    stop_s: float = float("inf"),
    num_after: int = 1,
) -> list[float]:
    """End times (s) of a run's first step and of up to ``num_decode_steps`` decode
    steps after it, of ``num_seqs`` sequences with ``context_tokens`` summed context
    in the first of them; cut ``num_after`` steps after the first to end at or after
    ``stop_s`` (``num_after`` >= 1: that step itself is the first kept)."""
    return run_ends_for(cost)(
        first_end_s, num_seqs, context_tokens, num_decode_steps, stop_s, num_after
    )


def priced_until_cut(
    step_s: Callable[[int], float],
    first_end_s: float,
    num_decode_steps: int,
    stop_s: float,
    num_after: int,
) -> list[float]:
    """``run_ends_s`` for a cost model that prices decode step ``j`` (0-based, after
    the first step) one at a time with ``step_s(j)``: the same sums, but steps
    past the cut are never priced (a ``decode_ends_s`` built on it)."""
    # Decode steps still to price: all, unless one ends at or after stop_s.
    left = num_decode_steps if first_end_s < stop_s else min(num_decode_steps, num_after - 1)
    end = first_end_s
    ends = [end]
    j = 0
    while j < left:
        end += step_s(j)
        ends.append(end)
        j += 1
        if end >= stop_s:  # the cut: num_after - 1 more steps at most
            left = min(left, j + num_after - 1)
            stop_s = float("inf")
    return ends


def _priced_then_cut(
    cost: CostModel,
    first_end_s: float,
    num_seqs: int,
    context_tokens: int,
    num_decode_steps: int,
    stop_s: float,
    num_after: int,
) -> list[float]:
    """The generic path: every decode step priced, summed in order, then cut."""
    durations = cost.decode_steps_s(num_seqs, context_tokens, num_decode_steps).tolist()
    ends = list(accumulate(durations, initial=first_end_s))
    if stop_s <= ends[-1]:
        ends = ends[: bisect_left(ends, stop_s) + num_after]
    return ends
