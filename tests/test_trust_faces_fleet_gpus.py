"""A scenario with a ``cluster:`` holds every replica's GPUs: a run's summary counts
them all, as a sweep's table does, and a sweep's cost per request and capacity's fleet
are priced by all of them, not by one replica's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim import api
from sim.cli import main
from sim.hardware.specs import model_preset
from sim.planning.sweep import load_sweep, run_sweep
from sim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_a_scenario_counts_every_replicas_gpus() -> None:
    # 4 replicas of TP2; with disaggregation 1 prefill + 3 decode replicas of TP2.
    scenario = load_scenario(SCENARIOS / "replicas.yaml", ["parallelism.tensor_parallel_size=2"])
    assert scenario.num_gpus == 4 * 2
    split = load_scenario(
        SCENARIOS / "replicas.yaml",
        [
            "parallelism.tensor_parallel_size=2",
            "cluster.num_replicas=4",
            "cluster.disaggregation.num_prefill_replicas=1",
            "cluster.disaggregation.num_decode_replicas=3",
        ],
    )
    assert split.num_gpus == 4 * 2


def test_a_replicated_runs_summary_counts_every_replicas_gpus() -> None:
    # 2 replicas of TP2: summary.json's num_gpus is the deployment's 4 GPUs, as the
    # sweep's table says; one replica's layout stays in its tensor and pipeline sizes.
    scenario = load_scenario(
        SCENARIOS / "replicas.yaml",
        [
            "parallelism.tensor_parallel_size=2",
            "cluster.num_replicas=2",
            "workload.num_requests=20",
        ],
    )
    result = api.run(scenario)
    summary = result.summary
    assert summary["num_gpus"] == 2 * 2 == scenario.num_gpus
    assert (summary["tensor_parallel_size"], summary["pipeline_parallel_size"]) == (2, 1)
    # Weights split over one replica's 2 GPUs, not over the deployment's 4.
    weight_bytes = model_preset("llama-3-8b").weight_bytes
    assert summary["weight_gb_per_gpu"] == pytest.approx(weight_bytes / 2 / 1e9)
    assert "on 2 replicas of 2x h100" in repr(result)


def test_a_sweep_prices_every_replica(tmp_path: Path) -> None:
    # A light load (1 req/s for 40 requests): one replica and two serve the same
    # requests at the same throughput, so two replicas hold twice the GPU-hours per
    # 1,000 requests (the cost per request doubles; nothing is gained at this load).
    sweep = {
        "scenario": str(SCENARIOS / "replicas.yaml"),
        "overrides": {"workload.num_requests": 40, "workload.arrival.rate_per_s": 1.0},
        "grid": {"cluster.num_replicas": [1, 2]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    table = run_sweep(load_sweep(path), tmp_path / "out", jobs=1).table
    rows = {int(r["cluster.num_replicas"]): r for _, r in table.iterrows()}
    assert rows[1]["num_gpus"] == 1 and rows[2]["num_gpus"] == 2
    one, two = rows[1], rows[2]
    assert one["request_throughput"] == pytest.approx(two["request_throughput"], rel=0.05)
    ratio = two["gpu_hours_per_1k_requests"] / one["gpu_hours_per_1k_requests"]
    assert ratio == pytest.approx(2.0, rel=0.05)


def test_a_capacitys_fleet_holds_every_replicas_gpus(tmp_path: Path) -> None:
    # replicas.yaml: a unit is 4 replicas of 1 GPU, and its capacity is the 4
    # replicas' together; ceil(R / capacity) units hold 4 GPUs each.
    out = tmp_path / "capacity"
    code = main(
        [
            "capacity",
            str(SCENARIOS / "replicas.yaml"),
            "--slo",
            "ttft_median_ms=300",
            "--num-requests",
            "200",
            "--seeds",
            "1",
            "--max-sims",
            "8",
            "--rel-width",
            "0.5",
            "--target-rate",
            "100",
            "-q",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    fleet = json.loads((out / "capacity.json").read_text())["fleet"]
    assert fleet["num_gpus"] == 4 * fleet["num_replicas"]
    assert fleet["usd_per_hour"] == pytest.approx(fleet["num_gpus"] * fleet["gpu_price_per_hour"])
