"""A plan unit's GPUs come from its scenario (``Scenario.num_gpus``, the one home of a
deployment's GPU count), not from a second count on the candidate: a configuration whose
scenario is refused is no deployment, and plan.json gives it no GPU count."""

from __future__ import annotations

from pathlib import Path

from test_plan import SCALING_DOC, SMALL_SPACE

from sim.metrics.slo_targets import parse_targets
from sim.planning.plan import PlanConfig, plan
from sim.planning.plan_report import outcome_doc
from sim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent


def test_gpus_per_unit_is_the_scenarios_and_null_where_it_is_refused() -> None:
    # qwen2.5-7b's 28 attention heads split over 1 GPU, not over 8.
    scenario = scenario_from_dict({**SCALING_DOC, "model": "qwen2.5-7b"})
    space = {**SMALL_SPACE, "gpus": ["h100"], "tensor_parallel_sizes": [1, 8], "max_loads": 4}
    config = PlanConfig.model_validate(space)
    targets = parse_targets(["tpot_mean_ms=20"])
    result = plan(scenario, config, targets, 10.0, {"h100": 3.0}, workers=1)
    by_tp = {o.candidate.tensor_parallel_size: o for o in result.outcomes}
    refused = by_tp[8]
    assert refused.status == "refused" and "28 attention heads" in refused.reason
    assert outcome_doc(refused)["gpus_per_unit"] is None  # main: 8, a unit that cannot exist
    searched = by_tp[1]
    assert searched.scenario_doc is not None
    unit = scenario_from_dict(searched.scenario_doc)
    assert outcome_doc(searched)["gpus_per_unit"] == unit.num_gpus == 1
