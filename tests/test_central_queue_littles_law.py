"""A central queue's standing queue is load, not a simulator bug (``sim.serving.pool``).

A central-queue run's ``ready_s`` is when a request joined the central queue,
but a replica's queue samples count it only once the replica pulls it. Little's
law checks each engine from ``pulled_s`` (when it reached its replica), so an
overloaded central-queue run completes, and the check still catches a run
whose engine time does not add up. Independently of the check, an observer
process samples the whole system (central queue + every engine) every
``OBSERVE_S`` and finds mean number in system = arrival rate x mean sojourn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from sim import api
from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.engine.records import RequestTable
from sim.errors import InvariantError
from sim.metrics.invariants import check_run
from sim.scenario import load_scenario
from sim.serving.cluster import Cluster, ClusterConfig
from sim.serving.pool import Pool
from sim.serving.raw_result import RawResult
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, Simulation
from sim.workload.arrivals import PoissonArrival, arrival_times_s
from sim.workload.generate import RequestArrays

REPLICAS = Path(__file__).resolve().parent.parent / "scenarios" / "replicas.yaml"
NUM_REPLICAS, MAX_NUM_SEQS, NUM_REQUESTS = 2, 4, 300
# Per request ~30 decode steps of ~2 + 4 x 0.7 ms: ~0.15 s, 4 at a time on each of
# 2 replicas, ~50 requests/s served; 200/s arriving keeps a queue standing.
RATE_PER_S = 200.0
OBSERVE_S = 1e-3  # the observer's sampling period, s
COST = LinearCost(
    step_overhead_s=2e-3, per_prefill_token_s=3e-5, per_decode_seq_s=7e-4, per_context_token_s=1e-7
)


def test_overloaded_central_queue_run_completes() -> None:
    """The repro: ``servesim run scenarios/replicas.yaml --set cluster.router=central_queue
    --set workload.arrival.rate_per_s=200`` raised ``littles_law`` on main."""
    scenario = load_scenario(
        REPLICAS,
        [
            "cluster.router=central_queue",
            "workload.arrival.rate_per_s=200",
            "workload.num_requests=1000",  # (4,000 in the file: the queue stands by 1,000)
        ],
    )
    result = api.run(scenario)
    requests = result.requests
    assert len(requests) == 1000 and requests["finish_s"].notna().all()
    # A standing queue: the mean request waited in the central queue over a second.
    assert (requests["pulled_s"] - requests["ready_s"]).mean() > 1.0


def _observed_run() -> tuple[RawResult, float]:
    """An overloaded central-queue run of ``NUM_REQUESTS`` and the time-average number
    in the system (central queue + engines), sampled every ``OBSERVE_S`` by a SimPy
    process alongside it until the last request is done."""
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=ContinuousConfig(
                max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=1 << 20
            ).build,
            num_kv_blocks=10_000,
            block_size_tokens=16,
            max_model_len_tokens=1 << 20,
        ),
        cost=COST,
        frontend=NO_FRONTEND,  # ready_s = arrival_s: the system is the pool
        skip_ahead=False,  # every step an event: the cores' lists are current between them
    )
    rng = np.random.default_rng(5)
    arrival_s = arrival_times_s(
        PoissonArrival(rate_per_s=RATE_PER_S), rng, num_requests=NUM_REQUESTS
    )
    work = RequestArrays(
        arrival_s, rng.integers(1, 600, NUM_REQUESTS), rng.integers(1, 60, NUM_REQUESTS)
    )
    layout = Cluster(
        ClusterConfig(num_replicas=NUM_REPLICAS, router="central_queue"),
        np.random.default_rng(0),
    )
    simulation = Simulation(engine, layout)
    pool = simulation.layout
    assert isinstance(pool, Pool) and pool.queue is not None
    counts: list[int] = []

    def observe() -> Any:
        while simulation.num_done < NUM_REQUESTS:
            in_engines = sum(len(core.waiting) + len(core.running) for core in pool.cores)
            counts.append(len(cast(Any, pool.queue)) + in_engines)
            yield simulation.env.timeout(OBSERVE_S)

    simulation.env.process(observe())
    raw = simulation.run(cast(OpenLoop, work))
    # Sample k holds over [k, k+1) x OBSERVE_S; the last one reaches past the end.
    return raw, float(np.sum(counts)) * OBSERVE_S


@pytest.fixture(scope="module")
def observed() -> tuple[RawResult, float]:
    return _observed_run()


def test_littles_law_holds_for_the_whole_system_by_hand(observed: tuple[RawResult, float]) -> None:
    raw, observed_area = observed
    requests = raw.requests
    ready = requests["ready_s"].to_numpy()
    finish = requests["engine_finish_s"].to_numpy()
    assert np.isfinite(finish).all()
    # A standing queue: most requests waited in the central queue.
    queued_s = requests["pulled_s"].to_numpy() - ready
    assert (queued_s > 0).mean() > 0.8 and queued_s.mean() > 0.5
    # Little over [0, T], T the last finish (the first arrival is at ~0, the system
    # empty before): L = (1/T) x integral of N(t) dt, lambda = n / T, W = mean sojourn.
    end_s = float(finish.max())
    little = (NUM_REQUESTS / end_s) * float((finish - ready).mean())
    # The check's sampling error: each entry and exit moves the sampled integral by
    # at most one period, plus the last sample's overhang (one period).
    tolerance = (2 * NUM_REQUESTS + 1) * OBSERVE_S / end_s
    assert abs(observed_area / end_s - little) <= tolerance
    assert little > 2 * NUM_REPLICAS * MAX_NUM_SEQS  # the queue, not the engines, dominates


def test_the_check_passes_the_run_and_catches_broken_accounting(
    observed: tuple[RawResult, float],
) -> None:
    raw, _ = observed
    records = raw.records
    assert isinstance(records, RequestTable)
    check_run(records, raw.series, None, 10_000)
    # Mutant 1: engine time counted from the central queue's entry (main's bug):
    # queue time the engines' samples never saw.
    columns = {name: records[name] for name in records.columns if name != "rejection_reason"}
    wrong = RequestTable({**columns, "pulled_s": records["ready_s"]}, dict(records.rejections))
    with pytest.raises(InvariantError, match="littles_law"):
        check_run(wrong, raw.series, None, 10_000)
    # Mutant 2: a request finished in an engine though no replica ever pulled it.
    never = records["pulled_s"].copy()
    never[0] = np.nan
    wrong = RequestTable({**columns, "pulled_s": never}, dict(records.rejections))
    with pytest.raises(InvariantError, match="finished, never pulled"):
        check_run(wrong, raw.series, None, 10_000)
    # Mutant 3: every engine sample misses one running request while the queue stands.
    series = dict(raw.series)
    series["num_running"] = np.maximum(series["num_running"] - 1, 0)
    with pytest.raises(InvariantError, match="littles_law"):
        check_run(records, series, None, 10_000)
