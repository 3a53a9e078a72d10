"""The compiled loop's ``decode_ends`` on exact float ties with the arrival that cuts a run.

A step ending exactly at ``stop_s`` is the step "running at the arrival" (``>=``):
the cut keeps it and ``num_after - 1`` more. A first step ending exactly at
``stop_s`` cuts at once. Step prices are sums of powers of two, so the ends are
exact and the ties are real ties. The reference is ``sim.fast.run_ends.ends_until_cut``.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost import engine_cpu, tabulate
from sim.fast.compiled import loop
from sim.fast.run_ends import ends_until_cut

STEP_S = 0.5  # the engine's non-overlapped CPU 0.25 + memory 0.25 (weights only): every step


def cost_array() -> np.ndarray:
    cost = np.zeros(engine_cpu.NUM_COSTS)
    cost[engine_cpu.CPU_NON_OVERLAPPED_S] = 0.25
    cost[engine_cpu.CPU_ASYNC_SCHEDULING] = 1.0  # no other CPU work: 0.25 + max(0.25, 0)
    cost[tabulate.WEIGHT_S] = 0.25
    return cost  # no per-token terms: every step costs exactly STEP_S


def compiled_ends(first_end_s: float, steps: int, stop_s: float, num_after: int) -> list[float]:
    out = np.full(steps + 8, np.nan)
    # The roofline's price: no kernel tables (layout[KIND] == ROOFLINE).
    tables, layout = np.zeros(0), np.zeros(tabulate.LAYOUT_SIZE, dtype=np.int64)
    # 4 sequences of 100 context tokens each (mean, longest, shortest).
    count = loop.decode_ends(
        cost_array(),
        tables,
        layout,
        out,
        3,
        first_end_s,
        4,
        100,
        100,
        100,
        steps,
        stop_s,
        num_after,
    )
    assert np.isnan(out[:3]).all()  # written from ``at``
    return out[3 : 3 + count].tolist()


@pytest.mark.parametrize(
    ("first_end_s", "stop_s", "num_after", "expected"),
    [
        # A step ends exactly at the stop (2.0): it and num_after - 1 = 1 more.
        (1.0, 2.0, 2, [1.0, 1.5, 2.0, 2.5]),
        (1.0, 2.0, 1, [1.0, 1.5, 2.0]),
        # The first step ends exactly at the stop: num_after - 1 decode steps only.
        (1.0, 1.0, 2, [1.0, 1.5]),
        (1.0, 1.0, 1, [1.0]),
        # Just before the tie: the next step is the one running at the stop.
        (1.0, np.nextafter(2.0, 0.0), 1, [1.0, 1.5, 2.0]),
        (1.0, np.nextafter(2.0, 3.0), 1, [1.0, 1.5, 2.0, 2.5]),
        # No stop: every step.
        (1.0, np.inf, 1, [1.0, 1.5, 2.0, 2.5, 3.0, 3.5]),
    ],
)
def test_decode_ends_cut_on_exact_ties(
    first_end_s: float, stop_s: float, num_after: int, expected: list[float]
) -> None:
    got = compiled_ends(first_end_s, 5, stop_s, num_after)
    assert got == expected
    assert ends_until_cut([STEP_S] * 5, first_end_s, 5, stop_s, num_after) == expected
