"""The further policies on small hand-checked cases, and their comparative effects.

dynamic, orca, prefill_first, priority (strict, weighted), shortest_prompt_first,
and preemption by swap. Costs are powers of two (as in ``tests/test_policies.py``)
so step times add up exactly; expected values are derived in the comments.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from exact_costs import COST, DEC, OVH, PRE, TOL, work

from sim import api
from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import SwapSpace
from sim.engine.policies import (
    Continuous,
    ContinuousConfig,
    DynamicConfig,
    OrcaConfig,
    PrefillFirstConfig,
    PriorityConfig,
    Scheduler,
    ShortestPromptFirstConfig,
    StaticConfig,
)
from sim.metrics.stats import summarize
from sim.scenario import load_scenario, scenario_from_dict
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def run(
    arrays: RequestArrays,
    make_policy: Callable[[], Scheduler],
    *,
    num_kv_blocks: int = 10_000,
    cost: LinearCost = COST,
    skip_ahead: bool = True,
) -> RawResult:
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=make_policy,
            num_kv_blocks=num_kv_blocks,
            block_size_tokens=16,
            max_model_len_tokens=16_384,
        ),
        cost=cost,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )
    return Simulation(engine).run(cast(OpenLoop, arrays))


def column(raw: RawResult, name: str) -> list[Any]:
    return raw.requests.sort_values("request_id")[name].tolist()


def start_order(raw: RawResult) -> list[int]:
    return raw.requests.sort_values(["first_scheduled_s", "request_id"])["request_id"].tolist()


# -- dynamic batching -------------------------------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_dynamic_batch_drops_finished_members_without_padding(skip_ahead: bool) -> None:
    # Batch of r0 (output 2) and r1 (output 5), prompts 8: one prefill step (OVH + 16 PRE),
    # a decode step of both, then r0 has left: three decode steps of r1 alone.
    arrays = work([0.0, 0.0], [8, 8], [2, 5])
    raw = run(arrays, DynamicConfig(max_batch_size=2).build, skip_ahead=skip_ahead)
    assert raw.steps["num_decode_seqs"].tolist() == [0, 2, 1, 1, 1]
    prefill_s = OVH + 16 * PRE
    assert column(raw, "finish_s") == [
        pytest.approx(prefill_s + OVH + 2 * DEC, abs=TOL),
        pytest.approx(prefill_s + OVH + 2 * DEC + 3 * (OVH + DEC), abs=TOL),
    ]
    # Static batching keeps r0's slot as padding: two slots every step, r1 later.
    static = run(arrays, StaticConfig(max_batch_size=2).build, skip_ahead=skip_ahead)
    assert static.steps["num_decode_seqs"].tolist() == [0, 2, 2, 2, 2]
    assert column(static, "finish_s")[1] > column(raw, "finish_s")[1]


def test_dynamic_batch_is_not_joined_until_every_member_is_done() -> None:
    # r2 arrives at 0.01, during the batch of r0, r1; the freed slot of r0 stays empty
    # until r1 finishes (continuous batching would admit r2 at the next step).
    arrays = work([0.0, 0.0, 0.01], [8, 8, 8], [2, 5, 2])
    raw = run(arrays, DynamicConfig(max_batch_size=2).build)
    finish_1 = OVH + 16 * PRE + OVH + 2 * DEC + 3 * (OVH + DEC)
    assert column(raw, "first_scheduled_s")[2] == pytest.approx(finish_1, abs=TOL)
    cont = run(arrays, ContinuousConfig(max_num_seqs=2).build)
    assert column(cont, "first_scheduled_s")[2] < finish_1


def test_dynamic_partial_batch_waits_max_wait_s() -> None:
    raw = run(
        work([0.0, 0.1], [8, 8], [2, 2]), DynamicConfig(max_batch_size=4, max_wait_s=0.5).build
    )
    assert column(raw, "first_scheduled_s") == [0.5, 0.5]


# -- orca: maximum-length reservation ----------------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_orca_reserves_the_maximum_length_at_admission(skip_ahead: bool) -> None:
    # Pool 8 blocks of 16; prompt 16 + output 49 -> 64 tokens -> 4 blocks reserved each,
    # so two of three run; r2 starts when r0 finishes. No preemption ever.
    arrays = work([0.0, 0.0, 0.0], [16] * 3, [49] * 3)
    raw = run(arrays, OrcaConfig().build, num_kv_blocks=8, skip_ahead=skip_ahead)
    finish_0 = OVH + 32 * PRE + 48 * (OVH + 2 * DEC)
    assert column(raw, "first_scheduled_s")[:2] == [0.0, 0.0]
    assert column(raw, "finish_s")[0] == pytest.approx(finish_0, abs=TOL)
    assert column(raw, "first_scheduled_s")[2] == pytest.approx(finish_0, abs=TOL)
    assert column(raw, "num_preemptions") == [0, 0, 0]
    assert raw.timeseries["num_running"].max() == 2
    # Paged continuous batching admits all three at once (1 block each for the prompt),
    # and preempts when the pool runs out.
    paged = run(arrays, ContinuousConfig().build, num_kv_blocks=8, skip_ahead=skip_ahead)
    assert paged.timeseries["num_running"].max() == 3
    assert sum(column(paged, "num_preemptions")) > 0


def test_orca_admits_fewer_concurrent_requests_than_paging_for_the_same_pool() -> None:
    rng = np.random.default_rng(7)
    n = 150
    arrays = work(
        np.cumsum(rng.exponential(0.01, n)).tolist(),
        rng.integers(16, 200, n).tolist(),
        rng.integers(20, 300, n).tolist(),
    )
    orca = run(arrays, OrcaConfig(max_num_seqs=64).build, num_kv_blocks=200)
    paged = run(arrays, ContinuousConfig(max_num_seqs=64).build, num_kv_blocks=200)
    assert orca.timeseries["num_running"].mean() < paged.timeseries["num_running"].mean()
    assert orca.timeseries["num_running"].max() < paged.timeseries["num_running"].max()
    assert (orca.requests["num_preemptions"] == 0).all()


# -- prefill-first (vLLM v0) -------------------------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_prefill_first_stalls_decodes_for_a_whole_prompt(skip_ahead: bool) -> None:
    # r0 (prompt 8) decodes alone; r1's 5000-token prompt arrives at 0.1 and is admitted at
    # the next step boundary t_b in a prefill-only step: no decode, the whole prompt.
    arrays = work([0.0, 0.1], [8, 5000], [400, 2])
    raw = run(arrays, PrefillFirstConfig(max_num_batched_tokens=8192).build, skip_ahead=skip_ahead)
    steps = raw.steps
    big = steps[steps["num_prefill_tokens"] == 5000]
    assert len(big) == 1 and big["num_decode_seqs"].tolist() == [0]
    t_b = float(big["start_s"].iloc[0])
    assert column(raw, "first_scheduled_s")[1] == t_b
    # Steps before are r0's: OVH + 8 PRE, then OVH + DEC each; t_b is the first end >= 0.1.
    k = int(np.ceil((0.1 - OVH - 8 * PRE) / (OVH + DEC)))
    assert t_b == pytest.approx(OVH + 8 * PRE + k * (OVH + DEC), abs=1e-9)
    assert column(raw, "first_token_s")[1] == pytest.approx(t_b + OVH + 5000 * PRE, abs=1e-9)
    # r0 skips the prefill-only step: one inter-token gap of that step plus the next
    # decode step (r0 and r1: OVH + 2 DEC), and a second run of tokens after it.
    np.testing.assert_allclose(raw.extra_itl_s, [OVH + 5000 * PRE + OVH + 2 * DEC], atol=1e-9)
    assert [before for _, before in raw.later_runs[0]] == [k + 1]
    durations = (steps["end_s"] - steps["start_s"]).to_numpy()
    assert durations.max() == pytest.approx(OVH + 5000 * PRE, abs=1e-9)
    # Never mixed: a step has prefill or decodes, not both.
    assert ((steps["num_prefill_tokens"] == 0) | (steps["num_decode_seqs"] == 0)).all()


def test_prefill_first_takes_a_first_prompt_longer_than_the_budget_whole() -> None:
    raw = run(
        work([0.0, 0.0], [300, 300], [2, 2]),
        PrefillFirstConfig(max_num_seqs=4, max_num_batched_tokens=256).build,
    )
    # Each prompt alone exceeds the budget: one prefill step each, never both together.
    assert raw.steps["num_prefill_tokens"].tolist()[:2] == [300, 300]
    assert column(raw, "num_generated_tokens") == [2, 2]


def test_chunked_prefill_lowers_p99_tpot_against_prefill_first_under_long_prompts() -> None:
    rng = np.random.default_rng(3)
    n = 120
    arrays = work(
        np.cumsum(rng.exponential(0.25, n)).tolist(),
        rng.integers(2000, 6000, n).tolist(),
        rng.integers(50, 200, n).tolist(),
    )
    cost = LinearCost(step_overhead_s=5e-3, per_prefill_token_s=5e-5, per_decode_seq_s=1e-4)
    p99 = {}
    for name, make in (
        ("chunked", ContinuousConfig(max_num_batched_tokens=512).build),
        ("prefill_first", PrefillFirstConfig(max_num_batched_tokens=8192).build),
    ):
        raw = run(arrays, make, cost=cost)
        summary = summarize(raw.records, raw.step_table, raw.extra_itl_s, None)
        p99[name] = summary["p99_tpot_ms"]
    assert p99["chunked"] is not None and p99["prefill_first"] is not None
    assert p99["chunked"] < p99["prefill_first"]


# -- priority classes and shortest prompt first --------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_strict_priority_serves_the_most_urgent_first(skip_ahead: bool) -> None:
    # One slot, three requests at 0 with priorities 2, 1, 0: each runs a prefill step
    # (OVH + 8 PRE) and a decode step (OVH + DEC), most urgent (lowest value) first.
    arrays = work([0.0] * 3, [8] * 3, [2] * 3, priority=[2, 1, 0])
    raw = run(arrays, PriorityConfig(max_num_seqs=1).build, skip_ahead=skip_ahead)
    each = OVH + 8 * PRE + OVH + DEC
    assert column(raw, "first_scheduled_s") == [
        pytest.approx(2 * each, abs=TOL),
        pytest.approx(each, abs=TOL),
        0.0,
    ]
    # FCFS within a class: equal priorities start in arrival order.
    tied = run(
        work([0.0] * 3, [8] * 3, [2] * 3, priority=[1, 1, 1]), PriorityConfig(max_num_seqs=1).build
    )
    assert start_order(tied) == [0, 1, 2]


def test_strict_priority_preempts_the_lowest_class_not_the_newest() -> None:
    # As test_policies' preemption case (4 blocks; prompt 16, output 40 each; r1 joins at
    # step 1), but r1 is more urgent: when the pool runs out, r0 (priority 1) goes: the
    # largest (priority, arrival time), as vLLM's Scheduler.schedule picks it.
    arrays = work([0.0, 0.001], [16, 16], [40, 40], priority=[1, 0])
    raw = run(arrays, PriorityConfig().build, num_kv_blocks=4)
    assert column(raw, "num_preemptions") == [1, 0]
    assert column(raw, "finish_s")[1] < column(raw, "finish_s")[0]
    fcfs = run(arrays, ContinuousConfig().build, num_kv_blocks=4)
    assert column(fcfs, "num_preemptions") == [0, 1]


def test_weighted_priority_shares_admissions_by_weight() -> None:
    # One slot, a backlog of 4 + 4 requests, weights 3 (class 0) : 1 (class 1). Finish
    # tags: class 0 at 1/3, 2/3, 1, 4/3; class 1 at 1, 2, 3, 4 (ties: class 0, the more
    # urgent, first).
    priority = [1, 0] * 4
    arrays = work([0.0] * 8, [8] * 8, [2] * 8, priority=priority)
    config = PriorityConfig(max_num_seqs=1, mode="weighted", weights={0: 3.0, 1: 1.0})
    raw = run(arrays, config.build)
    assert [priority[i] for i in start_order(raw)] == [0, 0, 0, 1, 0, 1, 1, 1]
    # Equal weights alternate between the classes.
    even = run(arrays, PriorityConfig(max_num_seqs=1, mode="weighted").build)
    assert [priority[i] for i in start_order(even)] == [0, 1] * 4


def test_weighted_priority_gives_an_idle_class_no_credit() -> None:
    # One slot; six class-0 requests at 0, two class-1 ones at 0.05; equal weights. Each
    # request takes OVH + 8 PRE + OVH + DEC = 0.02734375 s, so r0, r1 run first and the
    # class-1 pair is tagged at 0.0546875 from the virtual time V = 1 (start tag of r1):
    # r6 finishes at 2, r7 at 3, between class 0's r2 (3, more urgent on the tie) and r3 (4).
    # Tagged from 0 instead (banked credit), both would run before r2.
    arrays = work([0.0] * 6 + [0.05] * 2, [8] * 8, [2] * 8, priority=[0] * 6 + [1, 1])
    raw = run(arrays, PriorityConfig(max_num_seqs=1, mode="weighted").build)
    assert start_order(raw) == [0, 1, 6, 2, 7, 3, 4, 5]


def test_shortest_prompt_first_admits_short_prompts_first() -> None:
    arrays = work([0.0] * 4, [300, 10, 100, 10], [2] * 4)
    raw = run(arrays, ShortestPromptFirstConfig(max_num_seqs=1).build)
    assert start_order(raw) == [1, 3, 2, 0]  # ties (r1, r3) in arrival order
    fcfs = run(arrays, ContinuousConfig(max_num_seqs=1).build)
    assert start_order(fcfs) == [0, 1, 2, 3]
    ttft = (raw.requests["first_token_s"] - raw.requests["arrival_s"]).mean()
    fcfs_ttft = (fcfs.requests["first_token_s"] - fcfs.requests["arrival_s"]).mean()
    assert ttft < fcfs_ttft


# -- preemption by swap ------------------------------------------------------------

BLOCK_BYTES = 1.0  # with a bandwidth of 256 B/s a block takes 1/256 s to copy one way
BANDWIDTH = 256.0


def swapping(
    capacity_blocks: int, config: ContinuousConfig | PriorityConfig | None = None
) -> Callable[[], Scheduler]:
    settings = config or ContinuousConfig(preemption="swap")

    def build() -> Scheduler:
        return settings.build(SwapSpace(capacity_blocks * BLOCK_BYTES, BLOCK_BYTES, BANDWIDTH))

    return build


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_swap_keeps_computed_tokens_and_costs_copy_time(skip_ahead: bool) -> None:
    # test_policies' preemption case: r1 (prompt 16) is preempted with 16 tokens generated,
    # so 31 computed tokens in 2 blocks. By recompute it later prefills 32 tokens; by
    # swap it copies 2 blocks out (2/256 s, added to the preempting step) and back in
    # (2/256 s, added to the step that readmits it, a plain decode step).
    arrays = work([0.0, 0.001], [16, 16], [40, 40])
    recompute = run(arrays, ContinuousConfig().build, num_kv_blocks=4, skip_ahead=skip_ahead)
    swap = run(arrays, swapping(10), num_kv_blocks=4, skip_ahead=skip_ahead)
    assert column(swap, "num_preemptions") == [0, 1]
    assert column(swap, "num_swaps") == [0, 1]
    assert column(recompute, "num_swaps") == [0, 0]
    assert column(swap, "num_generated_tokens") == [40, 40]
    # No recompute: only the two prompts are ever prefilled.
    assert swap.steps["num_prefill_tokens"].sum() == 32
    assert recompute.steps["num_prefill_tokens"].sum() == 64
    copy_s = 2 / BANDWIDTH
    finish_0 = column(swap, "finish_s")[0]
    assert finish_0 == pytest.approx(column(recompute, "finish_s")[0] + copy_s, abs=1e-9)
    ((resume_s, tokens_before),) = swap.later_runs[1]
    assert tokens_before == 16
    assert resume_s == pytest.approx(finish_0 + OVH + DEC + copy_s, abs=1e-9)
    assert column(swap, "finish_s")[1] == pytest.approx(resume_s + 23 * (OVH + DEC), abs=1e-9)


def test_swap_falls_back_to_recompute_when_the_swap_space_is_full() -> None:
    arrays = work([0.0, 0.001], [16, 16], [40, 40])
    full = run(arrays, swapping(1), num_kv_blocks=4)  # 1 block of swap space, 2 needed
    assert column(full, "num_preemptions") == [0, 1]
    assert column(full, "num_swaps") == [0, 0]
    assert full.steps["num_prefill_tokens"].sum() == 64


def test_swap_space_accounting() -> None:
    space = SwapSpace(capacity_bytes=10.5, bytes_per_block=2.0, bandwidth_bytes_per_s=4.0)
    assert space.num_blocks == 5 and space.transfer_s(2) == 1.0
    with pytest.raises(ValueError):
        SwapSpace(1.0, 0.0, 1.0)


def test_swap_works_for_the_priority_family_too() -> None:
    arrays = work([0.0, 0.001], [16, 16], [40, 40], priority=[1, 0])  # r0 less urgent
    raw = run(arrays, swapping(10, PriorityConfig(preemption="swap")), num_kv_blocks=4)
    assert column(raw, "num_swaps") == [1, 0]


# -- through scenarios ------------------------------------------------------------------


def _doc(scheduler: dict[str, Any], **workload: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": {
            "kind": "linear",
            "step_overhead_s": 2e-3,
            "per_prefill_token_s": 1e-5,
            "per_decode_seq_s": 5e-4,
        },
        "scheduler": scheduler,
        "engine": {"block_size_tokens": 8, "max_model_len_tokens": 512},
        "workload": {
            "kind": "synthetic",
            "num_requests": 40,
            "arrival": {"kind": "poisson", "rate_per_s": 40},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 200},
            "output_tokens": {"kind": "exponential", "mean_tokens": 10},
            **workload,
        },
    }


@pytest.mark.parametrize(
    "scheduler",
    [
        {"kind": "dynamic", "max_batch_size": 4, "max_wait_s": 0.01},
        {"kind": "orca", "max_num_seqs": 8},
        {"kind": "prefill_first", "max_num_seqs": 8, "max_num_batched_tokens": 512},
        {"kind": "priority", "mode": "weighted", "weights": {1: 4}},
        {"kind": "shortest_prompt_first", "preemption": "swap"},
    ],
)
def test_every_policy_runs_from_a_scenario(scheduler: dict[str, Any]) -> None:
    scenario = scenario_from_dict(
        _doc(scheduler, priority={"kind": "classes", "weights": [0.5, 0.5]})
    )
    result = api.run(scenario)  # KV pool sized from memory: every policy bounds its step
    assert result.summary["policy"] == scheduler["kind"]
    assert result.summary["completed"] == 40
    assert "mean_ttft_ms_priority_1" in result.summary
    assert result.summary["num_swaps"] >= 0


def test_priority_classes_leave_the_other_streams_unchanged() -> None:
    plain = api.run(scenario_from_dict(_doc({"kind": "continuous"})))
    classes = api.run(
        scenario_from_dict(
            _doc(
                {"kind": "continuous"},
                priority={"kind": "classes", "weights": [1, 3], "values": [0, 5]},
            )
        )
    )
    for name in ("arrival_s", "num_prompt_tokens", "num_output_tokens"):
        assert plain.requests[name].tolist() == classes.requests[name].tolist()
    assert set(classes.requests["priority"]) <= {0, 5}
    assert (plain.requests["priority"] == 0).all()


def test_bad_policy_settings_are_one_line_errors() -> None:
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="weights"):
        scenario_from_dict(_doc({"kind": "priority", "mode": "weighted", "weights": {1: 0}}))
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        scenario_from_dict(
            _doc(
                {
                    "kind": "shortest_prompt_first",
                    "chunked_prefill": False,
                    "max_num_batched_tokens": 100,
                }
            )
        )
    with pytest.raises(ConfigError, match="weights"):
        scenario_from_dict(
            _doc({"kind": "continuous"}, priority={"kind": "classes", "weights": [0, 0]})
        )


def test_swap_factory_attaches_a_swap_space_only_for_swap() -> None:
    swap = api.policy_factory(
        scenario_from_dict(_doc({"kind": "continuous", "preemption": "swap"}))
    )()
    assert isinstance(swap, Continuous) and swap.swap is not None
    assert swap.swap.num_blocks > 0
    plain = api.policy_factory(scenario_from_dict(_doc({"kind": "continuous"})))()
    assert isinstance(plain, Continuous) and plain.swap is None


def test_priority_scenario_lowers_the_interactive_class_ttft() -> None:
    path = SCENARIOS / "priority.yaml"
    fast = ["workload.num_requests=600"]
    urgent = api.run(path, overrides=fast)
    fcfs = api.run(path, overrides=[*fast, "scheduler.kind=continuous"])
    # The interactive class is priority 0 (vLLM: lower is more urgent).
    assert urgent.summary["p99_ttft_ms_priority_0"] < fcfs.summary["p99_ttft_ms_priority_0"]
    assert urgent.summary["mean_ttft_ms_priority_0"] < fcfs.summary["mean_ttft_ms_priority_0"]


def test_policies_scenario_runs_with_every_kind() -> None:
    path = SCENARIOS / "policies.yaml"
    for kind in (
        "continuous",
        "static",
        "dynamic",
        "orca",
        "prefill_first",
        "priority",
        "shortest_prompt_first",
        "least_attained_service",
    ):
        scenario = load_scenario(path, [f"scheduler.kind={kind}", "workload.num_requests=50"])
        result = api.run(scenario, base_dir=SCENARIOS)
        assert result.summary["policy"] == kind
        assert result.summary["completed"] == 50
