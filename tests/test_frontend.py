"""The frontend (vLLM's API server process) as a queue after the engine.

Hand-traced cases for ``delivery_s``, a brute-force reference for the batching
rule, and whole runs: client times, merged chunks and ITL as ``vllm bench
serve`` counts it (one sample per chunk).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from frontend_frames import add_delivery, frame_delivery, step_table
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sim import api
from sim.metrics.itl import step_itl_gaps_s
from sim.scenario import scenario_from_dict
from sim.serving.frontend import delivery_s
from sim.validation.predict import simulated_latencies

NAN = math.nan


def tie_margin_s(
    ends: list[float], outputs: list[int], step_s: float, per_output_s: float
) -> float:
    """How close a step with output comes to arriving just as the frontend frees
    (the reference's looks), in s: at a tie, which batch the step joins is decided
    by rounding, and ``delivery_s`` (closed form) may round the other way."""
    margin = math.inf
    free_s = 0.0
    for end, n in zip(ends, outputs, strict=True):
        if n:
            margin = min(margin, abs(end - free_s))
            free_s = max(free_s, end) + step_s + per_output_s * n
    return margin


def reference_delivery(
    ends: list[float], outputs: list[int], step_s: float, per_output_s: float
) -> list[float]:
    """The frontend, event by event: when it looks, it takes every step that
    has arrived, works through them, and delivers them together."""
    queue = [
        (e, step_s + per_output_s * n, i)
        for i, (e, n) in enumerate(zip(ends, outputs, strict=True))
        if n
    ]
    delivered = [NAN] * len(ends)
    free_s, j = 0.0, 0
    while j < len(queue):
        look_s = max(free_s, queue[j][0])
        batch = [item for item in queue[j:] if item[0] <= look_s]
        free_s = look_s + sum(cost for _, cost, _ in batch)
        for _, _, i in batch:
            delivered[i] = free_s
        j += len(batch)
    return delivered


def test_an_idle_frontend_delivers_each_step_after_its_own_cost() -> None:
    # Costs 0.1 + 0.05 n: 0.2 s for two outputs, 0.25 s for three; a step
    # without output (a partial prefill) sends nothing.
    got = delivery_s([1.0, 2.0, 3.0], [2, 0, 3], 0.1, 0.05)
    assert got[0] == pytest.approx(1.2) and math.isnan(got[1]) and got[2] == pytest.approx(3.25)


def test_a_lagging_frontend_merges_the_steps_waiting_when_it_looks() -> None:
    # Steps every 1 s, each costing it 1.5 s. It looks at 0 (step 0, done 1.5),
    # at 1.5 (step 1, done 3), at 3 (steps 2 and 3, done 6), at 6 (step 4).
    got = delivery_s([0.0, 1.0, 2.0, 3.0, 4.0], [1] * 5, 1.5, 0.0)
    assert got.tolist() == pytest.approx([1.5, 3.0, 6.0, 6.0, 7.5])


def test_a_busy_period_ends_and_the_next_starts_idle() -> None:
    # 0 -> 1.5; step 1 waits (3.0); step 2 finds it idle (11.5); step 3 waits (13.0).
    got = delivery_s([0.0, 1.0, 10.0, 10.5], [1, 1, 1, 1], 1.5, 0.0)
    assert got.tolist() == pytest.approx([1.5, 3.0, 11.5, 13.0])


def test_no_output_no_delivery() -> None:
    assert np.isnan(delivery_s([1.0, 2.0], [0, 0], 1.0, 1.0)).all()
    assert delivery_s([], [], 1.0, 1.0).size == 0


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=40),
    outputs=st.lists(st.integers(0, 6), min_size=40, max_size=40),
    step_s=st.floats(0.0, 1.5),
    per_output_s=st.floats(0.0, 0.5),
)
def test_delivery_matches_the_event_by_event_frontend(
    gaps: list[float], outputs: list[int], step_s: float, per_output_s: float
) -> None:
    ends = np.cumsum(gaps).tolist()
    counts = outputs[: len(ends)]
    # Away from exact ties (e.g. gaps equal to the costs), where rounding picks the batch.
    assume(tie_margin_s(ends, counts, step_s, per_output_s) > 1e-9)
    got = delivery_s(ends, counts, step_s, per_output_s)
    want = reference_delivery(ends, counts, step_s, per_output_s)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    # Never before the step's own cost is paid; in order.
    has = np.array(counts) > 0
    cost = step_s + per_output_s * np.array(counts)
    assert (got[has] >= np.array(ends)[has] + cost[has] - 1e-9).all()
    assert (np.diff(got[has]) >= -1e-9).all()


def test_each_replica_is_delivered_and_looked_up_on_its_own() -> None:
    import pandas as pd

    steps = pd.DataFrame({"end_s": [0.0, 0.0, 1.0], "num_outputs": [1, 4, 1], "replica": [0, 1, 0]})
    got = add_delivery(steps, 0.5, 0.25)["delivered_s"].tolist()
    # Replica 0: 0 -> 0.75, then 1.0 finds it idle -> 1.75; replica 1: 0 -> 1.5.
    assert got == pytest.approx([0.75, 1.5, 1.75])
    delivery = frame_delivery(add_delivery(steps, 0.5, 0.25))
    # The same engine time on two replicas: each maps through its own log.
    assert delivery.client_s([0.0, 0.0], [0, 1]).tolist() == pytest.approx([0.75, 1.5])
    # Not on the named replica: found among all (disaggregation's prefill side).
    assert delivery.client_s([1.0], [1]).tolist() == pytest.approx([1.75])
    assert np.isnan(delivery.client_s([NAN])).all()
    with pytest.raises(ValueError, match=r"no step with output ends at 0\.5"):
        delivery.client_s([0.5])


def one_request_doc(frontend: dict[str, float], num_output_tokens: int = 10) -> dict[str, Any]:
    return {
        # Prefill 5 ms + 1 ms, every decode step 1 ms (linear cost, no overhead).
        "cost": {"kind": "linear", "per_prefill_token_s": 1e-3, "per_decode_seq_s": 1e-3},
        # 100 blocks of 16: 1600 tokens, at least one request of max_model_len.
        "engine": {
            "num_kv_blocks": 100,
            "max_model_len_tokens": 1600,
            "enable_prefix_caching": False,
        },
        "frontend": {"tokenize_s_per_token": 0.0, **frontend},
        "workload": {
            "kind": "synthetic",
            "num_requests": 1,
            "arrival": {"kind": "constant", "rate_per_s": 1.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 5},
            "output_tokens": {"kind": "fixed", "tokens": num_output_tokens},
        },
    }


def test_without_frontend_cost_the_client_sees_engine_times() -> None:
    doc = one_request_doc({"detokenize_s_per_token": 0.0, "output_step_s": 0.0})
    result = api.run(scenario_from_dict(doc))
    row = result.requests.iloc[0]
    assert row["first_token_s"] == row["engine_first_token_s"]
    assert row["finish_s"] == row["engine_finish_s"]
    steps = result.steps
    gaps, _ = step_itl_gaps_s(step_table(steps))
    durations, _ = step_itl_gaps_s(step_table(steps.drop(columns="delivered_s")))
    np.testing.assert_allclose(gaps, durations, rtol=1e-12)
    assert result.summary["mean_itl_ms"] == pytest.approx(1.0)


def test_an_idle_frontend_adds_its_cost_to_every_token() -> None:
    doc = one_request_doc({"detokenize_s_per_token": 2e-4, "output_step_s": 3e-4})
    result = api.run(scenario_from_dict(doc))
    row = result.requests.iloc[0]
    # One output a step: 0.3 ms + 0.2 ms after each step, below the 1 ms step.
    assert row["first_token_s"] - row["engine_first_token_s"] == pytest.approx(5e-4)
    assert row["finish_s"] - row["engine_finish_s"] == pytest.approx(5e-4)
    assert result.summary["mean_itl_ms"] == pytest.approx(1.0)
    assert result.summary["mean_tpot_ms"] == pytest.approx(1.0)


def test_a_lagging_frontend_streams_merged_chunks_one_itl_each() -> None:
    # Engine: prefill ends at p (arrival + 6 ms), then a token every 1 ms:
    # e_k = p + k ms, k = 0..9. The frontend costs 2.5 ms a step: it looks at
    # p (token 0, done p+2.5), at p+2.5 (tokens 1-2, done p+7.5), at p+7.5
    # (tokens 3-7, done p+20), at p+20 (tokens 8-9, done p+25).
    doc = one_request_doc({"detokenize_s_per_token": 0.0, "output_step_s": 2.5e-3})
    result = api.run(scenario_from_dict(doc))
    row = result.requests.iloc[0]
    p = row["engine_first_token_s"]
    offsets_ms = [2.5, 7.5, 7.5, 20, 20, 20, 20, 20, 25, 25]
    times = result.token_times_s(int(row["request_id"]))
    np.testing.assert_allclose(times, [p + o / 1e3 for o in offsets_ms], rtol=1e-12)
    assert row["first_token_s"] == pytest.approx(p + 2.5e-3)
    assert row["finish_s"] == pytest.approx(p + 25e-3)
    # Four chunks: three ITL samples (5, 12.5, 5 ms); TPOT over 9 tokens.
    assert result.summary["mean_itl_ms"] == pytest.approx(7.5)
    assert result.summary["median_itl_ms"] == pytest.approx(5.0)
    assert result.summary["mean_tpot_ms"] == pytest.approx(22.5 / 9)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_itl_samples_are_the_gaps_between_each_requests_chunks(seed: int) -> None:
    # A small KV cache (preemptions break token runs) and a frontend that lags
    # at the larger batches: the step-weighted ITL must equal, as a multiset,
    # the gaps between distinct client times of every request's tokens.
    doc: dict[str, Any] = {
        "seed": seed,
        "cost": {"kind": "linear", "per_prefill_token_s": 2e-5, "per_decode_seq_s": 4e-4},
        "engine": {"num_kv_blocks": 24, "block_size_tokens": 8, "max_model_len_tokens": 192},
        "frontend": {
            "tokenize_s_per_token": 0.0,
            "detokenize_s_per_token": 3e-4,
            "output_step_s": 5e-4,
        },
        "workload": {
            "kind": "synthetic",
            "num_requests": 40,
            "arrival": {"kind": "poisson", "rate_per_s": 150},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 4, "max_tokens": 60},
            "output_tokens": {"kind": "uniform", "min_tokens": 2, "max_tokens": 40},
        },
    }
    result = api.run(scenario_from_dict(doc))
    assert (result.requests["num_preemptions"] > 0).any()
    per_request = []
    for request_id in result.requests["request_id"]:
        times = result.token_times_s(int(request_id))
        gaps = np.diff(times)
        per_request.append(gaps[gaps > 0])
    want = np.sort(np.concatenate(per_request))
    got = np.sort(simulated_latencies(result).itl_s)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # Some chunks carry several tokens: fewer ITL samples than token gaps.
    num_gaps = int((result.requests["num_generated_tokens"] - 1).clip(lower=0).sum())
    assert len(got) < num_gaps
