"""Invariants with prefix caching and speculative decoding on (hypothesis).

Workloads and continuous-batching settings come from ``test_invariants``
(small KV pools that force preemption and rejection); requests are put into
random prefix groups with random shared prefix lengths. Checked at every
scheduling call: the prefix-caching pool's counts (never negative, never over
capacity, the free queue = the free blocks, every block held or free and never
both, reference counts = requests holding a block, cached blocks keyed by their
chain) and the plan.
Checked per run: no request lost (everything not rejected finishes with all
its tokens), the step log and the sampled series, and skip-ahead ≡ step by
step. With caching off, prefix groups change nothing; with caching on and no
prefixes, only recompute preemption changes (it re-reads its own cached blocks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import cast

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_state import (
    block_ids,
    block_key,
    block_keys,
    block_ref_count,
    cached_block,
    free_queue,
    held_keys,
    num_evictable_blocks,
    num_loose_blocks,
)
from test_invariants import (
    MAX_SCHEDULE_CALLS,
    SETTINGS,
    Setup,
    assert_same_runs,
    check_plan,
    check_pool,
    check_run,
    continuous_setups,
    workloads,
)

from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import PrefixCachingPool
from sim.engine.policies import Scheduler
from sim.engine.scheduler import CoreView, EngineCore, SchedulerOutput
from sim.engine.speculative import SpeculativeConfig
from sim.hardware.specs import hardware_preset, model_preset
from sim.serving.replica_config import ReplicaConfig, with_speculation
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays


@st.composite
def grouped_workloads(draw: st.DrawFn) -> RequestArrays:
    arrays = draw(workloads())
    n = len(arrays)
    num_groups = draw(st.integers(1, 3))
    groups = draw(st.lists(st.integers(0, num_groups - 1), min_size=n, max_size=n))
    shared = draw(st.lists(st.integers(1, 300), min_size=num_groups, max_size=num_groups))
    # Requests of a group share up to the group's prefix length (clipped to their prompt).
    return replace(
        arrays,
        prefix_group=np.asarray(groups, dtype=np.int64),
        num_shared_prefix_tokens=np.asarray([shared[g] for g in groups], dtype=np.int64),
    )


speculations = st.builds(
    lambda k, alpha, fraction: SpeculativeConfig(
        num_draft_tokens=k, acceptance_rate=alpha, draft_cost_fraction=fraction
    ),
    st.integers(1, 5),
    st.sampled_from([0.0, 0.3, 0.7, 0.95, 1.0]),
    st.sampled_from([0.05, 0.3]),
)


def check_prefix_pool(core: EngineCore) -> None:
    kv = core.kv
    assert isinstance(kv, PrefixCachingPool)
    assert 0 <= kv.num_free_blocks <= kv.num_blocks
    queue = free_queue(kv)
    assert len(queue) == kv.num_free_blocks, "the free queue holds exactly the free blocks"
    assert 0 <= num_evictable_blocks(kv) <= kv.num_free_blocks
    holders: Counter[int] = Counter()
    for r in core.running:
        ids = block_ids(kv, r)
        assert len(ids) == r.num_blocks >= kv.blocks_for(r.num_computed_tokens)
        assert len(set(ids)) == len(ids)
        held = held_keys(kv, r)
        assert held == block_keys(kv, r, len(held)), "cached blocks are keyed by their chain"
        assert len(held) <= r.num_computed_tokens // kv.block_size_tokens + r.num_blocks
        holders.update(ids)
    # Conservation: every block is held (reference-counted) or free, never both.
    assert num_loose_blocks(kv) == 0
    assert not set(holders) & set(queue)
    assert len(holders) + len(queue) == kv.num_blocks
    for block, count in holders.items():
        assert block_ref_count(kv, block) == count
    for block in queue:
        assert block_ref_count(kv, block) == 0
    for block in range(kv.num_blocks):
        key = block_key(kv, block)
        assert key is None or cached_block(kv, key) is not None
    assert all(r.num_blocks == 0 and not block_ids(kv, r) for r in core.waiting)


class Checked:
    """Delegates to a policy; checks the pool and the plan around every call."""

    def __init__(self, inner: Scheduler, setup: Setup, caching: bool) -> None:
        self.inner, self.setup, self.caching = inner, setup, caching
        self.num_calls = 0
        # Checks the policy's own calls, the policy itself staying the core's: the
        # speed paths know a policy by its class (sim.fast.decode_runs).
        self.inner_schedule = inner.schedule
        inner.schedule = self.schedule  # type: ignore[method-assign]

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        assert isinstance(core, EngineCore)  # the checks read the real core's pool
        self.num_calls += 1
        assert self.num_calls < MAX_SCHEDULE_CALLS, "livelock: the engine never drains"
        check = check_prefix_pool if self.caching else check_pool
        check(core)
        plan = self.inner_schedule(core, now_s)
        check(core)
        check_plan(plan, core, self.setup)
        kept = plan.scheduled_spec_decode_tokens
        # Only decodes keep drafts, at least one each (a dict entry says so).
        assert all(request.is_decoding and n >= 1 for request, n in kept.items())
        for request, _ in plan.scheduled:
            if request.is_decoding:
                count = 1 + kept.get(request, 0)  # tokens it emits in this step
                # The KV cache holds every accepted token; no request overshoots.
                assert count <= request.num_output_tokens - request.num_generated_tokens
                assert request.num_blocks * core.kv.block_size_tokens >= (
                    request.num_computed_tokens + count
                )
        return plan


def simulate(
    arrays: RequestArrays,
    setup: Setup,
    skip_ahead: bool,
    caching: bool,
    speculative: SpeculativeConfig | None = None,
) -> RawResult:
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=setup.make_policy,
            num_kv_blocks=setup.num_kv_blocks,
            block_size_tokens=setup.block_size_tokens,
            max_model_len_tokens=setup.max_model_len_tokens,
            enable_prefix_caching=caching,
        ),
        cost=setup.cost,
        frontend=setup.frontend,
        skip_ahead=skip_ahead,
    )
    if speculative is not None:
        engine = with_speculation(
            engine,
            speculative,
            hardware_preset("h100"),
            model_preset("llama-3-8b"),
            np.random.default_rng(0),
        )
    make_inner = engine.core.make_policy
    checked = replace(engine.core, make_policy=lambda: Checked(make_inner(), setup, caching).inner)
    engine = replace(engine, core=checked)
    simulation = Simulation(engine)
    raw = simulation.run(cast(OpenLoop, arrays))
    assert simulation.core.kv.num_free_blocks == setup.num_kv_blocks  # all returned
    return raw


def check_served(raw: RawResult, arrays: RequestArrays, setup: Setup) -> None:
    """No request lost: the rejection rule of test_invariants, everything else done."""
    requests = raw.requests
    assert requests["request_id"].tolist() == list(range(len(arrays)))
    total = arrays.num_prompt_tokens + arrays.num_output_tokens
    blocks = -(-(total - 1) // setup.block_size_tokens)
    must_reject = (total > setup.max_model_len_tokens) | (blocks > setup.num_kv_blocks)
    rejected = requests["rejection_reason"].notna().to_numpy()
    np.testing.assert_array_equal(rejected, must_reject)
    done = requests[~rejected]
    assert (done["num_generated_tokens"] == done["num_output_tokens"]).all()
    times = done[["arrival_s", "ready_s", "first_scheduled_s", "first_token_s", "finish_s"]]
    assert np.isfinite(times.to_numpy()).all()
    assert (np.diff(times.to_numpy(), axis=1) >= 0).all()
    cached = done["num_cached_tokens"]
    assert ((cached % setup.block_size_tokens) == 0).all()
    assert (cached < done["num_prompt_tokens"]).all()
    steps = raw.steps
    assert (steps["end_s"] > steps["start_s"]).all()
    assert steps["num_itl_tokens"].sum() <= done["num_generated_tokens"].sum()
    series = raw.timeseries
    assert (series["num_kv_blocks_used"] >= 0).all()
    assert (series["num_kv_blocks_used"] <= setup.num_kv_blocks).all()


@SETTINGS
@given(arrays=grouped_workloads(), setup=continuous_setups())
def test_prefix_caching_invariants(arrays: RequestArrays, setup: Setup) -> None:
    fast = simulate(arrays, setup, skip_ahead=True, caching=True)
    slow = simulate(arrays, setup, skip_ahead=False, caching=True)
    check_served(fast, arrays, setup)
    # One token per step: the full checks of test_invariants apply (token times too).
    check_run(fast, arrays, setup)
    check_run(slow, arrays, setup)
    assert_same_runs(fast, slow)


@SETTINGS
@given(arrays=workloads(), setup=continuous_setups(), spec=speculations)
def test_speculative_invariants(
    arrays: RequestArrays, setup: Setup, spec: SpeculativeConfig
) -> None:
    fast = simulate(arrays, setup, skip_ahead=True, caching=False, speculative=spec)
    slow = simulate(arrays, setup, skip_ahead=False, caching=False, speculative=spec)
    check_served(fast, arrays, setup)
    assert_same_runs(fast, slow)


@settings(SETTINGS, max_examples=40)
@given(arrays=grouped_workloads(), setup=continuous_setups(), spec=speculations)
def test_both_features_invariants(
    arrays: RequestArrays, setup: Setup, spec: SpeculativeConfig
) -> None:
    fast = simulate(arrays, setup, skip_ahead=True, caching=True, speculative=spec)
    slow = simulate(arrays, setup, skip_ahead=False, caching=True, speculative=spec)
    check_served(fast, arrays, setup)
    assert_same_runs(fast, slow)


@settings(SETTINGS, max_examples=40)
@given(arrays=grouped_workloads(), setup=continuous_setups())
def test_switches_off_change_nothing(arrays: RequestArrays, setup: Setup) -> None:
    plain = RequestArrays(arrays.arrival_s, arrays.num_prompt_tokens, arrays.num_output_tokens)
    reference = simulate(plain, setup, skip_ahead=True, caching=False)
    grouped = simulate(arrays, setup, skip_ahead=True, caching=False)
    no_prefixes = simulate(plain, setup, skip_ahead=True, caching=True)
    # Without shared prefixes a request can hit only its own blocks, after a recompute
    # preemption (vLLM hashes every full block): identical runs when nothing is preempted.
    assert (no_prefixes.requests["num_cached_tokens"] == 0).all()
    others = [grouped]
    if reference.requests["num_preemptions"].sum() == 0:
        others.append(no_prefixes)
    # Only the lookup statistics differ: with caching on, every admission looks up.
    lookups = ["num_prefix_lookups", "num_prefix_query_tokens", "num_prefix_hit_tokens"]
    for other in others:
        pd.testing.assert_frame_equal(
            reference.requests.drop(columns=lookups),
            other.requests.drop(columns=lookups),
            check_exact=True,
        )
        pd.testing.assert_frame_equal(reference.steps, other.steps, check_exact=True)
        pd.testing.assert_frame_equal(reference.timeseries, other.timeseries, check_exact=True)
