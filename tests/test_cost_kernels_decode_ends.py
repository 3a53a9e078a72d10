"""Pricing a run's decode steps one at a time up to the cut (``ends_until_cut``,
``sim.cost.base.decode_run_s``): no step priced past the cut, and a whole
kernel-table run the same with skip-ahead as step by step.

``tests/test_run_ends.py`` holds a run to a loop of ``step_s``, bit for bit.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import count
from pathlib import Path

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.fast.run_ends import ends_until_cut
from sim.scenario import load_scenario

SCENARIO = Path(__file__).parents[1] / "scenarios" / "public" / "rtxpro6000_llama31_8b.yaml"


@settings(max_examples=300, deadline=None)
@given(
    durations=st.lists(st.floats(0.0, 1.0), max_size=30),
    first_end_s=st.floats(0.0, 10.0),
    stop_after_s=st.one_of(st.none(), st.floats(-1.0, 12.0)),
    num_after=st.integers(1, 4),
)
def test_ends_until_cut_is_sum_then_cut_and_prices_no_step_past_it(
    durations: list[float], first_end_s: float, stop_after_s: float | None, num_after: int
) -> None:
    stop_s = float("inf") if stop_after_s is None else first_end_s + stop_after_s
    priced: list[int] = []

    def step_s(j: int) -> float:
        priced.append(j)
        return durations[j]

    ends = ends_until_cut(map(step_s, count()), first_end_s, len(durations), stop_s, num_after)
    expected = [first_end_s]
    for d in durations:
        expected.append(expected[-1] + d)
    if stop_s <= expected[-1]:
        expected = expected[: bisect_left(expected, stop_s) + num_after]
    assert ends == expected
    assert priced == list(range(len(ends) - 1))  # in order, and none thrown away


def test_a_kernel_table_run_is_the_same_with_skip_ahead_and_step_by_step() -> None:
    runs = []
    for skip_ahead in ("true", "false"):
        scenario = load_scenario(SCENARIO, [f"engine.skip_ahead={skip_ahead}"])
        runs.append(api.run(scenario, base_dir=SCENARIO.parent, progress=False))
    fast, slow = (run.raw.requests for run in runs)
    assert len(fast) == 300
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)  # every time, to the bit
