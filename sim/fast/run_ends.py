"""A decode run's step ends: from the public table of step prices where it covers
the run, else one ``step_s`` a step.

A run (``sim.fast.decode_runs``) is its first step and up to ``num_decode_steps``
decode steps of one batch, each context one token longer a step; its ends are
summed ``((first_end + d1) + d2) + ...`` as step-by-step execution sums them, and
cut ``num_after`` steps after the first to end at or after ``stop_s`` (the next
arrival). ``RunEnds`` takes the prices from ``sim.cost.tabulate.tabulate``'s arrays
(a roofline, or kernel tables for steps of up to the policy's sequences; bare or
with the engine's CPU work) through the compiled loop's own ``decode_ends``, run
here as plain Python on lists: the same float operations in the same order as
``step_s`` (``tests/test_run_ends.py`` holds the two to the bit). A cost the table
does not hold, a batch past it, and a run whose attention lookup passes a kernel
grid's last point are priced by ``step_s`` itself (``decode_run_s``, cut by
``ends_until_cut``), so that the reference's extrapolation and warning are the
ones the user sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sim.cost import tabulate
from sim.cost.base import CostModel, StepShape
from sim.fast.compiled.loop import decode_ends

# ``tabulate``'s (constants, kernel tables, layout), as lists.
PriceLists = tuple[list[float], list[float], list[int]]


class RunEnds:
    """The step ends of ``cost``'s decode runs, for batches of up to ``max_num_seqs``
    sequences (the policy's most a step holds)."""

    __slots__ = ("_cost", "_max_num_seqs", "_prices", "_tabulated")

    def __init__(self, cost: CostModel, max_num_seqs: int) -> None:
        self._cost = cost
        self._max_num_seqs = max_num_seqs
        # The table as lists (None: priced by ``step_s``), made at the first run (a
        # replica the compiled loop plays never needs it).
        self._prices: PriceLists | None = None
        self._tabulated = False

    def ends(
        self,
        first_end_s: float,
        shape: StepShape,
        num_decode_steps: int,
        stop_s: float,
        num_after: int,
    ) -> list[float]:
        """The end (s) of the run's first step, at ``first_end_s``, and of up to
        ``num_decode_steps`` decode steps after it, the first of ``shape`` (decodes
        only), cut ``num_after`` (>= 1) steps after the first to end at or after
        ``stop_s``. No step past the cut is priced by ``step_s``."""
        num_seqs = shape.num_decode_seqs
        context = shape.num_decode_context_tokens
        longest, shortest = shape.max_decode_context_tokens, shape.min_decode_context_tokens
        if not self._tabulated:
            self._prices, self._tabulated = self._table(), True
        prices = self._prices
        if prices is not None and 0 < num_seqs <= self._max_num_seqs:
            cost, tables, layout = prices
            out = [0.0] * (num_decode_steps + 1)
            num_ends = decode_ends(
                cost, tables, layout, out, 0, first_end_s, num_seqs, context, longest,
                shortest, num_decode_steps, stop_s, num_after,
            )  # fmt: skip
            last = out[num_ends - 1]
            if last == last:  # not NaN: every lookup inside the kernel tables
                del out[num_ends:]
                return out
        durations_s = decode_run_s(self._cost, num_seqs, context, longest, shortest)
        return ends_until_cut(durations_s, first_end_s, num_decode_steps, stop_s, num_after)

    def _table(self) -> PriceLists | None:
        """``tabulate``'s arrays as lists (the loop's functions read either; a list's
        items are read faster), or None where the table does not hold the cost."""
        cost, max_num_seqs = self._cost, self._max_num_seqs
        if tabulate.roofline_of(cost) is None:
            kernel = tabulate.kernel_cost_of(cost)
            # A decode step's tokens are its sequences.
            if kernel is None or tabulate.why_not(kernel, max_num_seqs, max_num_seqs):
                return None
        assert isinstance(cost, tabulate.PlayedCost)
        constants, tables, layout = tabulate.tabulate(cost, max_num_seqs, max_num_seqs)
        return constants.tolist(), tables.tolist(), layout.tolist()


def decode_run_s(
    cost: CostModel,
    num_seqs: int,
    context_tokens: int,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> Iterator[float]:
    """``cost.step_s`` of consecutive decode-only steps, each priced when taken.

    Step ``j`` (from 0) has ``num_seqs`` sequences whose contexts sum to
    ``context_tokens + j * num_seqs``, the longest ``max_context_tokens + j``
    and the shortest ``min_context_tokens + j`` (every context grows by one a
    step; 0, as in ``StepShape``: not given, an even batch). Endless: the
    caller takes what it needs.
    """
    step_s = cost.step_s
    new = tuple.__new__  # StepShape(...) without its Python-level __new__: one a step
    context, longest, shortest = context_tokens, max_context_tokens, min_context_tokens
    while True:
        # No prefill; the decodes' count, summed, longest and shortest context.
        yield step_s(new(StepShape, (0, 0, 0, 0, num_seqs, context, longest, shortest)))
        context += num_seqs
        longest += 1
        shortest += 1


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
    is the first kept). Takes no duration past the cut from ``durations_s``, so a step
    past it is never priced.
    """
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
