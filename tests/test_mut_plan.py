"""Where ``servesim plan`` abandons a candidate's search, and a lone request's latency
bound (issue 39's mutation check, ``benchmarks/mutants.py``: ``plan-stop-below-doubled``,
``plan-lone-unchunked``, ``plan-lone-e2el-sum``).

A fleet of ``ceil(R / c)`` units of ``g`` GPUs at ``p`` $/GPU-hour costs at least
``R g p / c``; it costs at least the cheapest fleet found so far, ``B`` $/h, once
``c <= R g p / B``. So a confident SLO failure at a load at or below
``R g p / B`` ends the candidate's search, and no higher load may: there its
fleet could still be the cheaper one. Each task's stop rate therefore names,
through ``R g p / stop``, the cost of a fleet already found.

Note for the lead: written against ``sim/planning/plan.py`` as of issue 39's start
(``search_candidate`` and the task's ``stop_below_rate_per_s``); re-run after merging.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import sim.planning.plan as plan_module
from sim.cost.linear import LinearCost
from sim.metrics.slo_targets import parse_targets
from sim.planning.plan import plan
from sim.planning.plan_bound import LengthStats, Limits, lone_request_ms
from sim.planning.plan_file import PlanConfig
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATE_PER_S = 100.0


def test_a_search_stops_only_where_its_fleet_costs_at_least_one_already_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks: list[dict[str, Any]] = []
    search = plan_module.search_candidate

    def spy(task: dict[str, Any]) -> dict[str, Any]:
        tasks.append(task)
        return search(task)

    monkeypatch.setattr(plan_module, "search_candidate", spy)
    # test_plan.py's stopped search: chat.yaml on the roofline, H100 and L40S.
    space = {
        "tensor_parallel_sizes": [1],
        "max_num_seqs": [256],
        "max_num_batched_tokens": [2048],
        "chunked_prefill": [True],
        "refine": False,
        "cost_model": "roofline",
        "max_loads": 10,
        "gpus": ["h100", "l40s"],
    }
    result = plan(
        load_scenario(ROOT / "scenarios" / "chat.yaml"),
        PlanConfig.model_validate(space),
        parse_targets(["ttft_p99_ms=500", "tpot_p99_ms=50"]),
        TARGET_RATE_PER_S,
        {"h100": 3.0, "l40s": 1.3},
        workers=1,
    )
    found_usd = [o.usd_per_hour for o in result.searched if o.usd_per_hour is not None]
    stopped = [t for t in tasks if t.get("stop_below_rate_per_s") is not None]
    assert stopped and found_usd  # the premise: a search ran under a stop rate
    for task in stopped:
        named_usd = TARGET_RATE_PER_S * task["num_gpus"] * task["price"]
        named_usd /= task["stop_below_rate_per_s"]
        assert any(math.isclose(named_usd, usd, rel_tol=1e-9) for usd in found_usd), (
            named_usd,
            found_usd,
        )


# -- a lone request's latency (plan_bound.lone_request_ms), by hand ----------------------
# Linear prices: 10 ms a step, 10 µs a prompt token, 0.1 ms a decoding sequence.
STEP_S, PER_TOKEN_S, PER_DECODE_S = 1e-2, 1e-5, 1e-4
PROMPT, OUTPUT, BUDGET = 1000, 50, 256  # tokens; the prompt is four budgets long


def _lengths() -> LengthStats:
    stats = {"mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0}
    return LengthStats(
        mean_prompt_tokens=PROMPT,
        mean_output_tokens=OUTPUT,
        min_prompt_tokens=PROMPT,
        prompt_tokens_at=dict.fromkeys(stats, float(PROMPT)),
        output_tokens_at=dict.fromkeys(stats, float(OUTPUT)),
        tpot_prompt_tokens_at=dict.fromkeys(stats, float(PROMPT)),
    )


def _lone_ms(metric: str, chunked: bool) -> float:
    cost = LinearCost(
        step_overhead_s=STEP_S, per_prefill_token_s=PER_TOKEN_S, per_decode_seq_s=PER_DECODE_S
    )
    (target,) = parse_targets([f"{metric}_p99_ms=1"])
    return lone_request_ms(cost, target, _lengths(), Limits(64, BUDGET, chunked))


def test_without_chunked_prefill_a_lone_prompt_is_one_step() -> None:
    # One step of 1000 tokens: 10 ms + 10 ms.
    assert _lone_ms("ttft", chunked=False) == pytest.approx(20.0, rel=1e-12)
    # Chunked: ceil(1000 / 256) = 4 steps, each 10 ms, and the same 10 ms of tokens.
    assert _lone_ms("ttft", chunked=True) == pytest.approx(50.0, rel=1e-12)


def test_a_lone_requests_e2el_bound_is_the_larger_part_not_the_sum() -> None:
    # p99 prompt and p99 output may be different requests: the bound takes the larger
    # of the prefill (20 ms unchunked) and 49 decode steps of 10.1 ms (494.9 ms).
    assert _lone_ms("e2el", chunked=False) == pytest.approx(49 * 10.1, rel=1e-12)
