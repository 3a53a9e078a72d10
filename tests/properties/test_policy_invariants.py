"""Invariants of the further scheduling policies over random small workloads (hypothesis).

Policies: dynamic, orca, prefill_first, priority (strict and weighted),
shortest_prompt_first, and continuous batching with preemption by swap. Every
run is checked at each scheduling call and as a whole with the checks of
``test_invariants`` (no request lost, KV capacity never exceeded, blocks
reserved before a step runs, token times in order), in both executor modes,
which must agree exactly (skip-ahead ≡ step by step). Workloads carry random
priorities (often tied). Policy-specific checks: strict priority never admits
a request while a more urgent one waits; orca never preempts; swap space is
never overdrawn and swapped requests keep their computed tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_invariants import (
    MAX_SCHEDULE_CALLS,
    SETTINGS,
    Setup,
    assert_same_runs,
    check_plan,
    check_pool,
    check_run,
    check_running_first,
    costs,
    frontends,
    workloads,
)

from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import SwapSpace
from sim.engine.policies import (
    DynamicConfig,
    LeastAttainedServiceConfig,
    OrcaConfig,
    PrefillFirstConfig,
    PriorityConfig,
    Scheduler,
    ShortestPromptFirstConfig,
)
from sim.engine.scheduler import Continuous, ContinuousConfig, CoreView, EngineCore, SchedulerOutput
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays


@st.composite
def prioritized(draw: st.DrawFn) -> RequestArrays:
    arrays = draw(workloads())
    levels = draw(st.integers(1, 3))
    values = draw(st.lists(st.integers(0, levels - 1), min_size=len(arrays), max_size=len(arrays)))
    return replace(arrays, priority=np.asarray(values, dtype=np.int64))


@st.composite
def policy_setups(draw: st.DrawFn, kind: str) -> Setup:
    max_model_len = draw(st.integers(16, 400))
    block_size = draw(st.sampled_from([1, 4, 16]))
    num_blocks = draw(st.integers(1, 64))
    seqs = draw(st.integers(1, 8))
    budget: int | None = None
    chunked = True
    make: Callable[[], Scheduler]
    if kind == "dynamic":
        config_d = DynamicConfig(
            max_batch_size=seqs, max_wait_s=draw(st.sampled_from([0.0, 0.05, 0.3]))
        )
        make = config_d.build
    elif kind == "orca":
        make = OrcaConfig(max_num_seqs=seqs).build
    elif kind == "prefill_first":
        # Budget at least the longest prompt + output, so the soft first-prompt rule never bites.
        budget = draw(st.integers(max(seqs, max_model_len), 512 + max_model_len))
        make = PrefillFirstConfig(max_num_seqs=seqs, max_num_batched_tokens=budget).build
    else:
        chunked = draw(st.booleans())
        low = 1 if chunked else max_model_len
        budget = draw(st.integers(low, max(low, 512)))
        common: dict[str, Any] = {
            "max_num_seqs": seqs,
            "max_num_batched_tokens": budget,
            "chunked_prefill": chunked,
        }
        if kind == "strict":
            make = PriorityConfig(**common).build
        elif kind == "weighted":
            weights = draw(st.dictionaries(st.integers(0, 2), st.sampled_from([0.5, 1.0, 3.0])))
            make = PriorityConfig(mode="weighted", weights=weights, **common).build
        elif kind == "shortest_prompt_first":
            make = ShortestPromptFirstConfig(**common).build
        elif kind == "least_attained_service":
            make = LeastAttainedServiceConfig(**common).build
        else:  # swap
            swap_blocks = draw(st.integers(0, 40))
            swapping = ContinuousConfig(preemption="swap", **common)
            bandwidth = draw(st.sampled_from([1e5, 1e7]))

            def make() -> Scheduler:
                return swapping.build(SwapSpace(swap_blocks * 1000.0, 1000.0, bandwidth))

    return Setup(
        make,
        kind,
        seqs,
        budget,
        num_blocks,
        block_size,
        max_model_len,
        draw(costs),
        draw(frontends),
        chunked,
    )


class PolicyChecks:
    """``test_invariants``' per-call checks, plus each policy's own."""

    def __init__(self, inner: Scheduler, setup: Setup) -> None:
        self.inner = inner
        self.setup = setup
        self.num_calls = 0
        self.num_admitted = 0
        # Checks the policy's own calls, the policy itself staying the core's: the
        # speed paths know a policy by its class (sim.fast.decode_runs).
        self.inner_schedule = inner.schedule
        inner.schedule = self.schedule  # type: ignore[method-assign]

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        assert isinstance(core, EngineCore)  # the checks read the real core's pool
        self.num_calls += 1
        assert self.num_calls < MAX_SCHEDULE_CALLS, "livelock: the engine never drains"
        check_pool(core)
        running_before = list(core.running)
        before = {id(r) for r in running_before}
        computed = {id(r): r.num_computed_tokens for r in core.waiting}
        plan = self.inner_schedule(core, now_s)
        check_pool(core)
        check_plan(plan, core, self.setup)
        assert plan.extra_s >= 0.0
        admitted = [r for r in core.running if id(r) not in before]
        self.num_admitted += len(admitted)
        kind = self.setup.kind
        if kind in ("swap", "shortest_prompt_first"):  # vLLM's order: running first
            check_running_first(plan, core, running_before)
        if kind == "strict" and admitted and core.waiting:
            most_urgent_waiting = min(r.priority for r in core.waiting)  # lower: more urgent
            assert max(r.priority for r in admitted) <= most_urgent_waiting
        if kind == "orca":
            # The whole maximum length is reserved at admission: never a preemption.
            assert all(r.num_preemptions == 0 for r in core.running)
            kv = core.kv
            assert all(r.num_blocks == kv.blocks_for(r.max_num_tokens) for r in core.running)
        if kind == "swap":
            swap = cast(Continuous, self.inner).swap
            assert swap is not None
            assert 0 <= swap.num_free_blocks <= swap.num_blocks
            assert sum(swap.held.values()) == swap.num_blocks - swap.num_free_blocks
            for r in admitted:  # a swapped-in request resumes where it stopped
                if id(r) in computed:
                    assert r.num_computed_tokens == computed[id(r)]
            for r in core.waiting:  # a swapped-out request keeps its computed tokens
                if r.request_id in swap.held:
                    assert r.num_computed_tokens > 0 and r.num_swaps > 0
        if kind == "prefill_first" and not plan.is_empty:
            prefill = [n for r, n in plan.scheduled if not (n == 1 and r.num_generated_tokens)]
            # Never mixed: a prefill step has no decodes, a decode step no prefill.
            assert len(prefill) in (0, len(plan.scheduled))
        return plan


def simulate(arrays: RequestArrays, setup: Setup, skip_ahead: bool) -> RawResult:
    def make_policy() -> Scheduler:
        return PolicyChecks(setup.make_policy(), setup).inner

    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=make_policy,
            num_kv_blocks=setup.num_kv_blocks,
            block_size_tokens=setup.block_size_tokens,
            max_model_len_tokens=setup.max_model_len_tokens,
        ),
        cost=setup.cost,
        frontend=setup.frontend,
        skip_ahead=skip_ahead,
    )
    simulation = Simulation(engine)
    raw = simulation.run(cast(OpenLoop, arrays))
    assert simulation.core.kv.num_free_blocks == setup.num_kv_blocks  # all returned
    return raw


def check_both_modes(arrays: RequestArrays, setup: Setup) -> RawResult:
    fast = simulate(arrays, setup, skip_ahead=True)
    slow = simulate(arrays, setup, skip_ahead=False)
    # Strict priority may give a step's budget to urgent prefill, and prefill-first runs
    # prefill-only steps: both skip running requests in some steps without preempting.
    contiguous = setup.kind not in ("strict", "prefill_first")
    check_run(fast, arrays, setup, runs_only_if_preempted=contiguous)
    check_run(slow, arrays, setup, runs_only_if_preempted=contiguous)
    assert_same_runs(fast, slow)
    assert fast.requests["num_swaps"].tolist() == slow.requests["num_swaps"].tolist()
    np.testing.assert_array_equal(fast.requests["priority"], arrays.priority)
    return fast


KINDS = [
    "dynamic",
    "orca",
    "prefill_first",
    "strict",
    "weighted",
    "shortest_prompt_first",
    "least_attained_service",
    "swap",
]


@settings(SETTINGS, max_examples=30)
@given(data=st.data(), arrays=prioritized(), kind=st.sampled_from(KINDS))
def test_policy_invariants(data: st.DataObject, arrays: RequestArrays, kind: str) -> None:
    setup = data.draw(policy_setups(kind))
    raw = check_both_modes(arrays, setup)
    requests = raw.requests
    if kind in ("dynamic", "orca"):
        assert (requests["num_preemptions"] == 0).all()
    if kind != "swap":
        assert (requests["num_swaps"] == 0).all()
    assert (requests["num_swaps"] <= requests["num_preemptions"]).all()


@settings(SETTINGS, max_examples=40)
@given(arrays=prioritized(), setup=policy_setups("dynamic"))
def test_dynamic_batches_are_never_joined_and_never_padded(
    arrays: RequestArrays, setup: Setup
) -> None:
    raw = check_both_modes(arrays, setup)
    starts = raw.requests["first_scheduled_s"].dropna()
    if len(starts):
        assert starts.value_counts().max() <= setup.limit
    # Without padding a decode step has at most as many slots as requests still generating,
    # so the decode slots over all steps never exceed the tokens decoded.
    done = raw.requests[raw.requests["rejection_reason"].isna()]
    assert raw.steps["num_decode_seqs"].sum() == (done["num_generated_tokens"] - 1).sum()


@settings(SETTINGS, max_examples=40)
@given(arrays=prioritized(), setup=policy_setups("strict"))
def test_strict_priority_starts_urgent_requests_first_with_a_big_pool(
    arrays: RequestArrays, setup: Setup
) -> None:
    # Checked per call in PolicyChecks; here also: with room for everything, among
    # requests ready at the same time the more urgent never starts later.
    big = replace(setup, num_kv_blocks=100_000)
    raw = check_both_modes(arrays, big)
    served = raw.requests[raw.requests["rejection_reason"].isna()]
    for _, group in served.groupby("ready_s"):
        ordered = group.sort_values("priority", ascending=True, kind="stable")
        assert (np.diff(ordered["first_scheduled_s"].to_numpy()) >= 0).all()


def test_policy_checks_see_admissions() -> None:
    """The checker is live: it counts admissions (guards against a vacuous wrapper)."""
    arrays = RequestArrays(
        np.zeros(3),
        np.full(3, 8, dtype=np.int64),
        np.full(3, 2, dtype=np.int64),
        priority=np.asarray([2, 1, 0], dtype=np.int64),
    )
    setup = Setup(
        PriorityConfig(max_num_seqs=1).build,
        "strict",
        1,
        2048,
        100,
        16,
        400,
        LinearCost(step_overhead_s=1e-3, per_prefill_token_s=1e-5, per_decode_seq_s=1e-4),
        NO_FRONTEND,
    )
    checks: list[PolicyChecks] = []

    def make() -> Scheduler:
        checks.append(PolicyChecks(setup.make_policy(), setup))
        return checks[-1].inner

    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=make, num_kv_blocks=100, block_size_tokens=16, max_model_len_tokens=400
        ),
        cost=setup.cost,
        frontend=setup.frontend,
        skip_ahead=True,
    )
    raw = Simulation(engine).run(cast(OpenLoop, arrays))
    assert checks[0].num_admitted == 3
    # Strict priority, one slot: the most urgent (lowest value, last to arrive) goes first.
    order = raw.requests.sort_values("first_scheduled_s")["priority"].tolist()
    assert order == [0, 1, 2]
