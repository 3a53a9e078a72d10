"""A decode run's step ends: from the public table of step prices where it covers
the run, else one ``step_s`` a step.

A run (``sim.fast.decode_runs``) is its first step and up to ``num_decode_steps``
decode steps of one batch, each context one token longer a step; its ends are
summed ``((first_end + d1) + d2) + ...`` as step-by-step execution sums them, and
cut ``num_after`` steps after the first to end at or after ``stop_s`` (the next
arrival). ``RunEnds`` takes the prices from ``sim.cost.tabulate.tabulate``'s arrays
(a roofline, or kernel tables for steps of up to the policy's sequences; bare or
with the engine's CPU work) through ``decode_ends``, plain Python on lists here,
which the compiled loop compiles for its arrays (``loop.compile_run``): the same
float operations in the same order as ``step_s`` (``tests/test_run_ends.py``
holds the two to the bit). A cost the table
does not hold and a batch past it are priced by ``step_s`` itself
(``decode_run_s``, cut by ``ends_until_cut``); a run whose attention lookup
passes a kernel grid's last point keeps the table's ends before that step and is
priced so from it on, so that the reference's extrapolation and warning are the
ones the user sees.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import numpy as np

from sim.cost import tabulate
from sim.cost.base import CostModel, StepShape, decode_run_s
from sim.cost.engine_cpu import with_cpu_s  # the engine's CPU work, written once
from sim.cost.kernels.price import (  # the kernel tables' layout, and their price
    ALLREDUCE,
    DECODE_GRID,
    DECODE_HISTORY,
    DENSE,
    EMBED_NORM,
    HAS_MEMORY,
    HAS_PIPELINE,
    HAS_SKEW,
    KERNELS,
    KIND,
    LM_HEAD,
    LM_SAMPLER,
    LOGITS,
    NUM_LAYERS,
    NUM_LM_OPS,
    PIPELINE,
    PROFILE_STEP,
    SAMPLER,
    Layout,
    Tables,
    cell,
    corners,
    grid_2d,
    skewed_decode_s,
)
from sim.cost.tabulate import (  # the constants' layout (``tabulate``)
    S_PER_DENSE_TOKEN,
    S_PER_KV_TOKEN,
    S_PER_PAIR,
    WEIGHT_S,
)

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
        out = [first_end_s]  # the ends the table prices (the first step's at least)
        if prices is not None and 0 < num_seqs <= self._max_num_seqs:
            cost, tables, layout = prices
            out = [0.0] * (num_decode_steps + 1)
            num_ends = decode_ends(
                cost, tables, layout, out, 0, first_end_s, num_seqs, context, longest,
                shortest, num_decode_steps, stop_s, num_after,
            )  # fmt: skip
            del out[num_ends:]
            if out[-1] == out[-1]:  # not NaN: every lookup inside the kernel tables
                return out
            del out[-1]  # past a grid's last point: that step on, by step_s
        # The rest from the table's last end: decode steps ``done`` on, up to the
        # ``kept`` the cut allows (``num_after - 1`` after the first end at or after
        # stop_s). A first such end among the table's: so is the last (steps take
        # time), and ``ends_until_cut`` adds just the rest of ``kept``.
        done = len(out) - 1
        hit = next((i for i, end in enumerate(out) if end >= stop_s), None)
        kept = num_decode_steps if hit is None else min(num_decode_steps, hit + num_after - 1)
        durations_s = decode_run_s(
            self._cost, num_seqs, context + done * num_seqs, longest + done, shortest + done
        )
        return out[:-1] + ends_until_cut(durations_s, out[-1], kept - done, stop_s, num_after)

    def _table(self) -> PriceLists | None:
        """``tabulate``'s arrays as lists (the loop's functions read either; a list's
        items are read faster), or None where the table does not hold the cost."""
        cost, max_num_seqs = self._cost, self._max_num_seqs
        if tabulate.roofline_of(cost) is None:
            kernel = tabulate.kernel_cost_of(cost)
            # A decode step's tokens are its sequences.
            if kernel is None or tabulate.why_not(kernel, max_num_seqs, max_num_seqs):
                return None
        played = cast("tabulate.PlayedCost", cost)  # a roofline or kernel tables, as checked
        constants, tables, layout = tabulate.tabulate(played, max_num_seqs, max_num_seqs)
        return constants.tolist(), tables.tolist(), layout.tolist()


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


# -- from the table: the compiled loop's pieces too (``sim.fast.compiled.loop``) ------
# Plain Python over lists here (KernelCost's flat prices, ``price``, likewise);
# ``loop.compile_run`` compiles twins of them for the loop's arrays.


def decode_ends(
    cost: Tables,
    tables: Tables,
    layout: Layout,
    out: Tables,
    at: int,
    first_end_s: float,
    num_seqs: int,
    context_tokens: int,
    max_context_tokens: int,
    min_context_tokens: int,
    num_decode_steps: int,
    stop_s: float,
    num_after: int,
) -> int:
    """``ends_until_cut`` of ``decode_run_s`` of the priced model (its CPU terms 0
    for a bare GPU model; ``tabulate``'s arrays, or lists), written into ``out``
    from ``at``; returns how many ends (the first step's included). An end past a
    kernel table's last point is NaN, and the last. ``RunEnds`` calls it plain, on
    lists; the compiled loop, compiled, on arrays."""
    cut = num_after - 1  # steps kept after the first to end at or after stop_s
    left = num_decode_steps if first_end_s < stop_s else min(num_decode_steps, cut)
    kernels = layout[KIND] == KERNELS
    dense_s = cost[S_PER_DENSE_TOKEN] * num_seqs
    pair_s, weight_s, kv_s = cost[S_PER_PAIR], cost[WEIGHT_S], cost[S_PER_KV_TOKEN]
    per_step_s = 0.0
    # Decode attention's cell: the batch's, once; the KV length's, walked forward
    # from the last step's (it grows a step), the same cell as ``cell``'s search.
    decode = grid_2d(layout, DECODE_GRID)
    _, a0, n0, a1, n1, values, s0, s1 = decode
    seqs = float(num_seqs)
    low0, w0, low1 = 0, 0.0, 0
    history = num_seqs * layout[DECODE_HISTORY]  # (KernelCost._durations')
    skewed = layout[HAS_SKEW] != 0
    past = False  # the batch past the grid's last point
    if kernels:  # KernelCost._durations' constants
        dense_s = tables[layout[DENSE] + num_seqs]
        per_step_s = kernel_per_step_s(tables, layout, num_seqs, num_seqs)
        past = seqs > tables[a0 + n0 - 1]
        low0, w0 = cell(tables, a0, n0, seqs)
    num_layers = layout[NUM_LAYERS]
    end = first_end_s
    out[at] = end
    count = 1
    context = context_tokens
    while left > 0:
        if kernels:
            kv = (context - history) / num_seqs
            if past or kv > tables[a1 + n1 - 1]:
                out[at + count] = np.nan  # past the grid: the Python path extrapolates
                return count + 1
            clipped = tables[a1] if kv < tables[a1] else kv
            while low1 < n1 - 2 and tables[a1 + low1 + 1] <= clipped:
                low1 += 1
            w1 = (clipped - tables[a1 + low1]) / (tables[a1 + low1 + 1] - tables[a1 + low1])
            decode_s = corners(tables, values, s0, s1, low0, w0, low1, w1)
            if skewed:  # every context one longer a step: so are both ends
                j = count - 1
                decode_s = skewed_decode_s(
                    tables, layout, decode, decode_s, num_seqs, kv, max_context_tokens + j,
                    min_context_tokens + j,
                )  # fmt: skip
                if decode_s != decode_s:
                    out[at + count] = np.nan  # past the grid: the Python path extrapolates
                    return count + 1
            gpu = num_layers * (dense_s + 0.0 + decode_s) + per_step_s
        else:
            compute = dense_s + pair_s * context
            memory = weight_s + kv_s * (context + num_seqs)
            gpu = compute if compute > memory else memory
        end += with_cpu_s(cost, gpu, num_seqs, num_seqs)
        out[at + count] = end
        count += 1
        context += num_seqs
        left -= 1
        if end >= stop_s:
            left = min(left, cut)
            stop_s = np.inf
    return count


def kernel_per_step_s(tables: Tables, layout: Layout, tokens: int, seqs: int) -> float:
    """``KernelCost.per_step_s``."""
    total = tables[layout[PROFILE_STEP] + tokens]  # a profile's step_s, else 0.0
    if layout[HAS_MEMORY]:
        # (0.0 + embedding) + final norm, then + the sampler: MemoryOps.step_s's sum.
        total += tables[layout[EMBED_NORM] + tokens] + tables[layout[SAMPLER] + seqs]
    # Tensor parallelism's embedding all-reduce and logits all-gather (0.0 on one GPU).
    total += tables[layout[ALLREDUCE] + tokens]
    total += tables[layout[LOGITS] + seqs]
    if seqs:
        total += tables[layout[LM_HEAD] + seqs]
        if layout[NUM_LM_OPS] == 2:
            total += tables[layout[LM_SAMPLER] + seqs]
    if layout[HAS_PIPELINE]:
        total += tables[layout[PIPELINE] + tokens]
    return total
