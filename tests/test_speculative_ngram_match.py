"""n-gram speculation drafts only when the sequence's last n-gram has an earlier match.

vLLM's ``NgramProposer`` drafts nothing for a sequence whose last n-gram has no
earlier match; that sequence verifies its one scheduled token. servesim draws
the match per decoding sequence and step with ``match_probability`` q, and
applies the acceptance (α, k) to matched steps only, so a decode step emits on
average ``(1 − q) × 1 + q × E(k, α)`` tokens (issue 41 item 4).
"""

from __future__ import annotations

from typing import Any

import pytest

from sim import api
from sim.cost.base import StepShape
from sim.engine.request import Request
from sim.engine.scheduler import scheduled_shape
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict


def doc(speculative: dict[str, Any] | None, seed: int = 3) -> dict[str, Any]:
    scenario: dict[str, Any] = {
        "seed": seed,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 60,
            "arrival": {"kind": "poisson", "rate_per_s": 4.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 200},
            "output_tokens": {"kind": "fixed", "tokens": 400},
        },
    }
    if speculative is not None:
        scenario["speculative"] = speculative
    return scenario


def ngram(match_probability: float) -> dict[str, Any]:
    return {
        "method": "ngram",
        "num_draft_tokens": 3,
        "acceptance_rate": 0.6,
        "match_probability": match_probability,
    }


def summary(speculative: dict[str, Any] | None, seed: int = 3) -> dict[str, Any]:
    return api.run(scenario_from_dict(doc(speculative, seed))).summary


def test_no_match_decodes_as_plain_decoding() -> None:
    # q = 0: nothing is ever drafted, every decode step emits exactly one token.
    result = summary(ngram(0.0))
    assert result["speculative_tokens_per_step"] == 1.0
    assert result["speculative_expected_tokens_per_step"] == 1.0
    assert result["total_output_tokens"] == summary(None)["total_output_tokens"]


def test_acceptance_applies_to_matched_steps_only() -> None:
    # E(3, 0.6) = 1 + 0.6 + 0.36 + 0.216 = 2.176; with q = 0.5 a step emits on
    # average 0.5 × 1 + 0.5 × 2.176 = 1.588 (by hand). ~13,000 decode slots: the
    # draws' standard error is ~0.005 tokens; each request's last step is capped
    # by what it has left, which lowers the mean by at most ~1 token a request.
    result = summary(ngram(0.5))
    assert result["speculative_expected_tokens_per_step"] == pytest.approx(1.588)
    assert result["speculative_tokens_per_step"] == pytest.approx(1.588, abs=0.03)
    # q = 1 is the model without misses: E itself
    assert summary(ngram(1.0))["speculative_tokens_per_step"] == pytest.approx(2.176, abs=0.03)


def test_misses_are_drawn_from_the_run_seed() -> None:
    assert summary(ngram(0.5)) == summary(ngram(0.5))
    assert summary(ngram(0.5)) != summary(ngram(0.5), seed=4)


def test_match_probability_is_the_ngram_proposers() -> None:
    with pytest.raises(ConfigError, match="match_probability"):
        scenario_from_dict(doc({**ngram(0.5), "method": "eagle"}))
    with pytest.raises(ConfigError, match="match_probability"):
        scenario_from_dict(doc(ngram(1.5)))


def test_an_undrafted_decode_is_a_one_token_chunk_in_the_step_shape() -> None:
    # A request with 99 tokens computed decodes its 100th: without a draft it
    # verifies that one token, a chunk of 1 after 99 cached (1 × 99 + 1 pairs,
    # 100 KV tokens read), not a decode a speculative cost turns into k + 1.
    drafted, undrafted = Request(0, 0.0, 90, 50), Request(1, 0.0, 90, 50)
    for request in (drafted, undrafted):
        request.num_computed_tokens = 99
        request.num_generated_tokens = 10
    shape = scheduled_shape([(drafted, 1), (undrafted, 1)], undrafted={undrafted})
    assert shape == StepShape.build([(1, 99)], [100])
