"""Kernel tables in the compiled loop (``sim.cost.tabulate``, ``loop``'s pricing).

Whole runs are compared with the Python path in
``tests/properties/test_compiled_equivalence.py`` and ``tests/test_compiled_path.py``;
a step's price differing in its last bit would often not show there (a step end
``now + price`` rounds the difference away), so here the loop's prices are held
to ``KernelCost``'s (and ``EngineCpuCost``'s around it) directly, bit for bit: a
step of any shape, a run's decode-step ends, every tabulated term, every grid
lookup. Then what the loop declines, and a run that reads past a grid's edge.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from compiled_runs import (
    HEAVY,
    LIGHT,
    assert_identical,
    assert_loop_prices_as,
    kernel_costs,
    kernel_gpus,
    simulate,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cost_kernels_profile_moe import QWEN_MOE, moe_profile  # noqa: F401 (a fixture)

from sim.cost import tabulate as kernels
from sim.cost.base import CostModel, StepShape, decode_run_s
from sim.cost.kernels import price
from sim.cost.kernels.artifact import load_cached, resolve_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.fast.compiled import loop, path
from sim.fast.run_ends import ends_until_cut
from sim.hardware.specs import load_architecture
from sim.serving.cluster import Cluster, ClusterConfig
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, Simulation
from sim.workload.generate import RequestArrays

HAS_NUMBA = importlib.util.find_spec("numba") is not None
COSTS = kernel_costs(LIGHT, HEAVY)  # kernel_gpus(), then some inside the CPU work
NUM_GPUS = len(kernel_gpus())
MAX_NUM_SEQS, MAX_TOKENS = 64, 2048


def arrays(cost: CostModel) -> tuple[Any, Any, Any]:
    assert kernels.kernel_cost_of(cost) is not None  # kernel tables, bare or with CPU work
    return kernels.tabulate(cast("kernels.PlayedCost", cost), MAX_NUM_SEQS, MAX_TOKENS)


ARRAYS = [arrays(cost) for cost in COSTS]


@st.composite
def shapes(draw: st.DrawFn) -> StepShape:
    """A step of prefill chunks (new, cached tokens) and decodes (contexts) within
    ``MAX_NUM_SEQS`` sequences and ``MAX_TOKENS`` tokens, inside the grids."""
    num_chunks = draw(st.integers(0, 6))
    chunks = [
        (draw(st.integers(1, 300)), draw(st.one_of(st.just(0), st.integers(0, 9000))))
        for _ in range(num_chunks)
    ]
    contexts = draw(st.lists(st.integers(2, 12_000), max_size=MAX_NUM_SEQS - num_chunks))
    return StepShape.build(chunks, contexts)


def piece(name: str, compiled: bool) -> Any:
    """The loop's function ``name``: as numba compiled it (skipped without numba),
    or the plain Python it was compiled from."""
    if compiled:
        if not HAS_NUMBA or path.compiled() is None:
            pytest.skip("numba is not installed")
        return loop.COMPILED[name]  # (compile_run's twins)
    return getattr(loop, name, None) or getattr(price, name)


@pytest.mark.parametrize("compiled", [False, True])
@settings(max_examples=300, deadline=None)
@given(shape=shapes(), k=st.integers(0, len(COSTS) - 1))
def test_a_step_costs_what_the_kernel_cost_says_to_the_bit(
    compiled: bool, shape: StepShape, k: int
) -> None:
    constants, tables, layout = ARRAYS[k]
    price_s = piece("step_s", compiled)(
        constants, tables, layout, shape.num_prefill_seqs, shape.num_prefill_tokens,
        shape.prefill_attention_pairs, shape.prefill_kv_read_tokens, shape.num_decode_seqs,
        shape.num_decode_context_tokens, shape.max_decode_context_tokens,
        shape.min_decode_context_tokens,
    )  # fmt: skip
    assert float(price_s).hex() == COSTS[k].step_s(shape).hex()


@pytest.mark.parametrize("compiled", [False, True])
@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(0, len(COSTS) - 1),
    num_seqs=st.integers(1, MAX_NUM_SEQS),
    mean_context=st.integers(2, 8000),
    spread=st.tuples(st.integers(0, 3000), st.integers(0, 3000)),
    num_steps=st.integers(0, 300),
    first_end_s=st.floats(0.0, 100.0),
    stop_after_s=st.one_of(st.none(), st.floats(-1.0, 3.0)),
    num_after=st.integers(1, 2),
)
def test_a_decode_run_ends_when_the_kernel_cost_says_to_the_bit(
    compiled: bool, k: int, num_seqs: int, mean_context: int, spread: tuple[int, int],
    num_steps: int, first_end_s: float, stop_after_s: float | None, num_after: int,
) -> None:  # fmt: skip
    constants, tables, layout = ARRAYS[k]
    context = num_seqs * mean_context
    # The longest and shortest context around the mean (one sequence: both the mean).
    longest = mean_context + (spread[0] if num_seqs > 1 else 0)
    shortest = max(mean_context - (spread[1] if num_seqs > 1 else 0), 1)
    stop_s = math.inf if stop_after_s is None else first_end_s + stop_after_s
    out = np.zeros(num_steps + 1)
    num_ends = piece("decode_ends", compiled)(
        constants, tables, layout, out, 0, first_end_s, num_seqs, context, longest, shortest,
        num_steps, stop_s, num_after,
    )  # fmt: skip
    durations_s = decode_run_s(COSTS[k], num_seqs, context, longest, shortest)
    expected = ends_until_cut(durations_s, first_end_s, num_steps, stop_s, num_after)
    assert [x.hex() for x in out[:num_ends].tolist()] == [x.hex() for x in expected]


@pytest.mark.parametrize("k", range(len(kernel_gpus())))
def test_every_tabulated_term_is_the_kernel_cost_s_own(k: int) -> None:
    kernel = kernel_gpus()[k]
    _, tables, layout = ARRAYS[k]
    dense = tables[layout[kernels.DENSE] :][: layout[kernels.NUM_T]]
    assert len(dense) == MAX_TOKENS + 1
    assert dense[1:].tolist() == [kernel.dense_layer_s(t) for t in range(1, MAX_TOKENS + 1)]
    for seqs in range(MAX_NUM_SEQS + 1):
        for tokens in range(max(seqs, 1), MAX_TOKENS + 1, 37 + seqs):
            got = loop.kernel_per_step_s(tables, layout, tokens, seqs)
            assert got == kernel.per_step_s(tokens, seqs), (tokens, seqs)


@pytest.mark.parametrize("compiled", [False, True])
@settings(max_examples=300, deadline=None)
@given(
    which=st.sampled_from(["prefill", "decode"]),
    k=st.integers(0, len(kernel_gpus()) - 1),
    x0=st.floats(0.0, 300.0),
    x1=st.floats(0.0, 70_000.0),
)
def test_a_grid_lookup_is_the_grid_s_to_the_bit(
    compiled: bool, which: str, k: int, x0: float, x1: float
) -> None:
    kernel = kernel_gpus()[k]
    grid: Grid = kernel._prefill_attn if which == "prefill" else kernel._decode_attn
    _, tables, layout = ARRAYS[k]
    at = price.PREFILL_GRID if which == "prefill" else price.DECODE_GRID
    grid_slots = piece("grid_2d", compiled)(layout, at)
    got = piece("grid_point", compiled)(tables, layout, grid_slots, x0, x1)
    if x0 > grid.axes[0][-1] or x1 > grid.axes[1][-1]:
        assert math.isnan(got)  # the Python path extrapolates (and warns): handed over
    else:
        assert float(got).hex() == grid(x0, x1).hex()


def test_why_not_names_the_kernel_tables_the_loop_does_not_play() -> None:
    profile = load_cached(resolve_kernel_artifact("rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1", None))
    moe = load_cached(
        resolve_kernel_artifact("rtx_pro_6000_server-vllm-0.24.0-qwen3-30b-a3b", None)
    )
    llama, qwen = load_architecture("llama-3.1-8b"), load_architecture("qwen3-30b-a3b")
    assert kernels.why_not(KernelCost(llama, profile), MAX_NUM_SEQS, MAX_TOKENS) is None
    assert kernels.why_not(KernelCost(qwen, moe, expert_parallel_size=2), 8, MAX_TOKENS) is None
    gemm_m = int(kernel_gpus()[0]._gemm.axes[0][-1])  # type: ignore[union-attr]
    assert kernels.why_not(kernel_gpus()[0], MAX_NUM_SEQS, gemm_m) is None
    reason = kernels.why_not(kernel_gpus()[0], MAX_NUM_SEQS, gemm_m + 1)
    assert reason is not None and reason.startswith("kernel table gemm: steps of up to")
    # A profile times its ops up to 2,048 tokens and 256 sequences.
    reason = kernels.why_not(KernelCost(llama, profile), MAX_NUM_SEQS, 4096)
    assert reason is not None and reason.startswith("kernel table layer_ops")
    reason = kernels.why_not(KernelCost(llama, profile), 512, MAX_TOKENS)
    assert reason is not None and reason.startswith("kernel table per_sequence")


def engine(cost: CostModel, max_model_len: int = 1024, **policy: Any) -> ReplicaConfig:
    settings = {"max_num_seqs": 32, "max_num_batched_tokens": 2048, **policy}
    core = CoreConfig(ContinuousConfig(**settings).build, 100_000, 16, max_model_len, True)
    return ReplicaConfig(core, cost, NO_FRONTEND)


@pytest.mark.parametrize("num_replicas", [1, 3])  # 3: a round-robin pool's share each
@pytest.mark.parametrize("chunked", [True, False])
# aiconfigurator's tables bare, with the CPU work overlapped and serial; FA2 tables
# with the mixed-decode factor; a profile bare (skew fit, 4-D mixed attention) and
# with the CPU work overlapped.
@pytest.mark.parametrize("k", [0, NUM_GPUS, NUM_GPUS + 1, 5, 6, NUM_GPUS + 4])
def test_the_loop_plays_kernel_table_runs_to_the_bit(
    k: int, chunked: bool, num_replicas: int
) -> None:
    rng = np.random.default_rng(k)
    work = RequestArrays(
        np.cumsum(rng.exponential(1 / (40.0 * num_replicas), 300)),
        rng.integers(20, 900, 300),
        rng.integers(1, 120, 300),
    )
    replica = engine(COSTS[k], chunked_prefill=chunked, max_num_batched_tokens=1024)
    pool = Cluster(ClusterConfig(num_replicas=num_replicas), np.random.default_rng(0))
    reference, reference_order, played = simulate(work, replica, "never", pool)
    assert not played
    raw, order, played = simulate(work, replica, "python", pool)
    assert played
    assert_identical(raw, reference)
    assert order == reference_order


def test_a_run_past_an_attention_grid_s_edge_goes_to_the_python_path() -> None:
    # A fresh cost: a grid warns once in its life, so the reference's warning shows.
    kernel = KernelCost(kernel_gpus()[0].arch, kernel_gpus()[0].artifact)
    longest = int(kernel._prefill_attn.axes[1][-1]) + 500  # past the prompt-length axis
    work = RequestArrays(
        np.array([0.0, 100.0]),
        np.array([300, longest], dtype=np.int64),
        np.array([20, 5], dtype=np.int64),
    )
    replica = engine(kernel, max_model_len=longest + 10)
    assert path.why_not(Simulation(replica).cores, kernel, True, cast(OpenLoop, work)) is None
    with pytest.warns(UserWarning, match="kernel table context_attention: isl_tokens"):
        reference, reference_order, _ = simulate(work, replica, "never")
    raw, order, played = simulate(work, replica, "python")
    assert not played
    assert_identical(raw, reference)
    assert order == reference_order


def test_an_moe_profile_is_played_to_the_bit(moe_profile: Path) -> None:  # noqa: F811
    kernel = KernelCost(QWEN_MOE, profile_artifact(moe_profile))
    assert kernels.why_not(kernel, MAX_NUM_SEQS, MAX_TOKENS) is None
    rng = np.random.default_rng(0)
    assert_loop_prices_as(kernel, arrays(kernel), rng, 200)
    work = RequestArrays(
        np.cumsum(rng.exponential(1 / 30.0, 200)),
        rng.integers(20, 900, 200),
        rng.integers(1, 120, 200),
    )
    replica = engine(kernel, max_num_batched_tokens=1024)
    reference, reference_order, _ = simulate(work, replica, "never")
    raw, order, played = simulate(work, replica, "python")
    assert played
    assert_identical(raw, reference)
    assert order == reference_order
