"""vLLM >= 0.19's full-sequence admission check (``scheduler_reserve_full_isl``) and
the version defaults that decide it (``sim.scenario.vllm_versions``).

From 0.19.0 vLLM admits a waiting request only if the KV pool's free blocks hold
its whole sequence after its prefix-cache hits, not just its first chunk; 0.18.1
and before check the chunk alone. Which releases have it was read from each
installed release's ``vllm/config/scheduler.py`` (absent from 0.17.1, 0.18.0 and
0.18.1; ``scheduler_reserve_full_isl: bool = True`` in 0.19.0 to 0.24.0), and
vLLM's own scheduler agrees with servesim's step by step on the oracle's traces
(``benchmarks/vllm_oracle.py``; docs/vllm-fidelity.md). The cases below are built
by hand, each figure worked out in the comments.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from compiled_runs import assert_identical, simulate
from scenario_docs import small_doc

from sim.api.build import policy_factory
from sim.cost.roofline import RooflineCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.engine.request import Request
from sim.engine.scheduler import Continuous, ContinuousSettings, EngineCore
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import Scenario, scenario_from_dict
from sim.scenario.vllm_versions import NEWEST, VERSIONS
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.workload.generate import RequestArrays

BLOCK = 16  # tokens per KV block

# Read from the installed releases' sources (see the module docstring).
WITHOUT_THE_CHECK = ("0.10", "0.11", "0.17", "0.18")
WITH_THE_CHECK = ("0.19", "0.20", "0.21", "0.22", "0.23", "0.24")


def scenario(scheduler: dict[str, Any] | None = None, **engine: Any) -> Scenario:
    doc = small_doc(engine=engine)
    if scheduler is not None:
        doc["scheduler"] = {"kind": "continuous", **scheduler}
    return scenario_from_dict(doc)


def reserve(scenario: Scenario) -> bool | None:
    """The scenario's ``scheduler.scheduler_reserve_full_isl``, filled in."""
    policy = scenario.scheduler
    assert isinstance(policy, ContinuousSettings)
    return policy.scheduler_reserve_full_isl


# -- the version defaults -----------------------------------------------------------


@pytest.mark.parametrize("name", WITHOUT_THE_CHECK)
def test_releases_before_0_19_admit_on_the_chunk_alone(name: str) -> None:
    assert not VERSIONS[name].scheduler_reserve_full_isl
    assert reserve(scenario(vllm_version=name)) is False


@pytest.mark.parametrize("name", WITH_THE_CHECK)
def test_releases_from_0_19_admit_only_a_whole_sequence_that_fits(name: str) -> None:
    assert VERSIONS[name].scheduler_reserve_full_isl
    assert reserve(scenario(vllm_version=name)) is True


def test_the_newest_release_is_a_scenario_default_and_the_setting_overrides_it() -> None:
    assert NEWEST in WITH_THE_CHECK
    assert reserve(scenario()) is True
    # As vLLM's --no-scheduler-reserve-full-isl, and the other way round.
    off = scenario({"scheduler_reserve_full_isl": False}, vllm_version="0.19")
    assert reserve(off) is False
    on = scenario({"scheduler_reserve_full_isl": True}, vllm_version="0.11")
    assert reserve(on) is True


def test_the_scenario_builds_its_policy_with_the_versions_check() -> None:
    for name, expected in (("0.18", False), ("0.19", True)):
        policy = policy_factory(scenario(vllm_version=name))()
        assert isinstance(policy, Continuous)
        assert policy.reserve_full_sequence is expected


def test_a_policy_built_without_a_scenario_checks_the_chunk_alone() -> None:
    assert ContinuousConfig().build().reserve_full_sequence is False


# -- the admission check ------------------------------------------------------------


def core(num_kv_blocks: int, reserve: bool, prefix_caching: bool = False) -> EngineCore:
    config = ContinuousConfig(
        max_num_seqs=4, max_num_batched_tokens=128, scheduler_reserve_full_isl=reserve
    )
    return CoreConfig(
        config.build, num_kv_blocks, BLOCK, 1024, enable_prefix_caching=prefix_caching
    ).new_core()


def step(engine: EngineCore, now_s: float) -> list[tuple[int, int]]:
    """Plan and commit one 1 s step at ``now_s``; the (request, tokens) it scheduled."""
    plan = engine.schedule(now_s)
    scheduled = [(r.request_id, n) for r, n in plan.scheduled]
    if not plan.is_empty:
        engine.update(plan, now_s + 1.0)
    return scheduled


def run_tight_pool(reserve: bool) -> tuple[list[list[tuple[int, int]]], Request]:
    """Request 0 (96-token prompt) and request 1 (100-token prompt), 8 output tokens
    each, both waiting at 0 s, on a 10-block pool and a 128-token budget."""
    engine = core(10, reserve)
    first, second = Request(0, 0.0, 96, 8), Request(1, 0.0, 100, 8)
    for request in (first, second):
        engine.add(request, 0.0)
    steps = []
    now_s = 0.0
    while engine.waiting or engine.running:
        steps.append(step(engine, now_s))
        now_s += 1.0
    return steps, second


def test_a_request_whose_whole_prompt_does_not_fit_is_admitted_by_its_chunk_before_0_19() -> None:
    steps, second = run_tight_pool(reserve=False)
    # Step 0: request 0 takes 96 tokens (6 blocks, 4 free) and request 1 the 32
    # left of the budget: 2 blocks <= 4 free, so it is admitted.
    assert steps[0] == [(0, 96), (1, 32)]
    # Step 1: request 0's 97th token needs a 7th block (3 free, then 1); request 1's
    # other 68 tokens need ceil(100 / 16) - 2 = 5 more > 1: it is preempted.
    assert second.num_preemptions >= 1


def test_under_the_check_it_waits_until_its_whole_prompt_fits() -> None:
    steps, second = run_tight_pool(reserve=True)
    # Step 0: request 1 needs ceil(100 / 16) = 7 blocks for its whole prompt, and 4
    # are free after request 0's 6: it waits, though its 32-token chunk would fit.
    assert steps[0] == [(0, 96)]
    # Request 0 then decodes: its 8th token comes from step 7 (one a step from step
    # 0), holding 7 blocks (103 tokens) meanwhile, so 3 free < 7 until it leaves.
    # Step 8 admits request 1 whole (100 <= 128 budget): no preemption, ever.
    assert [s for s in steps[1:8]] == [[(0, 1)]] * 7
    assert steps[8] == [(1, 100)]
    assert second.num_preemptions == 0
    assert second.first_scheduled_s == 8.0


def sharing(request_id: int, arrival_s: float, num_prompt_tokens: int) -> Request:
    """A request whose prompt starts with prefix group 7's 64 shared tokens."""
    return Request(
        request_id,
        arrival_s,
        num_prompt_tokens,
        8,
        prefix_group=7,
        num_shared_prefix_tokens=64,
    )


def test_the_check_counts_the_prefix_cache_hits() -> None:
    # Request 0 (a 64-token shared head + 32 own) runs from step 0: 6 blocks, its
    # head's 4 cached. Request 1 (the same head + 64 own: 128 tokens, 8 blocks) comes
    # at step 1, when request 0's 97th token takes a 7th block: 11 - 7 = 4 free. Its
    # 4 head blocks are hits (held by request 0, so not taken from the free queue):
    # 8 - 4 = 4 new blocks <= 4 free, so it is admitted for its 64 own tokens.
    engine = core(11, reserve=True, prefix_caching=True)
    engine.add(sharing(0, 0.0, 96), 0.0)
    assert step(engine, 0.0) == [(0, 96)]
    engine.add(sharing(1, 1.0, 128), 1.0)
    assert step(engine, 1.0) == [(0, 1), (1, 64)]


def test_one_block_short_of_the_whole_sequence_waits() -> None:
    # As above on 10 blocks: 3 free after request 0's growth, 4 needed.
    engine = core(10, reserve=True, prefix_caching=True)
    engine.add(sharing(0, 0.0, 96), 0.0)
    step(engine, 0.0)
    engine.add(sharing(1, 1.0, 128), 1.0)
    assert step(engine, 1.0) == [(0, 1)]


# -- the compiled loop plays it as the reference does ----------------------------------


def test_the_compiled_loop_applies_the_check_as_the_python_path() -> None:
    # The tight pool above: under the check nobody is preempted, so the compiled
    # loop plays the whole run; its results must be the Python path's to the bit,
    # and request 1 must start after request 0's 8 steps, not at 0 s.
    cost = RooflineCost(model_preset("llama-3-8b"), hardware_preset("h100"))
    config = ContinuousConfig(
        max_num_seqs=4, max_num_batched_tokens=128, scheduler_reserve_full_isl=True
    )
    engine = ReplicaConfig(CoreConfig(config.build, 10, BLOCK, 1024), cost, NO_FRONTEND)
    arrays = RequestArrays(
        np.zeros(2), np.array([96, 100], dtype=np.int64), np.array([8, 8], dtype=np.int64)
    )
    reference, reference_order, _ = simulate(arrays, engine, "never")
    raw, order, played = simulate(arrays, engine, "python")
    assert played
    assert_identical(raw, reference)
    assert order == reference_order == [0, 1]
    requests = reference.requests.set_index("request_id").sort_index()
    assert requests["num_preemptions"].tolist() == [0, 0]
    first_scheduled_s = requests["first_scheduled_s"].tolist()
    finish_s = requests["finish_s"].tolist()
    assert first_scheduled_s[1] >= finish_s[0]
