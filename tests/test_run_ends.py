"""A run's step end times (``sim.fast.run_ends.RunEnds``, as the skip-ahead replica
takes them), cut at the next arrival, to the bit.

A run is priced from the public table of step prices (``sim.cost.tabulate``) where
it covers the run, else by ``step_s`` for only the steps it keeps (``decode_run_s``,
cut by ``ends_until_cut``); either way its ends must match a loop of ``step_s``
summed one step at a time, as step-by-step execution sums them.
"""

from __future__ import annotations

import warnings
from bisect import bisect_left
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from skew_costs import skewed_kernel_cost

from sim.cost.base import CostModel, StepShape
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.roofline import RooflineCost
from sim.fast.run_ends import RunEnds
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    MODEL_PRESETS,
    hardware_preset,
    load_architecture,
    model_preset,
)

# The most sequences a step holds (the table's reach; a larger batch: ``step_s``).
MAX_NUM_SEQS = 256

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
    shape = StepShape(0, 0, 0, 0, num_seqs, context_tokens, max_context_tokens, min_context_tokens)
    return RunEnds(cost, MAX_NUM_SEQS).ends(first_end_s, shape, num_decode_steps, stop_s, num_after)


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
ROOFLINES = st.builds(
    RooflineCost,
    st.sampled_from(sorted(MODEL_PRESETS)).map(model_preset),
    st.sampled_from(sorted(HARDWARE_PRESETS)).map(hardware_preset),
)


def with_cpu(gpu: CostModel, overlapped: bool) -> CostModel:
    """``gpu`` with the engine's CPU work (heavy enough that either side of max() wins)."""
    config = EngineCpuConfig(
        per_step_s=4e-4,
        scheduler_per_seq_s=2e-5,
        sampling_per_seq_s=1e-6,
        per_token_s=1e-7,
        non_overlapped_s=1e-4,
    )
    return EngineCpuCost(gpu, EngineCpu(config, overlapped, "test"))


gpus = st.one_of(ROOFLINES, st.sampled_from(KERNEL_COSTS))
costs = st.one_of(gpus, st.builds(with_cpu, gpus, st.booleans()))


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


def count_step_s(monkeypatch: pytest.MonkeyPatch, *classes: type) -> list[StepShape]:
    """Every shape ``step_s`` of ``classes`` prices from now on (still priced)."""
    priced: list[StepShape] = []
    for cls in classes:
        step_s = cls.step_s  # type: ignore[attr-defined]

        def counted(self: object, shape: StepShape, step_s: Any = step_s) -> float:
            priced.append(shape)
            return float(step_s(self, shape))

        monkeypatch.setattr(cls, "step_s", counted)
    return priced


@pytest.mark.filterwarnings("ignore:kernel table")  # a profile's tables end at 256 sequences
@pytest.mark.parametrize("overlapped", [None, True, False])  # None: the bare GPU model
@pytest.mark.parametrize("k", range(-1, len(KERNEL_COSTS)))  # -1: the roofline
def test_a_run_the_table_covers_is_priced_from_it_step_for_step(
    monkeypatch: pytest.MonkeyPatch, k: int, overlapped: bool | None
) -> None:
    """Inside the table (a roofline; kernel tables for up to MAX_NUM_SEQS sequences
    and a KV length inside their grids) every step's price is the table's, no
    ``step_s`` called, and each end is the step loop's; past its reach (more
    sequences) ``step_s`` prices each step kept, and only those."""
    gpu = COST if k < 0 else KERNEL_COSTS[k]
    cost = gpu if overlapped is None else with_cpu(gpu, overlapped)
    num_seqs, mean = 48, 1500
    args = (0.25, num_seqs, num_seqs * mean, 60, float("inf"), 1, mean + 700, mean - 900)
    expected = stepwise(cost, *args)
    many = (0.25, MAX_NUM_SEQS + 1, (MAX_NUM_SEQS + 1) * mean, 60)
    stop = (stepwise(cost, *many, float("inf"), 1)[10], 2)  # decode step 10's end, and 1 more
    expected_many = stepwise(cost, *many, *stop)
    priced = count_step_s(monkeypatch, RooflineCost, KernelCost, EngineCpuCost)
    assert run_ends_s(cost, *args) == expected
    assert priced == []
    # Past the table's reach: step_s, only for the steps the cut keeps.
    assert run_ends_s(cost, *many, *stop) == expected_many
    assert len(expected_many) == 12  # the first step's end, then 11 decode steps'
    # (EngineCpuCost's: it holds its GPU model's step_s from before the count.)
    assert len(priced) == 11


def test_a_run_past_a_kernel_grid_is_priced_by_step_s_and_warns_as_it() -> None:
    """A KV length past the decode grid's last point: the table has no price (the
    loop's NaN), so the run is the reference's, extrapolated, with its one warning."""
    known = KERNEL_COSTS[0]
    kv = 2 * int(known._decode_attn.axes[1][-1])
    args = (0.0, 4, 4 * kv, 20, float("inf"), 1)
    reference = KernelCost(known.arch, known.artifact)  # fresh: a grid warns once in its life
    with pytest.warns(UserWarning, match="is past the measured") as warned:
        expected = stepwise(reference, *args)
    cost = KernelCost(known.arch, known.artifact)
    with pytest.warns(UserWarning, match="is past the measured") as got:
        assert run_ends_s(cost, *args) == expected
    assert [str(w.message) for w in got] == [str(w.message) for w in warned]


@pytest.mark.filterwarnings("ignore:kernel table")
@pytest.mark.parametrize("overlapped", [None, False])  # None: the bare GPU model
@pytest.mark.parametrize(
    ("stop_index", "num_after", "num_priced"),
    # No cut; a cut at the table's last end, then at an earlier one: num_after
    # keeps steps past the grid's edge.
    [(None, 1, 9), (11, 3, 2), (4, 9, 1)],
)
def test_a_run_crossing_a_kernel_grid_keeps_the_table_before_and_step_s_after(
    monkeypatch: pytest.MonkeyPatch,
    overlapped: bool | None,
    stop_index: int | None,
    num_after: int,
    num_priced: int,
) -> None:
    """KV lengths inside the decode grid for the run's first 11 decode steps, past
    its last point from the 12th: the table prices the 11 (no ``step_s``) and
    ``step_s`` the steps kept after them, one call each; the ends are the step
    loop's, to the bit."""
    known = KERNEL_COSTS[0]
    last_kv = int(known._decode_attn.axes[1][-1])
    num_seqs, num_steps = 4, 20
    # Decode step j's KV length is last_kv - 10 + j: steps 0..10 inside the grid.
    context = num_seqs * (last_kv - 10 + known._decode_history)

    def fresh() -> CostModel:  # a grid warns once in its life
        gpu = KernelCost(known.arch, known.artifact)
        return gpu if overlapped is None else with_cpu(gpu, overlapped)

    full = stepwise(fresh(), 0.5, num_seqs, context, num_steps, float("inf"), 1)
    stop_s = float("inf") if stop_index is None else full[stop_index]
    args = (0.5, num_seqs, context, num_steps, stop_s, num_after)
    expected = stepwise(fresh(), *args)
    priced = count_step_s(monkeypatch, KernelCost)
    cost = fresh()  # (after the count: EngineCpuCost holds its GPU model's step_s)
    with pytest.warns(UserWarning, match="is past the measured"):
        assert run_ends_s(cost, *args) == expected
    # step_s priced exactly the kept steps past the grid: decode steps 11 on.
    first = 11
    assert [s.num_decode_context_tokens for s in priced] == [
        context + j * num_seqs for j in range(first, first + num_priced)
    ]
    assert len(expected) == first + 1 + num_priced
