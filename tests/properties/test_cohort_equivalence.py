"""The decode cohort (``sim.fast.cohort``) changes no result (hypothesis).

The cohort is a second path beside the per-request one: plain continuous
batching in skip-ahead mode advances steady decoders in aggregate. Here every
random workload and setting runs three ways: skip-ahead with the cohort,
skip-ahead without it (``sim.fast`` declining: the reference core) and step by
step. All three must give the same request records, step log, token breaks and
prefix-cache figures, to the last bit. Settings reach every way out of the
cohort: small KV pools (preemption by recompute or by swap), small token
budgets with chunked prefill and a long-prefill cap (a member would be cut
short), async scheduling (finished requests hold their slot a step), prefix
caching with shared prefixes (requests still filling shareable blocks stay
outside), and several replicas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_state import queue_blocks
from test_feature_invariants import grouped_workloads
from test_invariants import SETTINGS, Setup, assert_same_runs, continuous_setups, workloads

import sim.fast.open_loop as fast_module
from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import PrefixCachingPool, SwapSpace
from sim.engine.policies import ContinuousConfig, Scheduler, StaticConfig
from sim.engine.policies.orca import OrcaConfig
from sim.engine.scheduler import StepPlan
from sim.fast.cohort import Cohort, CohortCore, CohortPlan
from sim.fast.open_loop import FastSimulation
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult
from sim.workload.generate import RequestArrays


@st.composite
def variants(draw: st.DrawFn) -> dict[str, object]:
    """Switches on top of ``continuous_setups``: each may end a cohort in its own way."""
    return {
        "async_scheduling": draw(st.booleans()),
        "caching": draw(st.booleans()),
        "swap": draw(st.booleans()),
        "long_prefill_cap": draw(st.sampled_from([0, 0, 3, 17])),
    }


def build_engine(setup: Setup, variant: dict[str, object], skip_ahead: bool) -> ReplicaConfig:
    base = setup.make_policy.__self__  # type: ignore[attr-defined]  # ContinuousConfig.build
    assert isinstance(base, ContinuousConfig)
    config = base.model_copy(update={"long_prefill_token_threshold": variant["long_prefill_cap"]})
    swap, async_scheduling = bool(variant["swap"]), bool(variant["async_scheduling"])

    def make_policy() -> Scheduler:
        # Swap: room for a few blocks, so some preemptions swap, the rest recompute.
        return config.build(SwapSpace(6.0, 1.0, 1e4) if swap else None, async_scheduling)

    return ReplicaConfig(
        core=CoreConfig(
            make_policy=make_policy,
            num_kv_blocks=setup.num_kv_blocks,
            block_size_tokens=setup.block_size_tokens,
            max_model_len_tokens=setup.max_model_len_tokens,
            enable_prefix_caching=bool(variant["caching"]),
        ),
        cost=setup.cost,
        frontend=setup.frontend,
        skip_ahead=skip_ahead,
    )


@dataclass(frozen=True)
class Run:
    """A run's results, and the engine internals the results may not show."""

    raw: RawResult
    member_steps: int  # decode steps taken by cohort members (0 without a cohort)
    finish_order: list[int]  # request ids in the order they finished (or were recorded)
    free_queue: list[int]  # the KV pool's free block ids at the end, eviction order
    cached: dict[object, int]  # prefix cache key -> block id at the end
    num_evictions: int


def run(
    arrays: RequestArrays,
    engine: ReplicaConfig,
    monkeypatch: pytest.MonkeyPatch,
    cohort: bool,
) -> Run:
    """One run; with ``cohort=False`` the replica gets no cohort."""
    with monkeypatch.context() as patch:
        if not cohort:
            patch.setattr(fast_module, "faster_core", lambda *args: None)
        simulation = FastSimulation(engine)
    core = simulation.core
    assert isinstance(core, CohortCore) == (cohort and engine.skip_ahead)
    member_steps = 0
    commit = core.commit

    def counting(plan: StepPlan, start_s: float, ends_s: list[float]) -> None:
        nonlocal member_steps
        if isinstance(plan, CohortPlan):
            member_steps += plan.num_cohort * len(ends_s)
        commit(plan, start_s, ends_s)

    core.commit = counting  # type: ignore[method-assign]
    # The records in the order requests left, as the core hands them to the result.
    take = core.take_records
    finish_order: list[int] = []

    def taking() -> dict[str, npt.NDArray[Any]]:
        records = take()
        finish_order.extend(records["request_id"].tolist())
        return records

    core.take_records = taking  # type: ignore[method-assign]
    raw = simulation.run(cast(OpenLoop, arrays))
    assert core.kv.num_free_blocks == engine.core.num_kv_blocks  # every block returned
    if isinstance(core, CohortCore) and core.cohort is not None:
        assert core.cohort.num_members == 0  # flushed
    kv = core.kv
    if not isinstance(kv, PrefixCachingPool):
        return Run(raw, member_steps, finish_order, [], {}, 0)
    return Run(
        raw, member_steps, finish_order, queue_blocks(kv._queue), dict(kv._cached), kv.num_evictions
    )


def assert_identical(run_a: Run, run_b: Run) -> None:
    """Same records, steps, state samples (one per plan) and token breaks, to the
    last bit, and the same finishing order and KV pool at the end."""
    assert run_a.finish_order == run_b.finish_order
    assert run_a.free_queue == run_b.free_queue
    assert run_a.cached == run_b.cached
    assert run_a.num_evictions == run_b.num_evictions
    a, b = run_a.raw, run_b.raw
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)
    assert a.later_runs == b.later_runs
    np.testing.assert_array_equal(a.extra_itl_s, b.extra_itl_s)


@settings(SETTINGS, max_examples=120)
@given(arrays=workloads(), setup=continuous_setups(), variant=variants())
def test_cohort_changes_nothing(
    arrays: RequestArrays, setup: Setup, variant: dict[str, object]
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        with_cohort = run(arrays, build_engine(setup, variant, True), monkeypatch, True)
        without = run(arrays, build_engine(setup, variant, True), monkeypatch, False)
        step_by_step = run(arrays, build_engine(setup, variant, False), monkeypatch, True)
    assert without.member_steps == 0
    assert_identical(with_cohort, without)
    # Step by step agrees with skip-ahead to float rounding (test_invariants).
    assert_same_runs(with_cohort.raw, step_by_step.raw)


@settings(SETTINGS, max_examples=60)
@given(arrays=grouped_workloads(), setup=continuous_setups(), variant=variants())
def test_cohort_changes_nothing_with_shared_prefixes(
    arrays: RequestArrays, setup: Setup, variant: dict[str, object]
) -> None:
    variant = {**variant, "caching": True}
    with pytest.MonkeyPatch.context() as monkeypatch:
        with_cohort = run(arrays, build_engine(setup, variant, True), monkeypatch, True)
        without = run(arrays, build_engine(setup, variant, True), monkeypatch, False)
    assert_identical(with_cohort, without)


@st.composite
def crowded(draw: st.DrawFn) -> tuple[RequestArrays, Setup]:
    """Many short requests with few distinct lengths, a small budget and small blocks:
    members finish together, beside listed requests, and chunks get cut."""
    num = draw(st.integers(5, 60))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 1e-3, 0.01]), min_size=num, max_size=num))
    prompts = draw(st.lists(st.sampled_from([1, 3, 8, 20, 45]), min_size=num, max_size=num))
    outputs = draw(st.lists(st.sampled_from([1, 2, 5, 9, 30]), min_size=num, max_size=num))
    arrays = RequestArrays(
        np.cumsum(np.asarray(gaps, dtype=np.float64)),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
    )
    max_num_seqs = draw(st.integers(2, 16))
    budget = draw(st.integers(2, 64))
    config = ContinuousConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)
    cost = LinearCost(step_overhead_s=1e-3, per_prefill_token_s=1e-5, per_decode_seq_s=2e-4)
    setup = Setup(
        config.build,
        "continuous",
        max_num_seqs,
        budget,
        draw(st.integers(12, 80)),
        draw(st.sampled_from([1, 2, 4])),
        128,
        cost,
        NO_FRONTEND,
    )
    return arrays, setup


@settings(SETTINGS, max_examples=150)
@given(case=crowded(), variant=variants())
def test_cohort_changes_nothing_when_crowded(
    case: tuple[RequestArrays, Setup], variant: dict[str, object]
) -> None:
    arrays, setup = case
    with pytest.MonkeyPatch.context() as monkeypatch:
        with_cohort = run(arrays, build_engine(setup, variant, True), monkeypatch, True)
        without = run(arrays, build_engine(setup, variant, True), monkeypatch, False)
    assert_identical(with_cohort, without)


def steady_workload(num: int, rng: np.random.Generator) -> RequestArrays:
    """Requests arriving faster than they finish: a batch of steady decoders builds up."""
    return RequestArrays(
        np.cumsum(rng.exponential(0.02, num)),
        rng.integers(20, 200, num).astype(np.int64),
        rng.integers(30, 300, num).astype(np.int64),
    )


@pytest.mark.parametrize("pool_blocks", [100_000, 400])  # 400: preemptions on the way
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_cohort_carries_most_decode_steps_and_changes_nothing(
    pool_blocks: int, async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded replica most decode work goes through the cohort, and the
    results are those of the per-request path, with and without preemption."""
    arrays = steady_workload(300, np.random.default_rng(7))
    build = ContinuousConfig(max_num_seqs=64, max_num_batched_tokens=512).build
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=partial(build, async_scheduling=True) if async_scheduling else build,
            num_kv_blocks=pool_blocks,
            block_size_tokens=16,
            max_model_len_tokens=1024,
            enable_prefix_caching=True,
        ),
        cost=LinearCost(step_overhead_s=2e-3, per_prefill_token_s=1e-5, per_decode_seq_s=1e-4),
    )
    with_cohort = run(arrays, engine, monkeypatch, True)
    without = run(arrays, engine, monkeypatch, False)
    assert_identical(with_cohort, without)
    decode_steps = int(with_cohort.raw.steps["num_decode_seqs"].sum())
    assert with_cohort.member_steps > 0.5 * decode_steps
    if pool_blocks == 400:
        assert with_cohort.raw.requests["num_preemptions"].sum() > 0


def test_cohort_is_only_for_plain_continuous_batching() -> None:
    def core_cohort(make_policy: Callable[[], Scheduler], skip_ahead: bool = True) -> object:
        """The cohort of the first replica's core, if it has one."""
        engine = ReplicaConfig(
            core=CoreConfig(
                make_policy=make_policy,
                num_kv_blocks=100,
                block_size_tokens=16,
                max_model_len_tokens=512,
            ),
            cost=LinearCost(step_overhead_s=1e-3, per_decode_seq_s=1e-3),
            skip_ahead=skip_ahead,
        )
        core = FastSimulation(engine).core
        return core.cohort if isinstance(core, CohortCore) else None

    plain = ContinuousConfig().build
    assert isinstance(core_cohort(plain), Cohort)
    assert core_cohort(plain, skip_ahead=False) is None  # the reference mode
    assert core_cohort(StaticConfig().build) is None
    assert core_cohort(OrcaConfig().build) is None  # a subclass plans its own way
