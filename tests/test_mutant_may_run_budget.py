"""The skip-ahead executor plays no decode run after a step whose admission the
token budget blocked (mutant ``may-run-budget``, ``sim.fast.decode_runs``).

``tests/test_budget_block_no_run.py`` asks the same of the reference executor
(``Simulation``), which since decode runs moved to ``sim.fast`` never plans a
run, so its ``skip_ahead`` cases no longer reached ``_continuous_run``: a run
after a budget block survived them. Here the runs go through ``FastSimulation``:
with a linear cost the compiled loop declines, so a replica's steps are
``RunningReplica``'s, runs of decode steps included.

Continuous batching without chunking, budget 16 tokens: a prompt that does not
fit what this step left waits; if this step also prefills, the next step has
more budget (the prefill becomes one decode token), so the waiting prompt starts
at the next step boundary. A decode run there would hold it back until the
batch's first finish. Costs are powers of two (``exact_costs``): the expected
times are derived in the comments and compared to 1e-12 s.
"""

from __future__ import annotations

from typing import cast

import pytest
from exact_costs import COST, DEC, OVH, PRE, TOL, work

from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.fast.open_loop import FastSimulation
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult
from sim.workload.generate import RequestArrays


def run_fast(arrays: RequestArrays) -> RawResult:
    config = ContinuousConfig(max_num_seqs=8, max_num_batched_tokens=16, chunked_prefill=False)
    core = CoreConfig(
        make_policy=config.build,
        num_kv_blocks=1000,
        block_size_tokens=16,
        max_model_len_tokens=4096,
    )
    engine = ReplicaConfig(core=core, cost=COST, frontend=NO_FRONTEND, skip_ahead=True)
    return FastSimulation(engine, workers=1, compiled=False).run(cast(OpenLoop, arrays))


def first_scheduled(raw: RawResult) -> list[float]:
    return raw.requests.sort_values("request_id")["first_scheduled_s"].tolist()


def test_a_prompt_blocked_by_the_budget_starts_when_the_prefill_before_it_ends() -> None:
    # Step 0 prefills r0 (10 tokens); r1 (10) does not fit the 16 - 10 = 6 left.
    # Step 0 ends at OVH + 10 PRE; then r0 decodes (1 token) and r1 fits the 15 left.
    # (A run of r0's 49 decodes after step 0 would start r1 ~49 steps later.)
    raw = run_fast(work([0.0, 0.0], [10, 10], [50, 2]))
    assert first_scheduled(raw) == [0.0, pytest.approx(OVH + 10 * PRE, abs=TOL)]
    assert raw.steps["num_prefill_tokens"].tolist()[:2] == [10, 10]


def test_the_same_beside_a_steady_decoder() -> None:
    # r0 decodes alone (a decode run may follow). r1 (8 tokens) and r2 (10) arrive at
    # 0.05: the next plan decodes r0 and prefills r1, and r2 does not fit the
    # 16 - 1 - 8 = 7 left. That step costs OVH + DEC + 8 PRE; after it, r0 and r1
    # decode and r2 fits the 16 - 2 = 14 left.
    raw = run_fast(work([0.0, 0.05, 0.05], [10, 8, 10], [200, 200, 2]))
    r0, r1, r2 = first_scheduled(raw)
    assert r0 == 0.0 and r1 >= 0.05
    assert r2 == pytest.approx(r1 + OVH + DEC + 8 * PRE, abs=TOL)
