"""Disaggregated prefill and decode: the KV transfer, TTFT/TPOT, invariants.

Costs are powers of two (as in ``tests/test_core.py``), so the hand-computed
times below are exact in binary floating point.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict
from sim.serving.cluster import Cluster, ClusterConfig, request_token_times_s
from sim.serving.disagg import DisaggregationConfig, merge_records
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.router import RouterKind
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays

OVH, PRE, DEC = 1 / 128, 1 / 1024, 1 / 256
COST = LinearCost(step_overhead_s=OVH, per_prefill_token_s=PRE, per_decode_seq_s=DEC)
KV_BYTES_PER_TOKEN = 1024.0
TIME_COLUMNS = ["ready_s", "first_scheduled_s", "first_token_s", "finish_s", "decode_ready_s"]


def engine(
    skip_ahead: bool = True, num_kv_blocks: int = 1000, max_num_seqs: int = 8
) -> ReplicaConfig:
    return ReplicaConfig(
        core=CoreConfig(
            make_policy=ContinuousConfig(
                max_num_seqs=max_num_seqs, max_num_batched_tokens=512
            ).build,
            num_kv_blocks=num_kv_blocks,
            block_size_tokens=16,
            max_model_len_tokens=4096,
        ),
        cost=COST,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )


def split(
    num_prefill: int = 1,
    num_decode: int = 1,
    bandwidth: float = 8192.0,
    latency: float = 1 / 32,
    router: RouterKind = "least_outstanding_requests",
) -> Cluster:
    config = ClusterConfig(
        router=router,
        disaggregation=DisaggregationConfig(
            num_prefill_replicas=num_prefill,
            num_decode_replicas=num_decode,
            kv_transfer_bandwidth_bytes_per_s=bandwidth,
            kv_transfer_latency_s=latency,
        ),
    )
    return Cluster(config, np.random.default_rng(0), KV_BYTES_PER_TOKEN)


def arrays(arrival_s: list[float], prompt: list[int], output: list[int]) -> RequestArrays:
    return RequestArrays(
        np.asarray(arrival_s, dtype=np.float64),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
    )


def run(work: RequestArrays, layout: Cluster | None, **kwargs: object) -> RawResult:
    return Simulation(engine(**kwargs), layout).run(cast(OpenLoop, work))  # type: ignore[arg-type]


def row(raw: RawResult, request_id: int) -> pd.Series:
    return raw.requests.loc[raw.requests["request_id"] == request_id].iloc[0]


def test_transfer_time_is_latency_plus_bytes_over_bandwidth() -> None:
    config = DisaggregationConfig(kv_transfer_bandwidth_bytes_per_s=1e9, kv_transfer_latency_s=1e-3)
    # 1000 tokens x 131072 B (Llama-3-8B, bf16) = 131.072 MB at 1 GB/s = 0.131072 s.
    assert config.transfer_s(1000, 131072) == pytest.approx(0.001 + 0.131072, rel=1e-12)
    assert config.transfer_s(0, 131072) == 1e-3


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_hand_computed_disaggregated_trace(skip_ahead: bool) -> None:
    # One request: prompt 8, output 3, arriving at 0.
    # prefill replica 0, step [0, 1/64]:   OVH + 8 PRE = 2/128          -> token 1 at 1/64
    # transfer: 1/32 + 8 tokens x 1024 B / 8192 B/s = 1/32 + 1 = 33/32  -> lands at 67/64
    # decode replica 1: two decode steps of OVH + DEC = 3/256 -> tokens at 271/256, 274/256
    raw = run(arrays([0.0], [8], [3]), split(), skip_ahead=skip_ahead)
    r = row(raw, 0)
    assert r["first_token_s"] == 1 / 64 and r["first_scheduled_s"] == 0.0
    assert r["kv_transfer_start_s"] == 1 / 64 and r["kv_transfer_s"] == 33 / 32
    assert r["decode_ready_s"] == r["decode_first_scheduled_s"] == 67 / 64
    assert r["finish_s"] == 274 / 256
    assert r["replica"] == 1 and r["prefill_replica"] == 0
    assert r["num_generated_tokens"] == 3 and r["num_output_tokens"] == 3
    times = request_token_times_s(
        raw.step_table, r["first_token_s"], 3, raw.later_runs.get(0), 1, 0
    )
    np.testing.assert_array_equal(times, [1 / 64, 271 / 256, 274 / 256])
    # The transfer is in the first inter-token gap, not in the step log.
    np.testing.assert_array_equal(raw.extra_itl_s, [271 / 256 - 1 / 64])
    assert raw.steps.groupby("replica")["num_prefill_tokens"].sum().to_dict() == {0: 8, 1: 0}


def test_ttft_excludes_the_transfer_and_e2e_includes_it() -> None:
    work = arrays([0.0], [8], [3])
    colocated = row(run(work, None), 0)
    apart = row(run(work, split()), 0)
    assert apart["first_token_s"] == colocated["first_token_s"] == 1 / 64
    # Colocated, the two decode steps follow the prefill at once.
    assert colocated["finish_s"] == 1 / 64 + 6 / 256
    assert apart["finish_s"] - colocated["finish_s"] == pytest.approx(33 / 32, abs=1e-12)


def random_work(seed: int, num: int = 200) -> RequestArrays:
    rng = np.random.default_rng(seed)
    arrival_s = np.cumsum(rng.exponential(0.02, num))
    return RequestArrays(arrival_s, rng.integers(1, 400, num), rng.integers(1, 50, num))


def test_slower_link_raises_tpot_and_e2e_but_not_ttft() -> None:
    work = random_work(3)
    fast = run(work, split(2, 2, bandwidth=1e9, latency=1e-4)).requests
    slow = run(work, split(2, 2, bandwidth=1e6, latency=1e-2)).requests
    # The prefill pool never sees the link: first tokens are identical.
    np.testing.assert_array_equal(fast["first_token_s"], slow["first_token_s"])
    e2e_fast = fast["finish_s"] - fast["arrival_s"]
    e2e_slow = slow["finish_s"] - slow["arrival_s"]
    assert e2e_slow.mean() > e2e_fast.mean() + 0.01
    many = fast["num_generated_tokens"] >= 2
    tpot_fast = (fast["finish_s"] - fast["first_token_s"])[many] / (
        fast["num_generated_tokens"] - 1
    )[many]
    tpot_slow = (slow["finish_s"] - slow["first_token_s"])[many] / (
        slow["num_generated_tokens"] - 1
    )[many]
    assert tpot_slow.mean() > tpot_fast.mean()
    moved = slow["kv_transfer_s"].notna()
    assert (slow["num_output_tokens"][~moved] == 1).all()  # only 1-token requests stay put
    expected = 1e-2 + slow["num_prompt_tokens"][moved] * KV_BYTES_PER_TOKEN / 1e6
    np.testing.assert_allclose(slow["kv_transfer_s"][moved], expected, rtol=1e-12)


def test_one_token_requests_finish_on_the_prefill_replica() -> None:
    raw = run(arrays([0.0, 0.0], [8, 8], [1, 2]), split())
    one, two = row(raw, 0), row(raw, 1)
    assert int(one["replica"]) == int(one["prefill_replica"]) == 0
    assert pd.isna(one["kv_transfer_s"])
    assert one["finish_s"] == one["first_token_s"]
    assert two["replica"] == 1 and two["kv_transfer_s"] > 0


@st.composite
def workloads(draw: st.DrawFn) -> RequestArrays:
    num = draw(st.integers(1, 20))
    gaps = draw(st.lists(st.floats(0.0, 0.05), min_size=num, max_size=num))
    prompt = draw(st.lists(st.integers(1, 300), min_size=num, max_size=num))
    output = draw(st.lists(st.integers(1, 30), min_size=num, max_size=num))
    return RequestArrays(
        np.cumsum(np.asarray(gaps, dtype=np.float64)),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
    )


@settings(max_examples=30, deadline=None)
@given(
    work=workloads(),
    num_prefill=st.integers(1, 2),
    num_decode=st.integers(1, 3),
    router=st.sampled_from(["round_robin", "least_outstanding_tokens", "central_queue"]),
    num_kv_blocks=st.integers(4, 30),
    bandwidth=st.sampled_from([1e4, 1e6, 1e9]),
)
def test_disaggregated_invariants_and_skip_ahead_equals_step_by_step(
    work: RequestArrays,
    num_prefill: int,
    num_decode: int,
    router: RouterKind,
    num_kv_blocks: int,
    bandwidth: float,
) -> None:
    frames = []
    for skip_ahead in (True, False):
        layout = split(num_prefill, num_decode, bandwidth, 1e-3, router)
        sim = Simulation(engine(skip_ahead, num_kv_blocks, max_num_seqs=3), layout)
        raw = sim.run(cast(OpenLoop, work))
        requests = raw.requests
        assert sorted(requests["request_id"]) == list(range(len(work.arrival_s)))
        rejected = requests["rejection_reason"].notna()
        assert (np.isfinite(requests["finish_s"]) | rejected).all()
        done = requests[~rejected]
        assert (done["num_generated_tokens"] == done["num_output_tokens"]).all()
        assert (done["first_token_s"] <= done["finish_s"]).all()
        decoded = done["kv_transfer_s"].notna()
        assert (done["replica"][decoded] >= num_prefill).all()
        assert (done["prefill_replica"] < num_prefill).all()
        landed = done["kv_transfer_start_s"] + done["kv_transfer_s"]
        np.testing.assert_allclose(done["decode_ready_s"][decoded], landed[decoded], rtol=1e-12)
        assert (raw.timeseries["num_kv_blocks_used"] <= num_kv_blocks).all()
        assert all(core.kv.num_free_blocks == num_kv_blocks for core in sim.cores)
        frames.append(requests)
    for column in TIME_COLUMNS:
        np.testing.assert_allclose(frames[0][column], frames[1][column], rtol=1e-9, atol=0)


def test_merge_records_keeps_requests_seen_by_one_pool() -> None:
    columns = [
        "request_id",
        "ready_s",
        "first_scheduled_s",
        "finish_s",
        "num_output_tokens",
        "replica",
    ]
    prefill = pd.DataFrame(
        [[0, 1.0, 1.5, 2.0, 1, 0], [1, 1.0, np.nan, np.nan, 1, 0]], columns=columns
    )
    decode = pd.DataFrame(
        [[0, 3.0, 3.5, 9.0, 5, 1], [2, 0.5, np.nan, np.nan, 7, 1]], columns=columns
    )
    transfers = pd.DataFrame(
        {"request_id": [0], "kv_transfer_start_s": [2.0], "kv_transfer_s": [1.0]}
    )
    prefill, decode, transfers = (
        {name: frame[name].to_numpy() for name in frame.columns}
        for frame in (prefill, decode, transfers)
    )
    joined = merge_records(prefill, decode, transfers, {1: 4})
    assert joined["request_id"].tolist() == [0, 1, 2]  # in id order
    merged = pd.DataFrame(joined).set_index("request_id")
    assert merged.loc[0, "ready_s"] == 1.0 and merged.loc[0, "decode_ready_s"] == 3.0
    assert merged.loc[0, "first_scheduled_s"] == 1.5 and merged.loc[0, "finish_s"] == 9.0
    assert merged.loc[1, "num_output_tokens"] == 4 and merged.loc[1, "prefill_replica"] == 0
    assert merged["prefill_replica"].isna().tolist() == [False, False, True]
    assert merged.loc[2, "replica"] == 1
    assert sorted(merged.index) == [0, 1, 2]


SCENARIO = {
    "name": "disagg-test",
    "cost": {"kind": "roofline"},
    "workload": {
        "kind": "synthetic",
        "num_requests": 200,
        "arrival": {"kind": "poisson", "rate_per_s": 10},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 100, "max_tokens": 3000},
        "output_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 100},
    },
    "cluster": {
        "router": "power_of_two",
        "disaggregation": {
            "num_prefill_replicas": 1,
            "num_decode_replicas": 2,
            "kv_transfer_bandwidth_bytes_per_s": 2e9,
            "kv_transfer_latency_s": 5e-4,
        },
    },
}


def test_api_summary_reports_transfers_and_pools() -> None:
    result = api.run(scenario_from_dict(SCENARIO))
    s = result.summary
    assert s["num_replicas"] == 3 and s["num_prefill_replicas"] == 1
    assert s["num_decode_replicas"] == 2 and s["router"] == "power_of_two"
    counts = s["replica_completed"]
    assert counts[0] == s["completed"] == 200
    assert (
        sum(counts[1:])
        == s["num_kv_transfers"]
        == int((result.requests["num_output_tokens"] > 1).sum())
    )
    # Llama-3-8B: 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 B = 131072 B per token.
    moved = result.requests["kv_transfer_s"].dropna()
    prompts = result.requests.loc[moved.index, "num_prompt_tokens"]
    np.testing.assert_allclose(moved, 5e-4 + prompts * 131072 / 2e9, rtol=1e-12)
    assert s["mean_kv_transfer_ms"] == pytest.approx(moved.mean() * 1e3)
    assert s["p99_kv_transfer_ms"] == pytest.approx(np.percentile(moved, 99) * 1e3)
    for request_id in (3, 100):
        r = result.requests.loc[result.requests["request_id"] == request_id].iloc[0]
        times = result.token_times_s(request_id)
        assert len(times) == r["num_generated_tokens"]
        assert times[0] == pytest.approx(r["first_token_s"], abs=1e-9)
        assert times[-1] == pytest.approx(r["finish_s"], abs=1e-9)


def test_disaggregation_config_checks_the_replica_count() -> None:
    bad = {**SCENARIO, "cluster": {**SCENARIO["cluster"], "num_replicas": 4}}  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"cluster: num_replicas \(4\) must equal"):
        scenario_from_dict(bad)
    with pytest.raises(ConfigError, match="kv_transfer_bandwidth_bytes_per_s"):
        scenario_from_dict(
            {**SCENARIO, "cluster": {"disaggregation": {"kv_transfer_bandwidth_bytes_per_s": 0}}}
        )
    ok = {**SCENARIO, "cluster": {**SCENARIO["cluster"], "num_replicas": 3}}  # type: ignore[dict-item]
    assert scenario_from_dict(ok).cluster is not None
