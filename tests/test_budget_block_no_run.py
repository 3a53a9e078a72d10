"""No decode run may follow a step whose admission the token budget blocked.

Continuous batching without chunking, budget 16 tokens: a prompt that does not
fit what this step left waits; if this step also prefills, the next step has
more budget (the prefill becomes one decode token), so the waiting prompt starts
at the next step boundary. A run of decode steps there would hold it back until
the batch's first finish.

Each case runs through both executors: the reference ``Simulation`` (a step per
event; it plans no decode runs) and ``FastSimulation`` (mutant
``may-run-budget``, ``sim.fast.decode_runs``): with a linear cost the compiled
loop declines, so a replica's steps are ``RunningReplica``'s, runs of decode
steps included. Costs are powers of two (``exact_costs``): the expected times
are derived in the comments and compared to 1e-12 s.
"""

from __future__ import annotations

from typing import cast

import pytest
from exact_costs import COST, DEC, OVH, PRE, TOL, work

from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.fast.open_loop import FastSimulation
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays

EXECUTORS = ("reference", "fast")


def run(arrays: RequestArrays, executor: str) -> RawResult:
    config = ContinuousConfig(max_num_seqs=8, max_num_batched_tokens=16, chunked_prefill=False)
    core = CoreConfig(
        make_policy=config.build,
        num_kv_blocks=1000,
        block_size_tokens=16,
        max_model_len_tokens=4096,
    )
    engine = ReplicaConfig(core=core, cost=COST, frontend=NO_FRONTEND, skip_ahead=True)
    if executor == "fast":
        return FastSimulation(engine, workers=1, compiled=False).run(cast(OpenLoop, arrays))
    return Simulation(engine).run(cast(OpenLoop, arrays))


def first_scheduled(raw: RawResult) -> list[float]:
    return raw.requests.sort_values("request_id")["first_scheduled_s"].tolist()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_prompt_blocked_by_the_budget_starts_when_the_prefill_before_it_ends(
    executor: str,
) -> None:
    # Step 0 prefills r0 (10 tokens); r1 (10) does not fit the 16 - 10 = 6 left.
    # Step 0 ends at OVH + 10 PRE; then r0 decodes (1 token) and r1 fits the 15 left.
    # (A run of r0's 49 decodes after step 0 would start r1 ~49 steps later.)
    raw = run(work([0.0, 0.0], [10, 10], [50, 2]), executor)
    assert first_scheduled(raw) == [0.0, pytest.approx(OVH + 10 * PRE, abs=TOL)]
    assert raw.steps["num_prefill_tokens"].tolist()[:2] == [10, 10]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_same_beside_a_steady_decoder(executor: str) -> None:
    # r0 decodes alone (a decode run may follow). r1 (8 tokens) and r2 (10) arrive at
    # 0.05: the next plan decodes r0 and prefills r1, and r2 does not fit the
    # 16 - 1 - 8 = 7 left. That step costs OVH + DEC + 8 PRE; after it, r0 and r1
    # decode and r2 fits the 16 - 2 = 14 left.
    raw = run(work([0.0, 0.05, 0.05], [10, 8, 10], [200, 200, 2]), executor)
    r0, r1, r2 = first_scheduled(raw)
    assert r0 == 0.0 and r1 >= 0.05
    assert r2 == pytest.approx(r1 + OVH + DEC + 8 * PRE, abs=TOL)
