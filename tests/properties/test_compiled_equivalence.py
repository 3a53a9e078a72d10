"""The compiled loop (``sim.fast.compiled``) changes no result (hypothesis).

Every random workload and setting runs through the Python path and through
the compiled loop's function, uncompiled (``SERVESIM_COMPILED=python``: the
same code numba compiles, so this runs without numba too), and, where numba
is installed, compiled. The request records (in the order requests left the
core), the step log, the queue series, the token breaks and the rejections
must be the same to the last bit. Settings reach both ways out of the loop
(a KV pool too small: preemption; a token budget that starves a decoder: a
broken run of tokens), so some examples fall back to the Python path, which
must then give its own result unchanged. The same under kernel tables
(aiconfigurator's route, ``sim.cost.tabulate``): dense and MoE, with and
without the memory-bound ops, under tensor and pipeline parallelism, bare and
inside the engine's CPU work.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial
from typing import cast

import pytest
from compiled_runs import HEAVY, LIGHT, assert_identical, kernel_costs, simulate
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_invariants import SETTINGS, workloads

from sim.cost.base import CostModel
from sim.cost.engine_cpu import EngineCpu, EngineCpuCost
from sim.cost.roofline import RooflineCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig, Scheduler
from sim.fast.compiled import path
from sim.hardware.specs import hardware_preset, model_preset
from sim.serving.replica_config import NO_FRONTEND, FrontendConfig, ReplicaConfig
from sim.serving.simulation import OpenLoop, Simulation
from sim.workload.generate import RequestArrays

HAS_NUMBA = importlib.util.find_spec("numba") is not None
# Step times from well under the arrival gaps (~0.1 s) to well over them.
ROOFLINES = [RooflineCost(model_preset("llama-3-8b"), hardware_preset(n)) for n in ("h100", "l4")]
COSTS: list[CostModel] = [
    *ROOFLINES,
    EngineCpuCost(ROOFLINES[0], EngineCpu(HEAVY, async_scheduling=True, source="test")),
    EngineCpuCost(ROOFLINES[1], EngineCpu(LIGHT, async_scheduling=False, source="test")),
    EngineCpuCost(ROOFLINES[0], EngineCpu(LIGHT, async_scheduling=True, source="test")),
    EngineCpuCost(ROOFLINES[1], EngineCpu(HEAVY, async_scheduling=False, source="test")),
]

KERNEL_COSTS = kernel_costs(LIGHT, HEAVY)


@st.composite
def engines(draw: st.DrawFn, costs: list[CostModel] = COSTS) -> ReplicaConfig:
    """A single replica's engine: continuous batching under one of ``costs``."""
    # Mostly room for every request (a rejection sends the run to the Python path).
    max_model_len = draw(st.one_of(st.just(400), st.integers(16, 400)))
    chunked = draw(st.booleans())
    low = 1 if chunked else max_model_len  # without chunking a prompt must fit one step
    config = ContinuousConfig(
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.integers(low, max(low, 512))),
        chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 17])),
        scheduler_reserve_full_isl=draw(st.booleans()),
    )
    make_policy: Callable[[], Scheduler] = config.build
    if draw(st.booleans()):
        make_policy = partial(config.build, async_scheduling=True)
    big = draw(st.booleans())  # a big pool: no preemption, so the loop runs to the end
    block_size = draw(st.sampled_from([1, 4, 16]))
    cost = draw(st.sampled_from(costs))  # (drawn in this order: the examples stay the same)
    # Small pools from a few blocks short of one request to a few requests' worth.
    num_kv_blocks = 100_000 if big else draw(st.integers(400 // block_size, 2000 // block_size))
    frontend = draw(
        st.sampled_from(
            [
                NO_FRONTEND,
                FrontendConfig(
                    way_in_s_per_request=3e-3,
                    tokenize_s_per_token=1.7e-5,
                    detokenize_s_per_token=2.3e-4,
                    output_step_s=0.0,
                ),
            ]
        )
    )
    core = CoreConfig(
        make_policy,
        num_kv_blocks,
        block_size,
        max_model_len,
        enable_prefix_caching=draw(st.booleans()),
    )
    return ReplicaConfig(core, cost, frontend)


@SETTINGS
@given(arrays=workloads(), engine=engines())
def test_uncompiled_loop_matches_the_python_path(
    arrays: RequestArrays, engine: ReplicaConfig
) -> None:
    reference, reference_order, _ = simulate(arrays, engine, "never")
    raw, order, played = simulate(arrays, engine, "python")
    reason = path.why_not(Simulation(engine).cores, engine.cost, True, cast(OpenLoop, arrays))
    event(f"played by the loop: {played}; cannot because: {reason}")
    assert_identical(raw, reference)
    assert order == reference_order


@pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")
@settings(SETTINGS, max_examples=25)
@given(arrays=workloads(), engine=engines())
def test_compiled_loop_matches_the_python_path(
    arrays: RequestArrays, engine: ReplicaConfig
) -> None:
    reference, reference_order, _ = simulate(arrays, engine, "never")
    raw, order, _ = simulate(arrays, engine, "always")
    assert_identical(raw, reference)
    assert order == reference_order


@SETTINGS
@given(arrays=workloads(), engine=engines(KERNEL_COSTS))
def test_uncompiled_loop_matches_the_python_path_on_kernel_tables(
    arrays: RequestArrays, engine: ReplicaConfig
) -> None:
    reference, reference_order, _ = simulate(arrays, engine, "never")
    raw, order, played = simulate(arrays, engine, "python")
    reason = path.why_not(Simulation(engine).cores, engine.cost, True, cast(OpenLoop, arrays))
    event(f"played by the loop: {played}; cannot because: {reason}")
    assert_identical(raw, reference)
    assert order == reference_order


@pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")
@settings(SETTINGS, max_examples=25)
@given(arrays=workloads(), engine=engines(KERNEL_COSTS))
def test_compiled_loop_matches_the_python_path_on_kernel_tables(
    arrays: RequestArrays, engine: ReplicaConfig
) -> None:
    reference, reference_order, _ = simulate(arrays, engine, "never")
    raw, order, _ = simulate(arrays, engine, "always")
    assert_identical(raw, reference)
    assert order == reference_order
