"""A run's step end times (``ends_until_cut`` of ``decode_run_s``, as the skip-ahead
replica takes them), cut at the next arrival, to the bit.

A run prices only the steps it keeps (``decode_run_s``, cut by
``ends_until_cut``), and its ends must match a loop of ``step_s`` summed one
step at a time, as step-by-step execution sums them.
"""

from __future__ import annotations

import warnings
from bisect import bisect_left
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from skew_costs import skewed_kernel_cost

from sim.cost.base import CostModel, StepShape, decode_run_s, ends_until_cut
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.roofline import RooflineCost
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    MODEL_PRESETS,
    hardware_preset,
    load_architecture,
    model_preset,
)

COST = RooflineCost(model_preset("llama-3-8b"), hardware_preset("h100"))


def run_ends_s(
    cost: CostModel,
    first_end_s: float,
    num_seqs: int,
    context_tokens: int,
    num_decode_steps: int,
    stop_s: float = float("inf"),
    num_after: int = 1,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> list[float]:
    """The end times the replica (``sim.fast.decode_runs``) gets from ``cost`` (the
    run's longest and shortest context: 0, an even batch, unless given)."""
    durations_s = decode_run_s(
        cost, num_seqs, context_tokens, max_context_tokens, min_context_tokens
    )
    return ends_until_cut(durations_s, first_end_s, num_decode_steps, stop_s, num_after)


def stepwise(
    cost: CostModel,
    first_end_s: float,
    num_seqs: int,
    context: int,
    num_steps: int,
    stop_s: float,
    num_after: int,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> list[float]:
    """The ends as step-by-step execution makes them: one step_s per step (every
    context one longer a step, the longest and shortest too), and the run stops
    num_after steps after the first end at or after stop_s."""
    ends = [first_end_s]
    for j in range(num_steps):
        shape = StepShape(
            num_decode_seqs=num_seqs,
            num_decode_context_tokens=context + j * num_seqs,
            max_decode_context_tokens=max_context_tokens + j,
            min_decode_context_tokens=min_context_tokens + j,
        )
        ends.append(ends[-1] + cost.step_s(shape))
    if stop_s <= ends[-1]:
        ends = ends[: bisect_left(ends, stop_s) + num_after]
    return ends


DATA = Path(__file__).parent / "data" / "kernels"
AIC = from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data")
LLAMA = load_architecture("llama-3.1-8b")
KERNEL_COSTS = [  # the aiconfigurator tables on 1 and 4 GPUs, a per-layer profile
    KernelCost(LLAMA, AIC),
    KernelCost(LLAMA, AIC, tensor_parallel_size=2, pipeline_parallel_size=2),
    KernelCost(LLAMA, profile_artifact(DATA / "profile" / "bf16" / "tp1")),
    skewed_kernel_cost(),  # the profile with a skew fit: the batch's spread counts
]
costs = st.one_of(
    st.builds(
        RooflineCost,
        st.sampled_from(sorted(MODEL_PRESETS)).map(model_preset),
        st.sampled_from(sorted(HARDWARE_PRESETS)).map(hardware_preset),
    ),
    st.sampled_from(KERNEL_COSTS),
)


@given(
    cost=costs,
    first_end_s=st.floats(0.0, 1e4, allow_nan=False),
    num_seqs=st.integers(0, 600),
    context=st.integers(0, 2_000_000),
    num_steps=st.integers(0, 80),
    stop_after_s=st.one_of(st.none(), st.floats(-1.0, 3.0)),
    num_after=st.integers(1, 3),
    spread=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
)
def test_a_run_equals_a_step_loop(
    cost: CostModel,
    first_end_s: float,
    num_seqs: int,
    context: int,
    num_steps: int,
    stop_after_s: float | None,
    num_after: int,
    spread: tuple[float, float],
) -> None:
    stop_s = float("inf") if stop_after_s is None else first_end_s + stop_after_s
    args = (first_end_s, num_seqs, context, num_steps, stop_s, num_after)
    # A longest and a shortest context consistent with the sum (mean between them).
    mean = context // num_seqs if num_seqs else 0
    longest = mean + round(spread[0] * 3 * mean) + 1 if num_seqs else 0
    shortest = max(0, mean - round(spread[1] * mean)) if num_seqs else 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # past a kernel table: tested in test_cost_kernels_grid
        fast = run_ends_s(cost, *args, longest, shortest)
        assert fast == stepwise(cost, *args, longest, shortest)


def test_a_cut_keeps_the_step_running_at_the_arrival_and_num_after_minus_one_more() -> None:
    full = run_ends_s(COST, 1.0, 8, 4096, 20)
    assert len(full) == 21
    arrival_s = (full[5] + full[6]) / 2  # during step 6
    assert run_ends_s(COST, 1.0, 8, 4096, 20, arrival_s, 1) == full[:7]
    assert run_ends_s(COST, 1.0, 8, 4096, 20, arrival_s, 2) == full[:8]
    # An arrival exactly at a step's end: that step is the one running.
    assert run_ends_s(COST, 1.0, 8, 4096, 20, full[6], 1) == full[:7]
    # At or before the first step's end: the first step, and num_after - 1 more.
    assert run_ends_s(COST, 1.0, 8, 4096, 20, 0.5, 1) == full[:1]
    assert run_ends_s(COST, 1.0, 8, 4096, 20, 1.0, 3) == full[:3]
    # After the run: no cut.
    assert run_ends_s(COST, 1.0, 8, 4096, 20, full[-1] + 1.0, 2) == full


def test_the_cut_never_runs_past_the_steps_promised() -> None:
    full = run_ends_s(COST, 0.0, 4, 100, 3)
    assert run_ends_s(COST, 0.0, 4, 100, 3, full[-1], 2) == full
    assert run_ends_s(COST, 0.0, 4, 100, 0, -1.0, 3) == [0.0]


def test_steps_of_no_sequence_take_no_time() -> None:
    assert run_ends_s(COST, 2.5, 0, 0, 4) == [2.5] * 5
    assert run_ends_s(COST, 2.5, 0, 0, 4, 2.0, 2) == [2.5, 2.5]


def test_long_runs_agree_with_a_step_loop() -> None:
    ends = run_ends_s(COST, 0.0, 64, 64 * 900, 500)
    assert ends == stepwise(COST, 0.0, 64, 64 * 900, 500, float("inf"), 1)
    assert np.all(np.diff(ends) > 0)
