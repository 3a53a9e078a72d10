"""Every face honours ``speculative:``: capacity, plan and sweep validate each point
from the scenario dumped back to a document, which must validate as the file did."""

from __future__ import annotations

from pathlib import Path

from sim.api.build import cost_model_for
from sim.metrics.slo_targets import SloTarget
from sim.planning.capacity import Searcher
from sim.planning.plan_bound import decode_s
from sim.scenario import load_scenario, scenario_from_dict

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_a_draft_model_scenario_survives_its_own_dump() -> None:
    scenario = load_scenario(SCENARIOS / "speculative.yaml")
    again = scenario_from_dict(scenario.model_dump(mode="json"), "dumped", SCENARIOS)
    assert again.speculative == scenario.speculative


def test_capacity_prices_speculative_decoding() -> None:
    # Light load (0.05 req/s, 40 requests): each request decodes alone. Plain decoding
    # emits one token a step, so its TPOT is at least one lone decode step of the
    # target model; with k=4 drafts accepted at 0.7 a step emits E = (1 - 0.7^5) / 0.3
    # = 2.77 tokens, and a 1B draft's 4 steps cost well under 1.77 target steps, so
    # the speculative TPOT is below that plain step (the verification of 5 tokens is
    # memory-bound, about one plain step).
    scenario = load_scenario(
        SCENARIOS / "speculative.yaml",
        ["workload.num_requests=40", "workload.arrival.rate_per_s=0.05"],
    )
    plain_step_ms = 1e3 * decode_s(cost_model_for(scenario), 1, 500)
    searcher = Searcher(scenario, [SloTarget("tpot", "median", 1e3)], num_seeds=1)
    tpot_ms = searcher.evaluate(0.05).mean_of("median_tpot_ms")
    assert tpot_ms is not None
    assert tpot_ms < 0.8 * plain_step_ms
