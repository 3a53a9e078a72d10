"""Scheduling policies on small hand-checked cases: chunking, preemption, static batches.

Costs are powers of two (see ``tests/test_core.py``) so step times add up exactly;
expected values are derived by hand in the comments, never copied from a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
import pytest
from exact_costs import COST, DEC, OVH, PRE, TOL, work

from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig, Scheduler, StaticConfig
from sim.engine.tokens import token_times_s
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays


def continuous(
    arrays: RequestArrays,
    *,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 2048,
    chunked_prefill: bool = True,
    num_kv_blocks: int = 10_000,
    cost: LinearCost = COST,
    skip_ahead: bool = True,
) -> RawResult:
    config = ContinuousConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        chunked_prefill=chunked_prefill,
    )
    return _run(arrays, config.build, num_kv_blocks, cost, skip_ahead)


def static(
    arrays: RequestArrays,
    *,
    max_batch_size: int,
    max_wait_s: float,
    num_kv_blocks: int = 10_000,
    cost: LinearCost = COST,
    skip_ahead: bool = True,
) -> RawResult:
    config = StaticConfig(max_batch_size=max_batch_size, max_wait_s=max_wait_s)
    return _run(arrays, config.build, num_kv_blocks, cost, skip_ahead)


def _run(
    arrays: RequestArrays,
    make_policy: Callable[[], Scheduler],
    num_kv_blocks: int,
    cost: LinearCost,
    skip_ahead: bool,
) -> RawResult:
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=make_policy,
            num_kv_blocks=num_kv_blocks,
            block_size_tokens=16,
            max_model_len_tokens=16_384,
        ),
        cost=cost,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )
    return Simulation(engine).run(cast(OpenLoop, arrays))


def column(raw: RawResult, name: str) -> list[float]:
    return raw.requests.sort_values("request_id")[name].tolist()


def token_times(raw: RawResult, request_id: int) -> np.ndarray:
    return token_times_s(
        raw.steps["end_s"].to_numpy(),
        float(column(raw, "first_token_s")[request_id]),
        int(column(raw, "num_generated_tokens")[request_id]),
        raw.later_runs.get(request_id),
    )


# -- continuous batching: chunked prefill ---------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_chunked_prefill_cuts_a_long_prompt_into_budget_sized_chunks(skip_ahead: bool) -> None:
    raw = continuous(work([0.0], [5000], [3]), skip_ahead=skip_ahead)
    steps = raw.steps
    # 5000 = 2048 + 2048 + 904; the last chunk samples the first token; two decodes.
    assert steps["num_prefill_tokens"].tolist() == [2048, 2048, 904, 0, 0]
    assert steps["num_decode_seqs"].tolist() == [0, 0, 0, 1, 1]
    first_token_s = 3 * OVH + 5000 * PRE
    assert column(raw, "first_token_s") == [pytest.approx(first_token_s, abs=TOL)]
    assert column(raw, "finish_s") == [pytest.approx(first_token_s + 2 * (OVH + DEC), abs=TOL)]
    np.testing.assert_allclose(
        steps["end_s"][:3], [OVH + 2048 * PRE, 2 * (OVH + 2048 * PRE), first_token_s], atol=TOL
    )


def test_chunk_attention_pairs_count_the_cached_prefix() -> None:
    # PRE chunk of c new tokens after p cached ones attends to c*p + c(c+1)/2 pairs.
    per_pair_s = 2.0**-30
    cost = LinearCost(step_overhead_s=OVH, per_attention_pair_s=per_pair_s, per_decode_seq_s=DEC)
    raw = continuous(work([0.0], [5000], [1]), cost=cost)
    chunks = [(2048, 0), (2048, 2048), (904, 4096)]
    pairs = [c * p + c * (c + 1) // 2 for c, p in chunks]
    durations = (raw.steps["end_s"] - raw.steps["start_s"]).to_numpy()
    np.testing.assert_allclose(durations, [OVH + per_pair_s * n for n in pairs], rtol=1e-12)


def test_running_decodes_take_their_share_of_the_budget_first() -> None:
    # r0 (prompt 8) decodes; r1's 5000-token prompt arrives mid-run and is admitted at the
    # next step boundary. Each step r0 decodes one token first, so r1's chunks are
    # 2047, 2047, and the remaining 906.
    raw = continuous(work([0.0, 0.1], [8, 5000], [400, 2]))
    steps = raw.steps
    with_prefill = steps[steps["num_prefill_tokens"] > 0]
    assert with_prefill["num_prefill_tokens"].tolist() == [8, 2047, 2047, 906]
    assert with_prefill["num_decode_seqs"].tolist() == [0, 1, 1, 1]
    # r1 is admitted at the first step boundary after it arrived.
    first_scheduled = column(raw, "first_scheduled_s")[1]
    ends = steps["end_s"].to_numpy()
    assert first_scheduled == ends[ends >= 0.1][0]
    assert first_scheduled - 0.1 <= OVH + DEC + TOL


def test_without_chunking_a_prompt_waits_for_a_whole_budget() -> None:
    # Budget 5000: while r0 decodes (1 token a step) only 4999 are left, so r1's
    # 5000-token prompt waits until r0 finishes, then runs in one step.
    arrays = work([0.0, 0.1], [8, 5000], [100, 2])
    raw = continuous(arrays, max_num_batched_tokens=5000, chunked_prefill=False)
    finish_0 = OVH + 8 * PRE + 99 * (OVH + DEC)
    assert column(raw, "finish_s")[0] == pytest.approx(finish_0, abs=TOL)
    assert column(raw, "first_scheduled_s")[1] == pytest.approx(finish_0, abs=TOL)
    assert column(raw, "first_token_s")[1] == pytest.approx(finish_0 + OVH + 5000 * PRE, abs=TOL)
    assert raw.steps["num_prefill_tokens"].max() == 5000
    # With chunking the same prompt starts at once: a 4999-token chunk beside r0's decode.
    chunked = continuous(arrays, max_num_batched_tokens=5000, chunked_prefill=True)
    assert column(chunked, "first_scheduled_s")[1] < 0.1 + OVH + DEC + TOL
    assert 4999 in chunked.steps["num_prefill_tokens"].tolist()


def test_admission_stops_at_max_num_seqs() -> None:
    # Three requests at 0, two slots: r2 starts when the first of r0, r1 finishes.
    raw = continuous(work([0.0, 0.0, 0.0], [8, 8, 8], [3, 5, 2]), max_num_seqs=2)
    scheduled = column(raw, "first_scheduled_s")
    finish = column(raw, "finish_s")
    assert scheduled[:2] == [0.0, 0.0]
    # Step 0: both prefill (OVH + 16 PRE); then steps of OVH + 2 DEC; r0's 3rd token after 2.
    assert finish[0] == pytest.approx(OVH + 16 * PRE + 2 * (OVH + 2 * DEC), abs=TOL)
    assert scheduled[2] == finish[0]
    assert raw.steps["num_decode_seqs"].max() == 2


def test_admission_is_first_come_first_served_under_a_token_budget() -> None:
    # Budget 16, no chunk smaller than the whole prompt needed: r0 and r1 (8 each) fill
    # step 0; r2 and r3 must wait, and start in arrival order.
    raw = continuous(
        work([0.0, 0.0, 0.0, 0.0], [8, 8, 12, 4], [2, 2, 2, 2]), max_num_batched_tokens=16
    )
    scheduled = column(raw, "first_scheduled_s")
    assert scheduled[0] == scheduled[1] == 0.0
    assert 0.0 < scheduled[2] <= scheduled[3]


# -- continuous batching: preemption ------------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_newest_request_is_preempted_when_blocks_run_out(skip_ahead: bool) -> None:
    # 4 blocks of 16 tokens. r0 and r1: prompt 16, output 40 (each alone needs 55 tokens
    # = 4 blocks). r1 arrives during r0's prefill and joins at step 1. Each holds 2 blocks
    # from then on; when r0 (admitted first) needs its 3rd block (at 33 computed tokens,
    # i.e. with 17 tokens generated) the pool is empty, so the newest, r1, is preempted
    # with 16 tokens generated. It cannot return until r0 finishes and frees its blocks,
    # then recomputes its 16 + 16 tokens in one prefill step and finishes its output.
    raw = continuous(work([0.0, 0.001], [16, 16], [40, 40]), num_kv_blocks=4, skip_ahead=skip_ahead)
    assert column(raw, "num_preemptions") == [0, 1]
    assert column(raw, "num_generated_tokens") == [40, 40]
    finish_0, finish_1 = column(raw, "finish_s")
    assert raw.later_runs.keys() == {1}
    ((resume_s, tokens_before),) = raw.later_runs[1]
    assert tokens_before == 16
    assert resume_s == pytest.approx(finish_0 + OVH + 32 * PRE, abs=TOL)
    assert finish_1 == pytest.approx(resume_s + 23 * (OVH + DEC), abs=TOL)
    # First scheduling is not reset by the preemption: r1 first ran at step 1.
    assert column(raw, "first_scheduled_s")[1] == pytest.approx(OVH + 16 * PRE, abs=TOL)
    times = token_times(raw, 1)
    assert len(times) == 40
    assert np.all(np.diff(times) > 0)
    assert times[16] == resume_s and times[-1] == finish_1
    # The gap at the preemption is one extra inter-token latency.
    assert len(raw.extra_itl_s) == 1
    assert raw.extra_itl_s[0] == pytest.approx(resume_s - times[15], abs=TOL)
    # The recompute step: 32 prefill tokens, nothing else running.
    recompute = raw.steps[np.isclose(raw.steps["end_s"], resume_s, rtol=0, atol=TOL)]
    assert recompute["num_prefill_tokens"].tolist() == [32]
    assert recompute["num_decode_seqs"].tolist() == [0]


def test_no_preemption_when_the_pool_suffices() -> None:
    raw = continuous(work([0.0, 0.001], [16, 16], [40, 40]), num_kv_blocks=8)
    assert column(raw, "num_preemptions") == [0, 0]
    assert raw.later_runs == {}


# -- static batching ------------------------------------------------------------


def test_static_partial_batch_waits_max_wait_s() -> None:
    raw = static(work([0.0, 0.1], [8, 8], [2, 2]), max_batch_size=4, max_wait_s=0.5)
    assert column(raw, "first_scheduled_s") == [0.5, 0.5]
    # One prefill step for the batch (OVH + 16 PRE), then one decode step of both (OVH + 2 DEC).
    assert column(raw, "first_token_s") == [0.5 + OVH + 16 * PRE] * 2
    assert column(raw, "finish_s") == [0.5 + OVH + 16 * PRE + OVH + 2 * DEC] * 2
    assert raw.steps["num_prefill_tokens"].tolist() == [16, 0]


def test_static_full_batch_starts_at_once() -> None:
    raw = static(
        work([0.0, 0.1, 0.2, 0.3], [8, 8, 8, 8], [2, 2, 2, 2]), max_batch_size=4, max_wait_s=0.5
    )
    assert column(raw, "first_scheduled_s") == [0.3] * 4


def test_static_batch_is_not_joined_while_it_runs() -> None:
    # Batch of 4 at 0.3 runs a prefill (OVH + 32 PRE = 5/128) and a decode (OVH + 4 DEC = 3/128):
    # done at 0.3 + 1/16. r4 arrived at 0.35, during it: it waits for its own timer (0.85).
    raw = static(
        work([0.0, 0.1, 0.2, 0.3, 0.35], [8] * 5, [2] * 5), max_batch_size=4, max_wait_s=0.5
    )
    finish = column(raw, "finish_s")
    assert finish[:4] == [pytest.approx(0.3 + 1 / 16, abs=TOL)] * 4
    assert column(raw, "first_scheduled_s")[4] == 0.85
    # With no wait allowed, a request arriving during a batch starts as soon as it is done:
    # r1 alone (prefill OVH + 8 PRE, one decode OVH + DEC: 7/256 s) delays r2 by the remainder.
    eager = static(work([0.0, 0.01], [8, 8], [2, 2]), max_batch_size=4, max_wait_s=0.0)
    assert column(eager, "first_scheduled_s") == [0.0, pytest.approx(7 / 256, abs=TOL)]


def test_static_batch_limited_by_kv_reserves_full_lengths() -> None:
    # Pool 8 blocks; prompt 16 + output 49 -> 64 tokens = 4 blocks reserved per member at
    # formation, so only 2 of 3 waiting requests fit; the 3rd starts with the next batch.
    raw = static(
        work([0.0, 0.0, 0.0], [16] * 3, [49] * 3), max_batch_size=4, max_wait_s=0.0, num_kv_blocks=8
    )
    scheduled = column(raw, "first_scheduled_s")
    finish = column(raw, "finish_s")
    assert scheduled[:2] == [0.0, 0.0]
    assert finish[0] == finish[1] == pytest.approx(OVH + 32 * PRE + 48 * (OVH + 2 * DEC), abs=TOL)
    assert scheduled[2] == finish[0]
    assert column(raw, "num_preemptions") == [0, 0, 0]


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_static_padding_keeps_early_finishers_in_the_batch(skip_ahead: bool) -> None:
    # Batch of r0 (output 2) and r1 (output 5), prompts 8: one prefill step, then decode
    # steps of both slots until r1 is done, r0's slot as padding after its last token.
    arrays = work([0.0, 0.0], [8, 8], [2, 5])
    raw = static(arrays, max_batch_size=2, max_wait_s=0.0, skip_ahead=skip_ahead)
    steps = raw.steps
    assert steps["num_decode_seqs"].tolist() == [0, 2, 2, 2, 2]
    assert steps["num_itl_tokens"].tolist() == [0, 2, 1, 1, 1]
    prefill_s = OVH + 16 * PRE
    assert column(raw, "finish_s") == [
        pytest.approx(prefill_s + (OVH + 2 * DEC), abs=TOL),
        pytest.approx(prefill_s + 4 * (OVH + 2 * DEC), abs=TOL),
    ]
    # Continuous batching drops r0's slot instead, so r1 finishes sooner.
    cont = continuous(arrays)
    assert cont.steps["num_decode_seqs"].tolist() == [0, 2, 1, 1, 1]
    assert column(cont, "finish_s")[1] == pytest.approx(
        prefill_s + (OVH + 2 * DEC) + 3 * (OVH + DEC)
    )


def test_static_padding_context_grows_each_step() -> None:
    # Cost per context token c: after the prefill, r0 and r1 (prompts 8) decode with
    # contexts 9 + 9 = 18; r0's slot then pads with context 10, 11, 12 beside r1's 10,
    # 11, 12: step context sums 18, 20, 22, 24.
    c = 2.0**-12
    cost = LinearCost(step_overhead_s=OVH, per_prefill_token_s=PRE, per_context_token_s=c)
    raw = static(work([0.0, 0.0], [8, 8], [2, 5]), max_batch_size=2, max_wait_s=0.0, cost=cost)
    durations = (raw.steps["end_s"] - raw.steps["start_s"]).to_numpy()
    np.testing.assert_allclose(
        durations, [OVH + 16 * PRE] + [OVH + c * n for n in (18, 20, 22, 24)], rtol=1e-12
    )


def test_static_one_token_requests_never_decode() -> None:
    raw = static(work([0.0, 0.0], [8, 8], [1, 1]), max_batch_size=2, max_wait_s=0.0)
    assert len(raw.steps) == 1
    assert column(raw, "finish_s") == [OVH + 16 * PRE] * 2
    assert not math.isnan(column(raw, "first_token_s")[0])
