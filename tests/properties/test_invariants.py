"""Invariants of whole simulations over random small workloads and settings (hypothesis).

Workloads: 1-40 requests, prompts and outputs from 1 token, arrival gaps that are
often exactly 0 (ties). Settings: continuous batching with random sequence and
token limits, chunked prefill on or off, KV pools small enough to force
preemption and rejection; static batching with random batch sizes and waits.
Every run is checked step by step (a wrapper around the policy inspects the KV
pool and the queues at each scheduling call) and as a whole (request records,
step log, token times), in both executor modes, which must agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skew_costs import skewed_kernel_cost

from sim import api
from sim.cost.base import CostModel
from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig, Scheduler, StaticConfig
from sim.engine.scheduler import CoreView, EngineCore, SchedulerOutput
from sim.engine.tokens import token_times_s
from sim.scenario import scenario_from_dict
from sim.serving.frontend import Delivery
from sim.serving.replica_config import NO_FRONTEND, FrontendConfig, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_SCHEDULE_CALLS = 200_000  # far above any example's need: a livelock fails, never hangs
TIME_COLUMNS = ["ready_s", "first_scheduled_s", "first_token_s", "finish_s"]


# -- strategies ------------------------------------------------------------------


@st.composite
def workloads(draw: st.DrawFn, max_prompt: int = 300, max_output: int = 60) -> RequestArrays:
    num = draw(st.integers(1, 40))
    gap = st.one_of(st.just(0.0), st.floats(0.0, 0.3, allow_nan=False, allow_infinity=False))
    gaps = draw(st.lists(gap, min_size=num, max_size=num))
    lengths = st.integers(1, max_prompt)
    prompts = draw(st.lists(lengths, min_size=num, max_size=num))
    outputs = draw(st.lists(st.integers(1, max_output), min_size=num, max_size=num))
    return RequestArrays(
        np.cumsum(np.asarray(gaps, dtype=np.float64)),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
    )


COSTS: list[CostModel] = [
    LinearCost(step_overhead_s=3e-3, per_prefill_token_s=1.1e-5, per_decode_seq_s=7e-4),
    LinearCost(
        step_overhead_s=1.3e-3,
        per_prefill_seq_s=1e-4,
        per_attention_pair_s=3e-9,
        per_decode_seq_s=2e-4,
        per_context_token_s=3.3e-7,
    ),
    LinearCost(per_prefill_token_s=4.1e-5, per_decode_seq_s=2.9e-3),  # no overhead
    # Kernel tables with a skew fit: a step's price reads its decodes' spread.
    skewed_kernel_cost(),
]
costs = st.sampled_from(COSTS)
frontends = st.sampled_from(
    [
        NO_FRONTEND,
        FrontendConfig(
            way_in_s_per_request=2e-3,
            tokenize_s_per_token=1.7e-5,
            detokenize_s_per_token=0.0,
            output_step_s=0.0,
        ),
        FrontendConfig(
            tokenize_s_per_token=1.7e-5, detokenize_s_per_token=2.3e-4, output_step_s=0.0
        ),
    ]
)


@dataclass(frozen=True)
class Setup:
    """Everything but the workload; ``limit`` is max_num_seqs / max_batch_size."""

    make_policy: Callable[[], Scheduler]
    kind: str
    limit: int
    budget: int | None
    num_kv_blocks: int
    block_size_tokens: int
    max_model_len_tokens: int
    cost: CostModel
    frontend: FrontendConfig
    chunked_prefill: bool = True  # False: prompts are scheduled whole (checked per plan)


@st.composite
def continuous_setups(draw: st.DrawFn, big_pool: bool = False) -> Setup:
    max_model_len = draw(st.integers(16, 400))
    chunked = draw(st.booleans())
    low = 1 if chunked else max_model_len  # without chunking a prompt must fit one step
    budget = draw(st.integers(low, max(low, 512)))
    max_num_seqs = draw(st.integers(1, 8))
    block_size = draw(st.sampled_from([1, 4, 16]))
    num_blocks = 100_000 if big_pool else draw(st.integers(1, 64))
    config = ContinuousConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, chunked_prefill=chunked
    )
    return Setup(
        config.build,
        "continuous",
        max_num_seqs,
        budget,
        num_blocks,
        block_size,
        max_model_len,
        draw(costs),
        draw(frontends),
        chunked,
    )


@st.composite
def static_setups(draw: st.DrawFn) -> Setup:
    config = StaticConfig(
        max_batch_size=draw(st.integers(1, 6)),
        max_wait_s=draw(st.sampled_from([0.0, 0.05, 0.3])),
    )
    return Setup(
        config.build,
        "static",
        config.max_batch_size,
        None,
        draw(st.integers(1, 64)),
        draw(st.sampled_from([1, 4, 16])),
        draw(st.integers(16, 400)),
        draw(costs),
        draw(frontends),
    )


# -- the checked run ----------------------------------------------------------------


class CheckedPolicy:
    """Delegates to a policy and checks the engine state around every call."""

    def __init__(self, inner: Scheduler, setup: Setup, async_scheduling: bool = False) -> None:
        self.inner = inner
        self.setup = setup
        self.num_calls = 0
        if async_scheduling:  # read by the core from its policy
            inner.async_scheduling = True  # type: ignore[misc]
        # Checks the policy's own calls, the policy itself staying the core's: the
        # speed paths know a policy by its class (sim.fast.decode_runs).
        self.inner_schedule = inner.schedule
        inner.schedule = self.schedule  # type: ignore[method-assign]

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        assert isinstance(core, EngineCore)  # the checks read the real core's pool
        self.num_calls += 1
        assert self.num_calls < MAX_SCHEDULE_CALLS, "livelock: the engine never drains"
        check_pool(core)
        before = list(core.running)
        plan = self.inner_schedule(core, now_s)
        check_pool(core)
        check_plan(plan, core, self.setup)
        if self.setup.kind == "continuous":
            check_running_first(plan, core, before)
        return plan


def check_running_first(plan: SchedulerOutput, core: EngineCore, before: list[Any]) -> None:
    """vLLM v1 schedules running requests before admitting new ones.

    So a step that admits a waiting request has given every request that was
    running when the call began, and still is (not preempted), all the tokens
    it wanted: a new admission never takes budget a running request wanted.
    """
    now_running = {id(r) for r in core.running}
    before_ids = {id(r) for r in before}
    if not any(id(r) not in before_ids for r in core.running):
        return  # nothing admitted
    given = {id(r): n for r, n in plan.scheduled}
    short = [
        r.request_id
        for r in before
        if id(r) in now_running and given.get(id(r)) != r.num_wanted_tokens
    ]
    assert not short, f"admitted new requests while running {short} did not get their tokens"


def check_pool(core: EngineCore) -> None:
    kv = core.kv
    assert 0 <= kv.num_free_blocks <= kv.num_blocks
    # Async scheduling: requests that finished in the step just committed keep
    # their blocks until the plan under way is made.
    held = sum(r.num_blocks for r in core.running) + sum(r.num_blocks for r in core.held)
    in_use = kv.num_blocks - kv.num_free_blocks
    assert held == in_use, "blocks held by running requests != blocks in use"
    assert all(r.num_blocks == 0 for r in core.waiting), "a waiting request holds blocks"
    for r in core.running:
        # The KV cache holds every computed token.
        assert r.num_blocks >= kv.blocks_for(r.num_computed_tokens)


def check_plan(plan: SchedulerOutput, core: EngineCore, setup: Setup) -> None:
    assert len(core.running) <= setup.limit
    if plan.is_empty:
        return
    ids = [r.request_id for r, _ in plan.scheduled]
    assert len(set(ids)) == len(ids)
    running = {id(r) for r in core.running}
    for request, num_new in plan.scheduled:
        assert id(request) in running
        assert 1 <= num_new <= request.num_wanted_tokens
        # The blocks for this step's tokens are reserved before it runs.
        assert request.num_blocks * core.kv.block_size_tokens >= (
            request.num_computed_tokens + num_new
        )
    if setup.budget is not None:
        assert sum(n for _, n in plan.scheduled) <= setup.budget
    if not setup.chunked_prefill:
        # Without chunked prefill a prompt (and a recomputed request's tokens) is
        # scheduled whole: every request computes all it wants, never a chunk.
        for request, num_new in plan.scheduled:
            assert num_new == request.num_wanted_tokens, "a prompt was cut without chunking"
    assert plan.extra_s >= 0.0


def simulate(
    arrays: RequestArrays, setup: Setup, skip_ahead: bool, async_scheduling: bool = False
) -> RawResult:
    policies: list[CheckedPolicy] = []

    def make_policy() -> Scheduler:
        policies.append(CheckedPolicy(setup.make_policy(), setup, async_scheduling))
        return policies[-1].inner

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


def check_run(
    raw: RawResult, arrays: RequestArrays, setup: Setup, runs_only_if_preempted: bool = True
) -> None:
    """Whole-run checks; ``runs_only_if_preempted=False`` for policies that may skip a
    running request in a step (strict priority, prefill-first's prefill-only steps)."""
    requests = raw.requests
    assert requests["request_id"].tolist() == list(range(len(arrays)))
    np.testing.assert_array_equal(requests["arrival_s"], arrays.arrival_s)
    np.testing.assert_array_equal(requests["num_prompt_tokens"], arrays.num_prompt_tokens)
    np.testing.assert_array_equal(requests["num_output_tokens"], arrays.num_output_tokens)

    # Rejected exactly when the request can never fit; everything else finishes.
    total = arrays.num_prompt_tokens + arrays.num_output_tokens
    max_tokens = total - 1  # the last output token is never computed
    blocks = -(-max_tokens // setup.block_size_tokens)
    must_reject = (total > setup.max_model_len_tokens) | (blocks > setup.num_kv_blocks)
    reasons = requests["rejection_reason"]
    rejected = reasons.notna().to_numpy()
    np.testing.assert_array_equal(rejected, must_reject)
    assert all(isinstance(r, str) and r for r in reasons[rejected])
    assert raw.records.rejections == dict(
        zip(requests["request_id"][rejected], reasons[rejected], strict=True)
    )
    done = requests[~rejected]
    assert np.isfinite(done[TIME_COLUMNS].to_numpy()).all()
    assert (done["num_generated_tokens"] == done["num_output_tokens"]).all()
    assert done["num_generated_tokens"].sum() == arrays.num_output_tokens[~rejected].sum()
    refused = requests[rejected]
    assert refused[["first_scheduled_s", "first_token_s", "finish_s"]].isna().all().all()
    assert (refused["num_generated_tokens"] == 0).all()

    # Event order of each request (TTFT <= E2E follows from the last two).
    way_in_s = setup.frontend.way_in_s(arrays.num_prompt_tokens)
    np.testing.assert_allclose(
        requests["ready_s"], arrays.arrival_s + way_in_s, rtol=1e-12, atol=1e-12
    )
    chain = done[["arrival_s", *TIME_COLUMNS]].to_numpy()
    assert (np.diff(chain, axis=1) >= 0).all()
    assert (done["first_token_s"] - done["arrival_s"] <= done["finish_s"] - done["arrival_s"]).all()
    if setup.kind == "static":
        assert (done["num_preemptions"] == 0).all()

    # The step log: steps in order, none overlapping, each taking time.
    steps = raw.steps
    start, end = steps["start_s"].to_numpy(), steps["end_s"].to_numpy()
    assert (end > start).all()
    assert (np.diff(start) >= 0).all() and (np.diff(end) >= 0).all()
    # A step starts at the simulated clock, which reaches the previous step's logged end
    # only up to float rounding (now + (end - now) != end): allow 1e-12 s of overlap.
    assert (start[1:] >= end[:-1] - 1e-12).all()
    assert (steps["num_prefill_tokens"] >= 0).all() and (steps["num_decode_seqs"] >= 0).all()
    if setup.budget is not None:
        assert (steps["num_prefill_tokens"] + steps["num_decode_seqs"] <= setup.budget).all()
    # Each emitted token is one decode or ends a prefill; ITL tokens are a subset of them.
    assert steps["num_itl_tokens"].sum() <= done["num_generated_tokens"].sum()

    # Only preempted requests have token runs after the first.
    preempted = set(done["request_id"][done["num_preemptions"] > 0])
    if runs_only_if_preempted:
        assert set(raw.later_runs) <= preempted

    # The sampled queue state.
    series = raw.timeseries
    assert (series["num_kv_blocks_used"] >= 0).all()
    assert (series["num_kv_blocks_used"] <= setup.num_kv_blocks).all()
    assert (series["num_running"] <= setup.limit).all()
    assert (np.diff(series["time_s"]) >= 0).all()

    # Token times: one per generated token, in order, from first token to finish.
    # The step log has engine times; the client sees them after the frontend
    # (delivered_s), never earlier, and in the same order.
    delivery = Delivery.of(raw.step_table)
    for request_id, first_s, finish_s, engine_first_s, engine_finish_s, count in rows(
        done,
        "request_id",
        "first_token_s",
        "finish_s",
        "engine_first_token_s",
        "engine_finish_s",
        "num_generated_tokens",
    ):
        times = token_times_s(end, engine_first_s, count, raw.later_runs.get(request_id))
        assert len(times) == count
        assert (np.diff(times) >= 0).all()
        assert times[0] == engine_first_s and times[-1] == engine_finish_s
        client = delivery.client_s(times)
        assert (np.diff(client) >= 0).all() and (client >= times).all()
        assert client[0] == first_s and client[-1] == finish_s


def rows(frame: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    """The given columns of ``frame`` as plain Python tuples, row by row."""
    return list(zip(*(frame[c].tolist() for c in columns), strict=True))


def assert_same_runs(fast: RawResult, slow: RawResult) -> None:
    pd.testing.assert_frame_equal(fast.requests, slow.requests, rtol=1e-9, atol=0)
    assert fast.requests["num_preemptions"].tolist() == slow.requests["num_preemptions"].tolist()
    pd.testing.assert_frame_equal(fast.steps, slow.steps, rtol=1e-9, atol=0)
    assert fast.later_runs.keys() == slow.later_runs.keys()
    np.testing.assert_allclose(fast.extra_itl_s, slow.extra_itl_s, rtol=1e-9)


# -- properties ---------------------------------------------------------------------


@SETTINGS
@given(arrays=workloads(), setup=continuous_setups())
def test_continuous_batching_invariants(arrays: RequestArrays, setup: Setup) -> None:
    fast = simulate(arrays, setup, skip_ahead=True)
    slow = simulate(arrays, setup, skip_ahead=False)
    check_run(fast, arrays, setup)
    check_run(slow, arrays, setup)
    assert_same_runs(fast, slow)


@SETTINGS
@given(arrays=workloads(), setup=continuous_setups())
def test_async_scheduling_skip_ahead_matches_step_by_step(
    arrays: RequestArrays, setup: Setup
) -> None:
    fast = simulate(arrays, setup, skip_ahead=True, async_scheduling=True)
    slow = simulate(arrays, setup, skip_ahead=False, async_scheduling=True)
    check_run(fast, arrays, setup)
    check_run(slow, arrays, setup)
    assert_same_runs(fast, slow)


@SETTINGS
@given(arrays=workloads(), setup=static_setups())
def test_static_batching_invariants(arrays: RequestArrays, setup: Setup) -> None:
    fast = simulate(arrays, setup, skip_ahead=True)
    slow = simulate(arrays, setup, skip_ahead=False)
    check_run(fast, arrays, setup)
    check_run(slow, arrays, setup)
    assert_same_runs(fast, slow)
    # A batch never exceeds max_batch_size: so many requests start together at most.
    starts = fast.requests["first_scheduled_s"].dropna()
    if len(starts):
        assert starts.value_counts().max() <= setup.limit


@settings(SETTINGS, max_examples=40)
@given(arrays=workloads(), setup=continuous_setups(big_pool=True))
def test_continuous_batching_is_fcfs_without_preemption(
    arrays: RequestArrays, setup: Setup
) -> None:
    raw = simulate(arrays, setup, skip_ahead=True)
    requests = raw.requests
    assert (requests["num_preemptions"] == 0).all()
    served = requests[requests["rejection_reason"].isna()]
    # Sorted by ready time (ties by the order they were queued), start times never decrease.
    ordered = served.sort_values(["ready_s", "request_id"], kind="stable")
    assert (np.diff(ordered["first_scheduled_s"].to_numpy()) >= 0).all()


@settings(SETTINGS, max_examples=40)
@given(arrays=workloads(), setup=continuous_setups())
def test_a_simulation_is_deterministic(arrays: RequestArrays, setup: Setup) -> None:
    first, second = simulate(arrays, setup, True), simulate(arrays, setup, True)
    pd.testing.assert_frame_equal(first.requests, second.requests, check_exact=True)
    pd.testing.assert_frame_equal(first.steps, second.steps, check_exact=True)
    pd.testing.assert_frame_equal(first.timeseries, second.timeseries, check_exact=True)


# -- through the public API -----------------------------------------------------------

policies_docs = st.one_of(
    # The scenario refuses a budget below max_num_seqs, as vLLM does, so draw it at or above.
    st.integers(1, 8).flatmap(
        lambda seqs: st.builds(
            lambda budget, chunked: {
                "kind": "continuous",
                "max_num_seqs": seqs,
                "max_num_batched_tokens": budget if chunked else 512,
                "chunked_prefill": chunked,
            },
            st.integers(seqs, 512),
            st.booleans(),
        )
    ),
    st.builds(
        lambda size, wait: {"kind": "static", "max_batch_size": size, "max_wait_s": wait},
        st.integers(1, 6),
        st.sampled_from([0.0, 0.05]),
    ),
)


def scenario_doc(seed: int, policy: dict[str, Any], num_kv_blocks: int) -> dict[str, Any]:
    return {
        "seed": seed,
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": {
            "kind": "linear",
            "step_overhead_s": 2e-3,
            "per_prefill_token_s": 1e-5,
            "per_decode_seq_s": 5e-4,
        },
        "scheduler": policy,
        "engine": {
            "num_kv_blocks": num_kv_blocks,
            "block_size_tokens": 8,
            # No longer than the pool holds: vLLM refuses a smaller pool at start.
            "max_model_len_tokens": min(512, 8 * num_kv_blocks),
        },
        "frontend": {"tokenize_s_per_token": 1e-6, "detokenize_s_per_token": 2.3e-4},
        "workload": {
            "kind": "synthetic",
            "num_requests": 30,
            "arrival": {"kind": "poisson", "rate_per_s": 40},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 200},
            "output_tokens": {"kind": "exponential", "mean_tokens": 10},
        },
    }


@settings(SETTINGS, max_examples=40)
@given(seed=st.integers(0, 2**32 - 1), policy=policies_docs, num_kv_blocks=st.integers(8, 200))
def test_api_runs_are_reproducible_and_stream_every_token(
    seed: int, policy: dict[str, Any], num_kv_blocks: int
) -> None:
    scenario = scenario_from_dict(scenario_doc(seed, policy, num_kv_blocks))
    first, second = api.run(scenario), api.run(scenario)
    pd.testing.assert_frame_equal(first.requests, second.requests, check_exact=True)
    assert first.summary == second.summary or _same_with_nans(first.summary, second.summary)
    requests = first.requests
    for request_id, first_s, finish_s, count, reason in rows(
        requests,
        "request_id",
        "first_token_s",
        "finish_s",
        "num_generated_tokens",
        "rejection_reason",
    ):
        times = first.token_times_s(request_id)
        assert len(times) == count
        if len(times) == 0:
            assert isinstance(reason, str) and reason
            continue
        assert (np.diff(times) >= 0).all()
        assert times[0] == first_s
        assert times[-1] == finish_s
    # Another seed draws another workload.
    other = api.run(scenario.model_copy(update={"seed": seed + 1}))
    assert not np.array_equal(other.requests["arrival_s"], requests["arrival_s"])


def _same_with_nans(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def norm(v: Any) -> Any:
        return "nan" if isinstance(v, float) and math.isnan(v) else v

    return {k: norm(v) for k, v in a.items()} == {k: norm(v) for k, v in b.items()}


# -- closed loop ------------------------------------------------------------------------


class ScriptedUsers:
    """A closed loop handing out drawn think times and lengths in call order."""

    def __init__(self, num_users: int, thinks_s: list[float], arrays: RequestArrays) -> None:
        self.num_users = num_users
        self.num_requests = len(arrays)
        self._thinks_s = thinks_s
        self._lengths = list(
            zip(arrays.num_prompt_tokens.tolist(), arrays.num_output_tokens.tolist(), strict=True)
        )
        self._next_think = self._next_length = 0

    def next_lengths(self) -> tuple[int, int]:
        self._next_length += 1
        return self._lengths[self._next_length - 1]

    def next_think_s(self) -> float:
        self._next_think += 1
        return self._thinks_s[(self._next_think - 1) % len(self._thinks_s)]

    def next_prefix(self) -> tuple[int, int] | None:
        return None  # no prefix groups


@settings(SETTINGS, max_examples=40)
@given(
    arrays=workloads(),
    setup=continuous_setups(),
    num_users=st.integers(1, 6),
    thinks_s=st.lists(st.floats(0.0, 0.2, allow_nan=False), min_size=1, max_size=10),
)
def test_closed_loop_runs_agree_step_by_step(
    arrays: RequestArrays, setup: Setup, num_users: int, thinks_s: list[float]
) -> None:
    """Users wait for each answer: at most ``num_users`` requests are in the system."""
    runs = []
    for skip_ahead in (True, False):
        policies: list[CheckedPolicy] = []

        def make_policy() -> Scheduler:
            policies.append(CheckedPolicy(setup.make_policy(), setup))  # noqa: B023
            return policies[-1].inner  # noqa: B023

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
        runs.append(Simulation(engine).run(ScriptedUsers(num_users, thinks_s, arrays)))
    fast, slow = runs
    requests = fast.requests
    assert len(requests) == len(arrays)
    assert (requests["num_generated_tokens"] <= requests["num_output_tokens"]).all()
    done = requests[requests["rejection_reason"].isna()]
    assert (done["num_generated_tokens"] == done["num_output_tokens"]).all()
    assert (fast.timeseries["num_waiting"] + fast.timeseries["num_running"] <= num_users).all()
    assert_same_runs(fast, slow)
