"""Async scheduling as vLLM's AsyncScheduler / EngineCore.step_with_batch_queue runs it.

Hand-traced with power-of-two costs (tests/exact_costs.py: OVH = 2/256 s a step,
PRE = 1/1024 s a prefill token, DEC = 1/256 s a decode sequence). Step N+1 is
planned while step N runs: an arrival during step N joins step N+2, and a
request finishing in step N frees its slot for step N+2.
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

import pytest
from exact_costs import COST, TOL, work
from scenario_docs import small_doc

from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig, StaticConfig
from sim.scenario import scenario_from_dict
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays


def simulate(
    arrays: RequestArrays,
    *,
    async_scheduling: bool,
    skip_ahead: bool = True,
    max_num_seqs: int = 16,
) -> RawResult:
    build = ContinuousConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=2048).build
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=partial(build, async_scheduling=True) if async_scheduling else build,
            num_kv_blocks=1000,
            block_size_tokens=16,
            max_model_len_tokens=8192,
        ),
        cost=COST,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )
    return Simulation(engine).run(cast(OpenLoop, arrays))


def cell(raw: RawResult, request_id: int, column: str) -> Any:
    requests = raw.requests
    return requests[column].tolist()[requests["request_id"].tolist().index(request_id)]


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_step_with_batch_queue_arrival_waits_one_more_step(skip_ahead: bool) -> None:
    # r0: prompt 8, output 10: prefill [0, 4/256], decodes of OVH + DEC = 3/256 end
    # at 7, 10, 13, 16 /256 ... r1 (prompt 16, output 2) arrives at 11/256, inside
    # the step [10, 13]/256. Synchronous: planned at 13/256, it joins that step
    # (OVH + 16 PRE + DEC = 7/256, first token 20/256). Async: the step [13, 16]/256
    # was planned at 10/256, before r1 arrived; r1 joins the step from 16/256 and
    # its first token comes one decode step (3/256) later, at 23/256.
    arrays = work([0.0, 11 / 256], [8, 16], [10, 2])
    sync = simulate(arrays, async_scheduling=False, skip_ahead=skip_ahead)
    pipelined = simulate(arrays, async_scheduling=True, skip_ahead=skip_ahead)
    assert cell(sync, 1, "first_token_s") == pytest.approx(20 / 256, abs=TOL)
    assert cell(pipelined, 1, "first_scheduled_s") == pytest.approx(16 / 256, abs=TOL)
    assert cell(pipelined, 1, "first_token_s") == pytest.approx(23 / 256, abs=TOL)
    # r0 alone until then: prefill, then four decode steps.
    steps = pipelined.steps
    assert steps["num_prefill_tokens"].tolist()[:6] == [8, 0, 0, 0, 0, 16]


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_async_scheduler_finished_request_frees_its_slot_a_step_later(skip_ahead: bool) -> None:
    # max_num_seqs 2. r0 (prompt 8, output 3) and r2 (prompt 8, output 20) at 0;
    # r1 (prompt 8, output 1) at 0.001 waits for a slot.
    # step 0 [0, 6/256]: both prefill (OVH + 16 PRE); steps of two decodes take
    # OVH + 2 DEC = 4/256: [6, 10], [10, 14]/256; r0's last token at 14/256.
    # Synchronous: r1 takes r0's slot in the step planned at 14/256:
    #   OVH + 8 PRE + DEC = 5/256 -> r1 done at 19/256.
    # Async: the step after [10, 14] was planned at 10/256 with r0 still holding
    #   its slot: r2 decodes alone [14, 17]/256 (OVH + DEC); r1 joins [17, 22]/256.
    arrays = work([0.0, 0.001, 0.0], [8, 8, 8], [3, 1, 20])
    sync = simulate(arrays, async_scheduling=False, skip_ahead=skip_ahead, max_num_seqs=2)
    pipelined = simulate(arrays, async_scheduling=True, skip_ahead=skip_ahead, max_num_seqs=2)
    for raw in (sync, pipelined):
        assert cell(raw, 0, "finish_s") == pytest.approx(14 / 256, abs=TOL)
    assert cell(sync, 1, "finish_s") == pytest.approx(19 / 256, abs=TOL)
    assert cell(pipelined, 1, "first_scheduled_s") == pytest.approx(17 / 256, abs=TOL)
    assert cell(pipelined, 1, "finish_s") == pytest.approx(22 / 256, abs=TOL)


def test_step_with_batch_queue_idle_engine_starts_at_once() -> None:
    # Nothing runs, so nothing was planned ahead: an arrival is planned at once, and a
    # plan left empty by a held slot is made again as soon as the step's output is in.
    arrays = work([0.0, 0.001], [8, 8], [2, 1])
    sync = simulate(arrays, async_scheduling=False, max_num_seqs=1)
    pipelined = simulate(arrays, async_scheduling=True, max_num_seqs=1)
    for column in ("first_scheduled_s", "first_token_s", "finish_s"):
        assert sync.requests[column].tolist() == pipelined.requests[column].tolist()


_doc = small_doc


def test_async_scheduling_default_is_vllms() -> None:
    assert scenario_from_dict(_doc()).async_scheduling is True
    off = scenario_from_dict(_doc(engine={"async_scheduling": False}))
    assert off.async_scheduling is False
    # vLLM turns it off by default with pipeline parallelism and speculative decoding.
    pp = scenario_from_dict(
        _doc(
            model="llama-3-70b",
            parallelism={"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
        )
    )
    assert pp.async_scheduling is False
    spec = scenario_from_dict(
        _doc(
            speculative={"num_draft_tokens": 3, "acceptance_rate": 0.7, "draft_cost_fraction": 0.1}
        )
    )
    assert spec.async_scheduling is False
    # Policies other than vLLM v1's continuous batching run synchronously.
    static = scenario_from_dict(_doc(scheduler=StaticConfig().model_dump()))
    assert static.async_scheduling is False
