"""Several replicas behind a router: equivalence, queueing theory, invariants.

* One replica in a ``cluster`` section is today's single replica, bit for bit.
* A central queue over c replicas with batch size 1 and exponential service
  times is the M/M/c queue: mean waiting time = Erlang C formula. Service is
  one prefill step of ``a * P`` seconds (no step overhead, one output token)
  with ``P`` drawn from the ``exponential`` length sampler, i.e. geometric on
  1, 2, … with mean ~1000 tokens: its squared coefficient of variation is
  1 - p, p = 1e-3, so the law is exponential to 0.1 %. As in
  ``tests/test_queueing.py``, each of K seeds gives one run's mean wait (after
  a warm-up), and the check is ``|mean - theory| <= 5 SE`` with SE the
  standard error across seeds (t with 9 degrees of freedom: a correct
  simulator fails ~1e-3 of new random streams; the seeds are fixed). SE must
  also be under 5 % of the theory, so that the band means something: at
  rho = 0.8 a service time 5 % too long moves the M/M/3 wait by ~30 %.
* Direction: more replicas, less waiting; one shared queue waits less than
  round robin (which splits the Poisson stream into c slower Erlang streams).
* Hypothesis: no request lost or duplicated, no replica's KV pool overdrawn,
  skip-ahead equal to step-by-step, for every router.
"""

from __future__ import annotations

import math
from typing import cast, get_args

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queueing_formulas import mm1_wait_s, mmc_wait_s

from sim import api
from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig, StaticConfig
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict
from sim.serving.cluster import Cluster, ClusterConfig, total_over_replicas
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.router import RouterKind
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.arrivals import PoissonArrival, arrival_times_s
from sim.workload.generate import RequestArrays
from sim.workload.lengths import ExponentialLength, make_length_sampler

ROUTERS: list[RouterKind] = list(get_args(RouterKind))
COST = LinearCost(
    step_overhead_s=2e-3, per_prefill_token_s=3e-5, per_decode_seq_s=7e-4, per_context_token_s=1e-7
)
TIME_COLUMNS = ["ready_s", "first_scheduled_s", "first_token_s", "finish_s"]


def make_engine(
    *,
    cost: LinearCost = COST,
    max_num_seqs: int = 8,
    num_kv_blocks: int = 10_000,
    skip_ahead: bool = True,
    static: bool = False,
    max_model_len_tokens: int = 1 << 20,
) -> ReplicaConfig:
    policy = (
        StaticConfig(max_batch_size=max_num_seqs, max_wait_s=0.01).build
        if static
        else ContinuousConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=1 << 20).build
    )
    return ReplicaConfig(
        core=CoreConfig(
            make_policy=policy,
            num_kv_blocks=num_kv_blocks,
            block_size_tokens=16,
            max_model_len_tokens=max_model_len_tokens,
        ),
        cost=cost,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )


def cluster(num_replicas: int, router: RouterKind, seed: int = 0) -> Cluster:
    return Cluster(
        ClusterConfig(num_replicas=num_replicas, router=router), np.random.default_rng(seed)
    )


def simulate(engine: ReplicaConfig, work: RequestArrays, layout: Cluster | None) -> Simulation:
    sim = Simulation(engine, layout)
    sim.raw = sim.run(cast(OpenLoop, work))  # type: ignore[attr-defined]
    return sim


def run(engine: ReplicaConfig, work: RequestArrays, layout: Cluster | None) -> RawResult:
    return Simulation(engine, layout).run(cast(OpenLoop, work))


def random_work(seed: int, num: int = 300, rate_per_s: float = 40.0) -> RequestArrays:
    rng = np.random.default_rng(seed)
    arrival_s = arrival_times_s(PoissonArrival(rate_per_s=rate_per_s), rng, num_requests=num)
    prompt = rng.integers(1, 600, num)
    output = rng.integers(1, 60, num)
    return RequestArrays(arrival_s, prompt, output)


def waits_s(raw: RawResult) -> np.ndarray:
    requests = raw.requests
    assert requests["rejection_reason"].isna().all()
    assert np.isfinite(requests["finish_s"]).all()
    return (requests["first_scheduled_s"] - requests["ready_s"]).to_numpy()


# -- one replica is today's path ----------------------------------------------------


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("static", [False, True])
def test_one_replica_cluster_equals_the_single_replica_path(
    router: RouterKind, static: bool
) -> None:
    engine = make_engine(max_num_seqs=4, num_kv_blocks=120, static=static)
    work = random_work(1, num=250, rate_per_s=60.0)
    plain = run(engine, work, None)
    pooled = run(engine, work, cluster(1, router))
    pooled_requests = pooled.requests
    if router == "central_queue":  # its own column: when the replica pulled each request
        pulled = pooled_requests.pop("pulled_s")
        assert (pulled >= pooled_requests["ready_s"]).all()
        assert (pulled <= pooled_requests["first_scheduled_s"]).all()
    pd.testing.assert_frame_equal(plain.requests, pooled_requests)
    pd.testing.assert_frame_equal(plain.steps, pooled.steps)
    assert plain.later_runs == pooled.later_runs
    np.testing.assert_array_equal(plain.extra_itl_s, pooled.extra_itl_s)
    assert plain.requests["num_preemptions"].sum() > 0 or static  # the case is not trivial
    if router != "central_queue":  # (its queue is not the replica's, so num_waiting differs)
        pd.testing.assert_frame_equal(plain.timeseries, pooled.timeseries)


SCENARIO = {
    "name": "cluster-test",
    "cost": {"kind": "roofline"},
    "scheduler": {"kind": "continuous", "max_num_seqs": 16},
    "workload": {
        "kind": "synthetic",
        "num_requests": 300,
        "arrival": {"kind": "poisson", "rate_per_s": 12},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 50, "max_tokens": 1500},
        "output_tokens": {"kind": "uniform", "min_tokens": 5, "max_tokens": 200},
    },
}


def test_api_one_replica_summary_equals_no_cluster_plus_cluster_keys() -> None:
    plain = api.run(scenario_from_dict(SCENARIO))
    pooled = api.run(scenario_from_dict({**SCENARIO, "cluster": {"router": "power_of_two"}}))
    extra = set(pooled.summary) - set(plain.summary)
    assert extra == {"num_replicas", "router", "replica_completed", "replica_imbalance"}
    assert {k: pooled.summary[k] for k in plain.summary} == plain.summary
    assert pooled.summary["replica_completed"] == [300]
    assert pooled.summary["replica_imbalance"] == 1.0


def test_api_four_replicas_report_per_replica_counts_and_token_times() -> None:
    result = api.run(
        scenario_from_dict(
            {**SCENARIO, "cluster": {"num_replicas": 4, "router": "least_outstanding_tokens"}}
        )
    )
    summary = result.summary
    assert summary["num_replicas"] == 4 and summary["router"] == "least_outstanding_tokens"
    counts = summary["replica_completed"]
    assert len(counts) == 4 and sum(counts) == summary["completed"] == 300
    assert summary["replica_imbalance"] == pytest.approx(max(counts) / (sum(counts) / 4))
    assert set(result.steps["replica"]) == set(result.timeseries["replica"]) == {0, 1, 2, 3}
    for request_id in (0, 150, 299):
        row = result.requests.loc[result.requests["request_id"] == request_id].iloc[0]
        times = result.token_times_s(request_id)
        assert len(times) == row["num_generated_tokens"]
        assert times[0] == pytest.approx(row["first_token_s"], abs=1e-9)
        assert times[-1] == pytest.approx(row["finish_s"], abs=1e-9)
        assert (np.diff(times) > 0).all()
    total = total_over_replicas(result.timeseries)
    assert "replica" not in total and total["time_s"].is_monotonic_increasing
    assert total["num_running"].max() <= 4 * 16


def test_cluster_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"cluster\.router"):
        scenario_from_dict({**SCENARIO, "cluster": {"router": "random"}})
    with pytest.raises(ConfigError, match=r"cluster\.num_replicas"):
        scenario_from_dict({**SCENARIO, "cluster": {"num_replicas": 0}})
    with pytest.raises(ConfigError, match=r"cluster\.replicas"):
        scenario_from_dict({**SCENARIO, "cluster": {"replicas": 2}})


# -- queueing theory ------------------------------------------------------------------

NUM_SEEDS = 10
WARMUP = 500
Z = 5.0
MMC_COST = LinearCost(step_overhead_s=0.0, per_prefill_token_s=1e-5, per_decode_seq_s=1e-3)
MMC_MEAN_TOKENS = 1000.0
# Mean of the geometric prompt (ceil of an exponential): 1 / (1 - exp(-1 / mean)).
MMC_SERVICE_S = 1e-5 / (1 - math.exp(-1 / MMC_MEAN_TOKENS))


def mmc_run(seed: int, num_replicas: int, rho: float, router: RouterKind, num: int) -> RawResult:
    rng = np.random.default_rng([seed, num_replicas, 31])
    rate_per_s = rho * num_replicas / MMC_SERVICE_S
    # Erlang C assumes a Poisson process: the renewal spacing, not vllm bench serve's rescaling.
    poisson = PoissonArrival(rate_per_s=rate_per_s, spacing="renewal")
    arrival_s = arrival_times_s(poisson, rng, num_requests=num)
    prompt = make_length_sampler(ExponentialLength(mean_tokens=MMC_MEAN_TOKENS)).sample(rng, num)
    output = np.ones(num, dtype=np.int64)
    engine = make_engine(cost=MMC_COST, max_num_seqs=1, num_kv_blocks=1 << 20)
    return run(engine, RequestArrays(arrival_s, prompt, output), cluster(num_replicas, router))


def test_central_queue_over_c_replicas_matches_erlang_c() -> None:
    num_replicas, rho = 3, 0.8
    rate_per_s = rho * num_replicas / MMC_SERVICE_S
    theory = mmc_wait_s(rate_per_s, MMC_SERVICE_S, num_replicas)
    means = []
    for seed in range(NUM_SEEDS):
        raw = mmc_run(seed, num_replicas, rho, "central_queue", 16_000)
        means.append(float(waits_s(raw)[WARMUP:].mean()))
        service = (raw.requests["finish_s"] - raw.requests["first_scheduled_s"]).to_numpy()
        np.testing.assert_allclose(service, 1e-5 * raw.requests["num_prompt_tokens"], rtol=1e-9)
    values = np.asarray(means)
    se = float(values.std(ddof=1) / math.sqrt(NUM_SEEDS))
    detail = f"mean {values.mean():.5g} vs Erlang C {theory:.5g}, SE {se:.3g}"
    assert se <= 0.05 * theory, "too noisy to be a test: " + detail
    assert abs(values.mean() - theory) <= Z * se, detail


def test_central_queue_never_idles_a_replica_while_requests_wait() -> None:
    """Work conservation, exactly: a request waits only while every replica is busy."""
    raw = mmc_run(0, 3, 0.9, "central_queue", 1500)
    requests = raw.requests
    start, finish = requests["first_scheduled_s"].to_numpy(), requests["finish_s"].to_numpy()
    for i in np.flatnonzero(waits_s(raw) > 0)[:300]:
        ready = requests["ready_s"].iloc[i]
        assert ((start <= ready) & (finish > ready)).sum() == 3  # all busy when it came
        assert np.isclose(finish, start[i], rtol=0, atol=1e-12).any()  # started as one left


def test_more_replicas_lower_waiting() -> None:
    """Fixed arrival rate (rho = 0.9 for one replica): 1, 2, 4 replicas wait less and less."""
    means = {}
    for c in (1, 2, 4):
        raw = mmc_run(5, c, 0.9 / c, "least_outstanding_requests", 4000)
        means[c] = float(waits_s(raw)[WARMUP:].mean())
    assert means[1] > 3 * means[2] > 0
    assert means[2] > means[4]
    # One replica is M/M/1 (within a wide band: one seed only).
    assert means[1] == pytest.approx(mm1_wait_s(0.9 / MMC_SERVICE_S, MMC_SERVICE_S), rel=0.35)


def test_one_shared_queue_waits_less_than_round_robin() -> None:
    shared = [
        float(waits_s(mmc_run(s, 3, 0.8, "central_queue", 3000))[WARMUP:].mean()) for s in (1, 2)
    ]
    split = [
        float(waits_s(mmc_run(s, 3, 0.8, "round_robin", 3000))[WARMUP:].mean()) for s in (1, 2)
    ]
    assert sum(split) > 1.5 * sum(shared)


# -- invariants under hypothesis ---------------------------------------------------------


@st.composite
def workloads(draw: st.DrawFn) -> RequestArrays:
    num = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0.0, 0.05), min_size=num, max_size=num))
    prompt = draw(st.lists(st.integers(1, 300), min_size=num, max_size=num))
    output = draw(st.lists(st.integers(1, 40), min_size=num, max_size=num))
    return RequestArrays(
        np.cumsum(np.asarray(gaps, dtype=np.float64)),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
    )


@settings(max_examples=40, deadline=None)
@given(
    work=workloads(),
    num_replicas=st.integers(1, 4),
    router=st.sampled_from(ROUTERS),
    max_num_seqs=st.integers(1, 4),
    num_kv_blocks=st.integers(4, 30),
    seed=st.integers(0, 3),
)
def test_cluster_invariants_and_skip_ahead_equals_step_by_step(
    work: RequestArrays,
    num_replicas: int,
    router: RouterKind,
    max_num_seqs: int,
    num_kv_blocks: int,
    seed: int,
) -> None:
    results = []
    for skip_ahead in (True, False):
        engine = make_engine(
            max_num_seqs=max_num_seqs, num_kv_blocks=num_kv_blocks, skip_ahead=skip_ahead
        )
        sim = simulate(engine, work, cluster(num_replicas, router, seed))
        raw: RawResult = sim.raw  # type: ignore[attr-defined]
        requests = raw.requests
        # Every request exactly once, finished or rejected.
        assert sorted(requests["request_id"]) == list(range(len(work.arrival_s)))
        done = np.isfinite(requests["finish_s"]) | requests["rejection_reason"].notna()
        assert done.all()
        finished = requests["rejection_reason"].isna()
        generated = requests.loc[finished, "num_generated_tokens"]
        assert (generated == requests.loc[finished, "num_output_tokens"]).all()
        assert set(requests["replica"]) <= set(range(num_replicas))
        # No replica's KV pool is ever overdrawn, and every block comes back.
        series = raw.timeseries
        assert (series["num_kv_blocks_used"] <= num_kv_blocks).all()
        assert (series["num_kv_blocks_used"] >= 0).all()
        assert all(core.kv.num_free_blocks == num_kv_blocks for core in sim.cores)
        results.append(requests)
    fast, slow = results
    pd.testing.assert_series_equal(fast["replica"], slow["replica"])
    for column in TIME_COLUMNS:
        np.testing.assert_allclose(fast[column], slow[column], rtol=1e-9, atol=0)


class FixedUsers:
    """A closed loop: ``num_users`` users, fixed lengths, random think times."""

    def __init__(self, num_users: int, num_requests: int, seed: int) -> None:
        self.num_users, self.num_requests = num_users, num_requests
        self.rng = np.random.default_rng(seed)

    def next_lengths(self) -> tuple[int, int]:
        return int(self.rng.integers(10, 400)), int(self.rng.integers(2, 30))

    def next_think_s(self) -> float:
        return float(self.rng.exponential(0.05))

    def next_prefix(self) -> tuple[int, int] | None:
        return None  # no prefix groups


@pytest.mark.parametrize("router", ["least_outstanding_requests", "central_queue"])
def test_closed_loop_over_replicas_skip_ahead_equals_step_by_step(router: RouterKind) -> None:
    frames = []
    for skip_ahead in (True, False):
        engine = make_engine(max_num_seqs=3, skip_ahead=skip_ahead)
        raw = Simulation(engine, cluster(3, router)).run(FixedUsers(12, 200, 4))
        assert np.isfinite(raw.requests["finish_s"]).all() and len(raw.requests) == 200
        frames.append(raw.requests)
    for column in TIME_COLUMNS:
        np.testing.assert_allclose(frames[0][column], frames[1][column], rtol=1e-9, atol=0)
