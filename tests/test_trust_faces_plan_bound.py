"""``servesim plan`` honours what makes tokens cheaper than its bound prices: a
speculative candidate is searched, not skipped as infeasible from plain decoding."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.api.build import cost_model_for
from sim.errors import ConfigError
from sim.metrics.slo_targets import SloTarget
from sim.planning.plan import plan
from sim.planning.plan_bound import decode_s
from sim.planning.plan_file import PlanConfig
from sim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

NGRAM = [
    "speculative.draft_model=null",
    "speculative.method=ngram",
    "workload.prompt_tokens.median_tokens=100",
    "workload.prompt_tokens.max_tokens=400",
    "workload.output_tokens.median_tokens=40",
    "workload.output_tokens.max_tokens=100",
]
LIMIT_MS = 5.0


def _one_h100_config(tensor_parallel_sizes: list[int], **search: int) -> PlanConfig:
    """A plan over H100s at one batch setting, no refinement, one seed."""
    return PlanConfig.model_validate(
        {
            "gpus": ["h100"],
            "tensor_parallel_sizes": tensor_parallel_sizes,
            "max_num_seqs": [64],
            "max_num_batched_tokens": [2048],
            "chunked_prefill": [True],
            "refine": False,
            "seeds": 1,
            **search,
        }
    )


def test_plan_searches_a_speculative_candidate_its_plain_bound_calls_infeasible() -> None:
    # n-gram drafts (CPU only) of k=4 accepted at 0.7: a decode step verifies 5 tokens
    # (memory-bound: about a plain step's time) and emits E = (1 - 0.7^5) / 0.3 = 2.77,
    # so a lone request's TPOT is about a plain step / 2.77. The SLO sits between the
    # two: plain decoding alone breaks it (checked below, from the cost model), a
    # speculative request alone meets it, so the candidate must be searched and found.
    scenario = load_scenario(SCENARIOS / "speculative.yaml", NGRAM)
    plain_step_ms = 1e3 * decode_s(cost_model_for(scenario), 1, 100)
    assert plain_step_ms > LIMIT_MS > plain_step_ms / 2.77 * 1.2
    config = _one_h100_config([1], num_requests=100, max_loads=3)
    result = plan(
        scenario,
        config,
        [SloTarget("tpot", "median", LIMIT_MS)],
        target_rate_per_s=1.0,
        workers=1,
    )
    (outcome,) = result.outcomes
    assert outcome.status == "searched", outcome.reason
    assert result.best is outcome


def test_plan_refuses_one_deployments_kv_pool() -> None:
    # engine.num_kv_blocks is used verbatim (vLLM's logged count for one GPU and TP
    # degree); a TP2 candidate holds twice the KV memory per replica, another GPU
    # another amount, so the same count for every candidate prices the wrong pool.
    scenario = load_scenario(
        SCENARIOS / "chat.yaml", ["engine.num_kv_blocks=4000", "workload.num_requests=100"]
    )
    config = _one_h100_config([1, 2], max_loads=2)
    with pytest.raises(ConfigError, match=r"^plan: engine.num_kv_blocks 4000 "):
        plan(scenario, config, [SloTarget("ttft", "median", 500)], 1.0, workers=1)


def test_plan_refuses_a_link_it_would_replace_by_each_gpus_own() -> None:
    # H100s over PCIe (no NVLink): a TP2 all-reduce priced over NVLink4 instead would
    # be several times cheaper; the planner gives each candidate its GPU's own link.
    scenario = load_scenario(
        SCENARIOS / "chat.yaml",
        ["parallelism.link=pcie5-rtxpro6000", "workload.num_requests=100"],
    )
    config = _one_h100_config([2], max_loads=2)
    with pytest.raises(ConfigError, match=r"^plan: parallelism.link pcie5-rtxpro6000: "):
        plan(scenario, config, [SloTarget("ttft", "median", 500)], 1.0, workers=1)
