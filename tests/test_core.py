"""The engine core and its SimPy executor, on hand-checked traces.

Costs are powers of two (1/128 s overhead, 1/1024 s per prefill token, 1/256 s
per decode sequence) so every step time, and every sum of them, is exact in
binary floating point: the expected times below are computed by hand in the
comments and compared exactly (up to 1e-12 s, for safety).
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest
from exact_costs import COST, DEC, OVH, PRE, TOL, work

from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import BlockPool
from sim.engine.policies import ContinuousConfig
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore
from sim.engine.tokens import token_times_s
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays


def simulate(
    arrays: RequestArrays,
    *,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 2048,
    num_kv_blocks: int = 1000,
    max_model_len_tokens: int = 8192,
    skip_ahead: bool = True,
    cost: LinearCost = COST,
) -> RawResult:
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=ContinuousConfig(
                max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
            ).build,
            num_kv_blocks=num_kv_blocks,
            block_size_tokens=16,
            max_model_len_tokens=max_model_len_tokens,
        ),
        cost=cost,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )
    return Simulation(engine).run(cast(OpenLoop, arrays))


def trace(raw: RawResult) -> list[tuple[float, str, int]]:
    """(time, event, request id) of every request event, sorted by time then event order."""
    order = {"arrive": 0, "schedule": 1, "first_token": 2, "finish": 3}
    events = []
    requests = raw.requests
    ids = requests["request_id"].tolist()
    for event, column in (
        ("arrive", "arrival_s"),
        ("schedule", "first_scheduled_s"),
        ("first_token", "first_token_s"),
        ("finish", "finish_s"),
    ):
        for request_id, value in zip(ids, requests[column].tolist(), strict=True):
            if not math.isnan(value):
                events.append((float(value), event, int(request_id)))
    return sorted(events, key=lambda e: (e[0], order[e[1]], e[2]))


def assert_trace(raw: RawResult, expected: list[tuple[float, str, int]]) -> None:
    got = trace(raw)
    order = {"arrive": 0, "schedule": 1, "first_token": 2, "finish": 3}
    expected = sorted(expected, key=lambda e: (e[0], order[e[1]], e[2]))
    assert [(e, r) for _, e, r in got] == [(e, r) for _, e, r in expected]
    for (t_got, event, rid), (t_want, _, _) in zip(got, expected, strict=True):
        assert t_got == pytest.approx(t_want, abs=TOL), (event, rid)


def value(raw: RawResult, request_id: int, column: str) -> Any:
    """One cell of the request table."""
    return raw.requests[column].tolist()[raw.requests["request_id"].tolist().index(request_id)]


def token_times(raw: RawResult, request_id: int) -> np.ndarray:
    return token_times_s(
        raw.steps["end_s"].to_numpy(),
        float(value(raw, request_id, "first_token_s")),
        int(value(raw, request_id, "num_generated_tokens")),
        raw.later_runs.get(request_id),
    )


# -- two requests, every time by hand ----------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_two_requests_hand_computed_trace(skip_ahead: bool) -> None:
    # r0: arrives 0, prompt 8, output 3.  r1: arrives 0.01 (during r0's prefill), prompt 16,
    # output 2.
    # step 0 [0, 4/256]:       r0 prefill 8       OVH + 8 PRE        = 4/256: r0 token 1
    # step 1 [4/256, 11/256]:  r0 decode, r1 16   OVH + 16 PRE + DEC = 7/256: r0 2nd, r1 1st
    # step 2 [11/256, 15/256]: both decode        OVH + 2 DEC        = 4/256: both finish
    raw = simulate(work([0.0, 0.01], [8, 16], [3, 2]), skip_ahead=skip_ahead)
    assert_trace(
        raw,
        [
            (0.0, "arrive", 0),
            (0.0, "schedule", 0),
            (0.01, "arrive", 1),
            (4 / 256, "first_token", 0),
            (4 / 256, "schedule", 1),
            (11 / 256, "first_token", 1),
            (15 / 256, "finish", 0),
            (15 / 256, "finish", 1),
        ],
    )
    steps = raw.steps
    np.testing.assert_allclose(steps["start_s"], [0, 4 / 256, 11 / 256], atol=TOL)
    np.testing.assert_allclose(steps["end_s"], [4 / 256, 11 / 256, 15 / 256], atol=TOL)
    assert steps["num_prefill_tokens"].tolist() == [8, 16, 0]
    assert steps["num_decode_seqs"].tolist() == [0, 1, 2]
    # Tokens that follow their own predecessor one step later: none, r0's 2nd, both 3rd/2nd.
    assert steps["num_itl_tokens"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(token_times(raw, 0), [4 / 256, 11 / 256, 15 / 256], atol=TOL)
    np.testing.assert_allclose(token_times(raw, 1), [11 / 256, 15 / 256], atol=TOL)
    requests = raw.requests
    assert requests["num_generated_tokens"].tolist() == [3, 2]
    assert requests["ready_s"].tolist() == requests["arrival_s"].tolist()  # no tokenizer
    assert requests["num_preemptions"].tolist() == [0, 0]


def test_one_output_token_finishes_at_prefill_end() -> None:
    raw = simulate(work([0.0], [32], [1]))
    assert_trace(
        raw,
        [
            (0.0, "arrive", 0),
            (0.0, "schedule", 0),
            (OVH + 32 * PRE, "first_token", 0),
            (OVH + 32 * PRE, "finish", 0),
        ],
    )
    assert len(raw.steps) == 1


def test_idle_engine_starts_a_late_arrival_at_once() -> None:
    # r0 done at OVH + 8 PRE = 1/64; the engine idles until r1 arrives at 1.0.
    raw = simulate(work([0.0, 1.0], [8, 8], [1, 1]))
    assert_trace(
        raw,
        [
            (0.0, "arrive", 0),
            (0.0, "schedule", 0),
            (1 / 64, "first_token", 0),
            (1 / 64, "finish", 0),
            (1.0, "arrive", 1),
            (1.0, "schedule", 1),
            (1.0 + 1 / 64, "first_token", 1),
            (1.0 + 1 / 64, "finish", 1),
        ],
    )


# -- skip-ahead and arrivals ---------------------------------------------------


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_arrival_during_a_decode_run_joins_at_the_next_step_boundary(skip_ahead: bool) -> None:
    # r0: prompt 8, output 10. Prefill ends 4/256; decode steps of OVH + DEC = 3/256 end at
    # 7/256, 10/256, 13/256, ... r1 arrives at 11/256 (inside the step 10/256..13/256):
    # with skip-ahead the 9-step run is interrupted, the running step finishes, and r1
    # is admitted at 13/256, its prefill (16 tokens) sharing the step with r0's decode.
    raw = simulate(work([0.0, 11 / 256], [8, 16], [10, 2]), skip_ahead=skip_ahead)
    assert value(raw, 1, "first_scheduled_s") == pytest.approx(13 / 256, abs=TOL)
    # The mixed step: OVH + 16 PRE + DEC = 7/256 -> r1's first token at 20/256.
    assert value(raw, 1, "first_token_s") == pytest.approx(20 / 256, abs=TOL)
    steps = raw.steps
    mixed = steps.index[np.isclose(steps["start_s"], 13 / 256, rtol=0, atol=TOL)]
    assert len(mixed) == 1
    row = steps.loc[mixed[0]]
    assert (row["num_prefill_tokens"], row["num_decode_seqs"]) == (16, 1)
    assert row["end_s"] == pytest.approx(20 / 256, abs=TOL)
    # Every step before the mixed one is r0 alone (prefill, then decode of one sequence).
    before = steps.loc[: mixed[0] - 1]
    assert before["num_prefill_tokens"].tolist() == [8, 0, 0, 0]
    # r0's tokens: 4/256, then every 3/256 up to 13/256, the 7/256 mixed step,
    # then (r1 finishing at 20/256 + 4/256) steps of 4/256 while both run, then 3/256.
    times = token_times(raw, 0)
    assert len(times) == 10
    np.testing.assert_allclose(times[:5], [4 / 256, 7 / 256, 10 / 256, 13 / 256, 20 / 256])
    assert times[5] == pytest.approx(24 / 256, abs=TOL)  # both decode: OVH + 2 DEC = 4/256
    np.testing.assert_allclose(np.diff(times[5:]), 3 / 256, atol=TOL)


def test_skip_ahead_and_step_by_step_logs_agree_on_an_interrupted_run() -> None:
    arrays = work([0.0, 11 / 256, 0.3], [8, 16, 40], [30, 5, 7])
    fast = simulate(arrays, skip_ahead=True)
    slow = simulate(arrays, skip_ahead=False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, rtol=1e-12)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, rtol=1e-12)


def test_open_loop_arrival_exactly_at_a_step_end_joins_at_that_boundary() -> None:
    # r0's decode steps end at 7/256, 10/256, 13/256, 16/256 ...; r1 arrives exactly at
    # 13/256. Step by step, the arrival (scheduled before that step began) is queued
    # first and r1 is admitted at 13/256; skip-ahead must agree.
    arrays = work([0.0, 13 / 256], [8, 16], [10, 2])
    slow = simulate(arrays, skip_ahead=False)
    fast = simulate(arrays, skip_ahead=True)
    assert value(slow, 1, "first_scheduled_s") == 13 / 256
    assert value(fast, 1, "first_scheduled_s") == 13 / 256
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    pd.testing.assert_frame_equal(fast.steps, slow.steps)


class ScriptedUsers:
    """PRE closed loop whose think times and lengths are given in call order."""

    def __init__(self, num_users: int, thinks_s: list[float], lengths: list[tuple[int, int]]):
        self.num_users = num_users
        self.num_requests = len(lengths)
        self._thinks_s = list(thinks_s)
        self._lengths = list(lengths)

    def next_lengths(self) -> tuple[int, int]:
        return self._lengths.pop(0)

    def next_think_s(self) -> float:
        return self._thinks_s.pop(0) if self._thinks_s else 100.0

    def next_prefix(self) -> tuple[int, int] | None:
        return None  # no prefix groups


def run_closed(skip_ahead: bool) -> RawResult:
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=ContinuousConfig().build,
            num_kv_blocks=1000,
            block_size_tokens=16,
            max_model_len_tokens=8192,
        ),
        cost=COST,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )
    # User 0 sends r0 (8, 10) at 0; user 1 thinks 13/256 s, then sends r1 (16, 2) exactly
    # when r0's third decode step ends.
    return Simulation(engine).run(ScriptedUsers(2, [0.0, 13 / 256], [(8, 10), (16, 2)]))


def test_closed_loop_step_by_step_admits_an_arrival_at_the_step_end() -> None:
    slow = run_closed(skip_ahead=False)
    assert slow.requests["arrival_s"].tolist() == [0.0, 13 / 256]
    assert value(slow, 1, "first_scheduled_s") == 13 / 256
    assert value(slow, 1, "first_token_s") == 20 / 256


def test_closed_loop_arrival_exactly_at_a_step_end_skip_ahead_matches_step_by_step() -> None:
    slow = run_closed(skip_ahead=False)
    fast = run_closed(skip_ahead=True)
    assert value(fast, 1, "first_scheduled_s") == 13 / 256
    pd.testing.assert_frame_equal(fast.requests, slow.requests)


def test_full_engine_is_not_interrupted_by_an_arrival() -> None:
    # max_num_seqs=1: r1 (arriving mid-run) waits for r0's last token at 4/256 + 9*3/256.
    raw = simulate(work([0.0, 11 / 256], [8, 8], [10, 1]), max_num_seqs=1)
    assert value(raw, 0, "finish_s") == pytest.approx(31 / 256, abs=TOL)
    assert value(raw, 1, "first_scheduled_s") == pytest.approx(31 / 256, abs=TOL)
    assert value(raw, 1, "finish_s") == pytest.approx(31 / 256 + 1 / 64, abs=TOL)


# -- rejection -------------------------------------------------------------------


def test_rejects_prompt_plus_output_beyond_max_model_len() -> None:
    # 60 + 5 = 65 > 64; 60 + 4 = 64 is exactly allowed.
    raw = simulate(work([0.0, 0.0], [60, 60], [5, 4]), max_model_len_tokens=64)
    reason = value(raw, 0, "rejection_reason")
    assert isinstance(reason, str) and "max_model_len" in reason and "65" in reason
    assert raw.records.rejections == {0: reason}
    assert math.isnan(value(raw, 0, "finish_s"))
    assert math.isnan(value(raw, 0, "first_scheduled_s"))
    assert value(raw, 0, "num_generated_tokens") == 0
    assert value(raw, 0, "ready_s") == 0.0
    assert not isinstance(value(raw, 1, "rejection_reason"), str)
    assert value(raw, 1, "num_generated_tokens") == 4
    # The rejected request took no engine time: r1 starts at 0.
    assert value(raw, 1, "first_scheduled_s") == 0.0


def test_rejects_a_request_larger_than_the_whole_kv_pool() -> None:
    # 4 blocks of 16 tokens. The last output token is never computed, so a request needs
    # blocks for prompt + output - 1 tokens: 60 + 5 - 1 = 64 fits, 60 + 6 - 1 = 65 does not.
    raw = simulate(work([0.0, 0.0], [60, 60], [6, 5]), num_kv_blocks=4)
    reason = value(raw, 0, "rejection_reason")
    assert isinstance(reason, str)
    assert "5 KV blocks" in reason and "holds 4" in reason
    assert math.isnan(value(raw, 0, "finish_s"))
    assert value(raw, 1, "num_generated_tokens") == 5
    assert value(raw, 1, "num_preemptions") == 0


def test_rejection_reason_is_none_for_a_fitting_request() -> None:
    core = EngineCore(ContinuousConfig().build(), BlockPool(4, 16), max_model_len_tokens=64)
    assert core.rejection_reason(Request(0, 0.0, 60, 4)) is None
    assert core.rejection_reason(Request(1, 0.0, 60, 5)) is not None
    assert core.rejection_reason(Request(2, 0.0, 1, 63)) is None
    assert core.add(Request(3, 0.5, 60, 4), 0.75)
    assert not core.add(Request(4, 0.5, 60, 6), 0.75)
    assert [r.request_id for r in core.waiting] == [3]
    assert core.num_done == 1
    records = core.records.frame()
    assert records["ready_s"].tolist() == [0.75]


# -- the core without the executor ----------------------------------------------


def drive(core: EngineCore, cost: LinearCost) -> None:
    """A minimal executor, step by step: run plans back to back until the core is empty."""
    now = 0.0
    while core.running or core.waiting:
        plan = core.schedule(now)
        assert not plan.is_empty
        end = now + cost.step_s(core.step_shape(plan))
        core.update(plan, end)
        now = end


def test_step_log_counts_prefill_chunks_and_decodes() -> None:
    core = EngineCore(ContinuousConfig(max_num_batched_tokens=10).build(), BlockPool(64, 16), 1000)
    core.add(Request(0, 0.0, 25, 2), 0.0)
    drive(core, COST)
    steps = core.steps.frame()
    # Prompt 25 in chunks of 10, 10, 5; the third emits the first token; one decode.
    assert steps["num_prefill_tokens"].tolist() == [10, 10, 5, 0]
    assert steps["num_decode_seqs"].tolist() == [0, 0, 0, 1]
    assert steps["num_itl_tokens"].tolist() == [0, 0, 0, 1]
    record = core.records.frame().iloc[0]
    assert record["first_token_s"] == pytest.approx(3 * OVH + 25 * PRE, abs=TOL)
    assert record["finish_s"] == pytest.approx(4 * OVH + 25 * PRE + DEC, abs=TOL)


def test_flush_records_unfinished_requests_with_nan_times() -> None:
    core = EngineCore(ContinuousConfig().build(), BlockPool(8, 16), 1000)
    core.add(Request(0, 0.0, 10, 5), 0.0)
    core.add(Request(1, 0.0, 10, 5), 0.0)
    plan = core.schedule(0.0)
    assert core.kv.num_blocks - core.kv.num_free_blocks == 2
    core.update(plan, 0.5)
    core.flush_unfinished()
    assert core.kv.num_free_blocks == 8
    records = core.records.frame()
    assert records["finish_s"].isna().all()
    assert records["num_generated_tokens"].tolist() == [1, 1]
    assert not core.running and not core.waiting


# -- token times through the public API ------------------------------------------


def test_token_times_with_detokenization() -> None:
    from sim import api
    from sim.scenario import scenario_from_dict

    doc = {
        "cost": {"kind": "linear", "per_prefill_token_s": 4.1e-5, "per_decode_seq_s": 2.9e-3},
        "engine": {"num_kv_blocks": 100, "max_model_len_tokens": 1600},  # 100 x 16 tokens
        "frontend": {
            "way_in_s_per_request": 0.0,
            "tokenize_s_per_token": 0.0,
            "detokenize_s_per_token": 2.3e-4,
        },
        "workload": {
            "kind": "synthetic",
            "num_requests": 3,
            "arrival": {"kind": "constant", "rate_per_s": 1e6},
            "prompt_tokens": {"kind": "fixed", "tokens": 1},
            "output_tokens": {"kind": "fixed", "tokens": 1},
        },
    }
    result = api.run(scenario_from_dict(doc))
    requests = result.requests
    for request_id, first_token_s in zip(
        requests["request_id"].tolist(), requests["first_token_s"].tolist(), strict=True
    ):
        assert result.token_times_s(request_id).tolist() == [first_token_s]


def test_requests_finished_outside_a_commit_leave_running_once_removed() -> None:
    """An executor may end requests itself (the online engine, on EOS or abort):
    ``finish`` records them, ``remove_finished`` takes them out of ``running``,
    keeping its order, and tolerates one that never ran."""
    core = EngineCore(ContinuousConfig(max_num_seqs=8).build(), BlockPool(100, 16), 8192)
    requests = [Request(i, 0.0, 20, 5) for i in range(6)]
    for request in requests:
        assert core.add(request, 0.0)
    plan = core.schedule(0.0)
    assert len(plan.scheduled) == 6 and len(core.running) == 6
    core.update(plan, 0.5)
    late = Request(9, 0.6, 20, 5)
    core.add(late, 0.6)  # waiting, never scheduled
    for request in (requests[4], requests[1], late):
        core.finish(request, 0.7)
    assert len(core.running) == 6  # not yet taken out
    core.remove_finished()
    assert [r.request_id for r in core.running] == [0, 2, 3, 5]
    assert core.num_done == 3
    core.remove_finished()  # nothing new: a no-op
    assert [r.request_id for r in core.running] == [0, 2, 3, 5]
    # Many at once take the rebuilding path, same result.
    for request in core.running[:]:
        core.finish(request, 0.8)
    extra = [Request(20 + i, 0.8, 20, 5) for i in range(3)]
    for request in extra:
        core.finish(request, 0.8)
    core.remove_finished()
    assert core.running == []
