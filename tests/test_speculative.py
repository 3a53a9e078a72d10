"""Speculative decoding: the expected-tokens formula, the token schedule, the cost, the effect."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
from decode_runs import run_prices
from hypothesis import given
from hypothesis import strategies as st

from sim import api
from sim.cost.base import StepShape
from sim.cost.linear import LinearCost
from sim.cost.roofline import RooflineCost
from sim.cost.speculative import Proposer, SpeculativeCost
from sim.engine.speculative import (
    SpeculativeConfig,
    expected_tokens_per_step,
    phase,
    speculative_cost,
    tokens_at_step,
)
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import scenario_from_dict

# -- the formula and the schedule ---------------------------------------------------------


def test_expected_tokens_by_hand() -> None:
    # k = 4, α = 0.7: 1 + 0.7 + 0.49 + 0.343 + 0.2401 (the i-th draft needs i acceptances).
    assert expected_tokens_per_step(4, 0.7) == pytest.approx(2.7731)
    assert expected_tokens_per_step(3, 0.0) == 1.0  # nothing accepted: plain decoding
    assert expected_tokens_per_step(3, 1.0) == 4.0  # everything accepted: k + 1
    assert expected_tokens_per_step(1, 0.5) == pytest.approx(1.5)


@given(st.integers(1, 16), st.floats(0.0, 0.999))
def test_formula_is_the_geometric_sum(k: int, alpha: float) -> None:
    assert expected_tokens_per_step(k, alpha) == pytest.approx(
        sum(alpha**i for i in range(k + 1)), rel=1e-9
    )


@given(st.integers(0, 10_000), st.integers(1, 8), st.floats(0.0, 1.0), st.integers(1, 300))
def test_schedule_emits_e_per_step_on_average(
    request_id: int, k: int, alpha: float, num_steps: int
) -> None:
    e = expected_tokens_per_step(k, alpha)
    p = phase(request_id)
    assert 0.0 <= p < 1.0
    counts = [tokens_at_step(p, s, e) for s in range(num_steps)]
    assert all(math.floor(e) <= c <= math.ceil(e) for c in counts)
    assert all(1 <= c <= k + 1 for c in counts)
    assert abs(sum(counts) - num_steps * e) < 1.0 + 1e-9


def test_phases_differ_between_requests() -> None:
    assert len({round(phase(r), 9) for r in range(100)}) == 100


# -- the cost --------------------------------------------------------------------------------

LINEAR = LinearCost(
    step_overhead_s=1e-3,
    per_prefill_seq_s=1e-5,
    per_prefill_token_s=2e-5,
    per_attention_pair_s=1e-9,
    per_decode_seq_s=3e-4,
    per_context_token_s=1e-7,
)


FRACTION = Proposer(None, cost_fraction=0.1)  # one draft step is a tenth of a target step


def test_verification_is_a_chunk_of_k_plus_one_tokens() -> None:
    cost = SpeculativeCost(LINEAR, 3, FRACTION)
    # Two decoding sequences with 10 and 20 cached tokens (contexts 11 and 21).
    shape = StepShape(num_decode_seqs=2, num_decode_context_tokens=32)
    assert cost.verify_shape(shape) == StepShape.build(prefill_chunks=[(4, 10), (4, 20)])
    mixed = StepShape.build(prefill_chunks=[(7, 5)], decode_context_tokens=[11, 21])
    assert cost.verify_shape(mixed) == StepShape.build(prefill_chunks=[(7, 5), (4, 10), (4, 20)])


def test_step_cost_adds_the_draft() -> None:
    cost = SpeculativeCost(LINEAR, 3, FRACTION)
    shape = StepShape(num_decode_seqs=2, num_decode_context_tokens=32)
    plain = LINEAR.step_s(shape)
    assert cost.draft_s(shape) == pytest.approx(0.1 * 3 * plain)
    assert cost.step_s(shape) == pytest.approx(
        LINEAR.step_s(cost.verify_shape(shape)) + 0.3 * plain
    )
    prefill_only = StepShape.build(prefill_chunks=[(50, 0)])
    assert cost.step_s(prefill_only) == LINEAR.step_s(prefill_only)
    assert run_prices(cost, 2, 32, 3).tolist() == pytest.approx(
        [
            cost.step_s(StepShape(num_decode_seqs=2, num_decode_context_tokens=32 + 2 * j))
            for j in range(3)
        ]
    )


def test_draft_model_runs_a_verified_chunk_then_k_minus_1_decode_steps_on_the_roofline() -> None:
    h100 = hardware_preset("h100")
    target = RooflineCost(model_preset("llama-3-8b"), h100)
    draft = RooflineCost(model_preset("smollm2-135m"), h100)
    cost = SpeculativeCost(target, 4, Proposer("draft_model", draft))
    shape = StepShape(num_decode_seqs=8, num_decode_context_tokens=800)
    # vLLM's proposer: a pass over the 5 verified tokens of each sequence, then 3
    # one-token passes whose contexts start 4 tokens further on.
    first = draft.step_s(cost.verify_shape(shape))
    rest = float(run_prices(draft, 8, 800 + 4 * 8, 3).sum())
    assert cost.draft_s(shape) == pytest.approx(first + rest)
    # Small decode batches are memory-bound: verifying 5 tokens costs about one decode step.
    verify = target.step_s(cost.verify_shape(shape))
    assert verify == pytest.approx(target.step_s(shape), rel=0.05)
    assert "speculative(k=4" in cost.label and "smollm2" in cost.label


DECODE_4 = StepShape(num_decode_seqs=4, num_decode_context_tokens=400)


def test_scenario_draft_pays_no_engine_overhead_per_draft_step() -> None:
    h100 = hardware_preset("h100")
    target = RooflineCost(model_preset("llama-3-8b"), h100)
    config = SpeculativeConfig.model_validate(SPEC)
    cost = speculative_cost(config, target, model_preset("llama-3-8b"), h100)
    bare = SpeculativeCost(target, 4, Proposer("draft_model", RooflineCost(SMOLLM2, h100)))
    assert cost.draft_s(DECODE_4) == pytest.approx(bare.draft_s(DECODE_4))
    # A 135M draft's step on an H100 is a fraction of a millisecond of GPU work.
    assert cost.draft_s(DECODE_4) < 4 * 1e-3


# -- configuration ---------------------------------------------------------------------------


def doc(
    rate: float = 2.0, speculative: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    scenario: dict[str, Any] = {
        "seed": 3,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 120,
            "arrival": {"kind": "poisson", "rate_per_s": rate},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 50, "max_tokens": 400},
            "output_tokens": {"kind": "uniform", "min_tokens": 2, "max_tokens": 200},
        },
        **extra,
    }
    if speculative is not None:
        scenario["speculative"] = speculative
    return scenario


SMOLLM2 = model_preset("smollm2-135m")
SPEC = {"num_draft_tokens": 4, "acceptance_rate": 0.7, "draft_model": "smollm2-135m"}


def test_config_needs_exactly_one_draft_cost() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        scenario_from_dict(doc(speculative={"num_draft_tokens": 4, "acceptance_rate": 0.7}))
    both = {**SPEC, "draft_cost_fraction": 0.1}
    with pytest.raises(ConfigError, match="exactly one"):
        scenario_from_dict(doc(speculative=both))
    with pytest.raises(ConfigError, match="acceptance_rate"):
        scenario_from_dict(doc(speculative={**SPEC, "acceptance_rate": 1.5}))
    with pytest.raises(ConfigError, match="draft_model"):
        scenario_from_dict(doc(speculative={**SPEC, "draft_model": "no-such-model"}))
    config = scenario_from_dict(doc(speculative=SPEC)).speculative
    assert isinstance(config, SpeculativeConfig)
    assert config.expected_tokens_per_step == pytest.approx(2.7731)


def test_static_batching_cannot_speculate() -> None:
    with pytest.raises(ConfigError, match="continuous"):
        scenario_from_dict(doc(speculative=SPEC, scheduler={"kind": "static"}))


# -- whole runs -------------------------------------------------------------------------------


def run(rate: float, speculative: dict[str, Any] | None, **extra: Any) -> api.Result:
    return api.run(scenario_from_dict(doc(rate, speculative, **extra)))


def test_speculation_lowers_tpot_at_low_load() -> None:
    off, on = run(2.0, None), run(2.0, SPEC)
    assert on.summary["completed"] == off.summary["completed"] == 120
    assert on.summary["total_output_tokens"] == off.summary["total_output_tokens"]
    assert on.summary["mean_tpot_ms"] < 0.6 * off.summary["mean_tpot_ms"]
    assert on.summary["mean_e2el_ms"] < off.summary["mean_e2el_ms"]
    # Each step carries several tokens: one ITL gap per step is longer than TPOT.
    assert on.summary["mean_itl_ms"] > on.summary["mean_tpot_ms"]
    assert on.summary["speculative_tokens_per_step"] == pytest.approx(2.7731, rel=0.05)
    assert on.summary["speculative_expected_tokens_per_step"] == pytest.approx(2.7731)
    assert "speculative_tokens_per_step" not in off.summary


def test_gains_shrink_at_high_load() -> None:
    # Verification costs k + 1 times the FLOPs: once batches are big, decode is
    # compute-bound and the speed-up fades.
    low = run(2.0, None).summary["mean_tpot_ms"] / run(2.0, SPEC).summary["mean_tpot_ms"]
    high = run(60.0, None).summary["mean_tpot_ms"] / run(60.0, SPEC).summary["mean_tpot_ms"]
    assert low > high


def test_acceptance_rate_zero_only_adds_cost() -> None:
    never = {"num_draft_tokens": 4, "acceptance_rate": 0.0, "draft_cost_fraction": 0.2}
    off, on = run(2.0, None), run(2.0, never)
    assert on.summary["speculative_tokens_per_step"] == pytest.approx(1.0)
    assert on.summary["mean_tpot_ms"] > off.summary["mean_tpot_ms"]


def test_step_by_step_and_skip_ahead_agree() -> None:
    # Speculative plans always run one step per event, so the two modes coincide.
    fast = run(8.0, SPEC, engine={"skip_ahead": True})
    slow = run(8.0, SPEC, engine={"skip_ahead": False})
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)


def test_token_times_are_refused_under_speculation() -> None:
    result = run(2.0, SPEC)
    with pytest.raises(NotImplementedError):
        result.token_times_s(0)


def test_speculation_and_prefix_caching_together() -> None:
    groups = {"num_groups": 2, "shared_prefix_tokens": 512}
    both = doc(2.0, SPEC, engine={"enable_prefix_caching": True})
    both["workload"]["prefix_groups"] = groups
    result = api.run(scenario_from_dict(both))
    assert result.summary["completed"] == 120
    assert result.summary["prefix_cache_hit_rate"] > 0
    assert result.summary["speculative_tokens_per_step"] > 2


def test_shipped_scenario_shows_the_effect() -> None:
    overrides = ["workload.num_requests=100"]
    on = api.run("scenarios/speculative.yaml", overrides)
    off = api.run("scenarios/speculative.yaml", [*overrides, "speculative=null"])
    assert on.summary["mean_tpot_ms"] < off.summary["mean_tpot_ms"]
