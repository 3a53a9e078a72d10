"""``KernelCost.decode_ends_s``: a run's step ends priced one step at a time, to the bit.

It must give exactly what the generic path gives (``decode_steps_s`` priced in
one numpy call, summed, then cut) and what step-by-step execution gives (one
``step_s`` per step), and a whole kernel-table run must come out the same with
skip-ahead as step by step.
"""

from __future__ import annotations

import warnings
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.cost.architecture import load_architecture
from sim.cost.base import FloatArray, StepShape
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.run_ends import priced_until_cut, run_ends_s
from sim.scenario import load_scenario

DATA = Path(__file__).parent / "data" / "kernels"
AIC = from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data")
PROFILE = profile_artifact(DATA / "profile" / "bf16" / "tp1")
LLAMA = load_architecture("llama-3.1-8b")
COSTS: dict[str, Callable[[], KernelCost]] = {
    "aic": lambda: KernelCost(LLAMA, AIC, step_overhead_s=1e-3),
    "aic-tp2-pp2": lambda: KernelCost(LLAMA, AIC, tensor_parallel_size=2, pipeline_parallel_size=2),
    "profile": lambda: KernelCost(LLAMA, PROFILE),
}
SCENARIO = Path(__file__).parents[1] / "scenarios" / "public" / "rtxpro6000_llama31_8b.yaml"


class Generic:
    """A kernel cost without its ``decode_ends_s``: run_ends_s's generic path."""

    def __init__(self, base: KernelCost) -> None:
        self.base = base

    @property
    def label(self) -> str:
        return "generic"

    def step_s(self, shape: StepShape) -> float:
        return self.base.step_s(shape)

    def decode_steps_s(self, num_seqs: int, context_tokens: int, num_steps: int) -> FloatArray:
        return self.base.decode_steps_s(num_seqs, context_tokens, num_steps)


def stepwise(
    cost: KernelCost,
    first_end_s: float,
    num_seqs: int,
    context: int,
    num_steps: int,
    stop_s: float,
    num_after: int,
) -> list[float]:
    """The ends as step-by-step execution makes them, cut as the replica cuts."""
    ends = [first_end_s]
    for j in range(num_steps):
        context_j = context + j * num_seqs
        shape = StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=context_j)
        ends.append(ends[-1] + (cost.step_s(shape) if num_seqs else 0.0))
    if stop_s <= ends[-1]:
        ends = ends[: bisect_left(ends, stop_s) + num_after]
    return ends


@pytest.mark.parametrize("name", sorted(COSTS))
@settings(max_examples=80, deadline=None)
@given(
    first_end_s=st.floats(0.0, 1e4, allow_nan=False),
    num_seqs=st.integers(0, 300),
    context=st.integers(0, 300_000),
    num_steps=st.integers(0, 60),
    stop_after_s=st.one_of(st.none(), st.floats(-1.0, 2.0)),
    num_after=st.integers(1, 3),
)
def test_decode_ends_equal_the_generic_path_and_a_step_loop(
    name: str,
    first_end_s: float,
    num_seqs: int,
    context: int,
    num_steps: int,
    stop_after_s: float | None,
    num_after: int,
) -> None:
    cost = COSTS[name]()
    context = max(context, num_seqs)  # at least one token of context each
    stop_s = float("inf") if stop_after_s is None else first_end_s + stop_after_s
    args = (first_end_s, num_seqs, context, num_steps, stop_s, num_after)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # past the tables: tested in test_cost_kernels_grid
        fast = cost.decode_ends_s(*args)
        assert fast == run_ends_s(Generic(cost), *args)  # exact: same floats
        assert fast == stepwise(cost, *args)


@pytest.mark.parametrize("name", sorted(COSTS))
@settings(max_examples=40, deadline=None)
@given(num_seqs=st.integers(1, 300), context=st.integers(0, 300_000), num_steps=st.integers(0, 40))
def test_decode_steps_equal_step_s_to_the_bit(
    name: str, num_seqs: int, context: int, num_steps: int
) -> None:
    cost = COSTS[name]()
    context = max(context, num_seqs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        many = cost.decode_steps_s(num_seqs, context, num_steps).tolist()
        one = [
            cost.step_s(StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=c))
            for c in range(context, context + num_steps * num_seqs, num_seqs)
        ]
    assert many == one


@settings(max_examples=300, deadline=None)
@given(
    durations=st.lists(st.floats(0.0, 1.0), max_size=30),
    first_end_s=st.floats(0.0, 10.0),
    stop_after_s=st.one_of(st.none(), st.floats(-1.0, 12.0)),
    num_after=st.integers(1, 4),
)
def test_priced_until_cut_is_sum_then_cut_and_prices_no_step_past_it(
    durations: list[float], first_end_s: float, stop_after_s: float | None, num_after: int
) -> None:
    stop_s = float("inf") if stop_after_s is None else first_end_s + stop_after_s
    priced: list[int] = []

    def step_s(j: int) -> float:
        priced.append(j)
        return durations[j]

    ends = priced_until_cut(step_s, first_end_s, len(durations), stop_s, num_after)
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
