"""Data-parallel ranks that step together (``cluster.lockstep``, ``sim.serving.lockstep``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from pydantic import ValidationError

from sim import api
from sim.scenario import load_scenario, scenario_from_dict
from sim.serving.cluster import ClusterConfig
from sim.serving.disagg import DisaggregationConfig

SCENARIO = (
    Path(__file__).parents[1] / "scenarios" / "public" / "rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml"
)


def run(lockstep: bool, trace: Path | None = None) -> pd.DataFrame:
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["cluster"]["lockstep"] = lockstep
    doc["workload"]["path"] = str(trace or SCENARIO.parent / doc["workload"]["path"])
    return api.run(scenario_from_dict(doc, "lockstep.yaml")).steps


def test_lockstep_defaults_off_and_refuses_disaggregation() -> None:
    assert ClusterConfig().lockstep is False
    split = DisaggregationConfig(num_prefill_replicas=1, num_decode_replicas=1)
    with pytest.raises(ValidationError, match="lockstep is for one pool"):
        ClusterConfig(lockstep=True, disaggregation=split)


def test_ranks_busy_together_share_every_step_boundary() -> None:
    steps = run(lockstep=True)
    a = steps[steps["replica"] == 0]
    b = steps[steps["replica"] == 1]
    assert len(a) > 100 and len(b) > 100
    # A step of one rank either coincides with a step of the other or runs while
    # the other is idle: never a partial overlap.
    starts_b = dict(zip(b["start_s"], b["end_s"], strict=True))
    for start, end in zip(a["start_s"], a["end_s"], strict=True):
        if start in starts_b:
            assert starts_b[start] == end
        else:
            overlap = (b["start_s"] < end) & (b["end_s"] > start)
            assert not overlap.any()
    assert len(set(a["start_s"]) & set(b["start_s"])) > 100


def test_a_joint_step_lasts_the_slower_ranks_step() -> None:
    free = run(lockstep=False)
    together = run(lockstep=True)
    busy_free = (free["end_s"] - free["start_s"]).sum()
    busy_together = (together["end_s"] - together["start_s"]).sum()
    assert busy_together > busy_free  # waiting for the slower rank costs time
    joint = together.groupby("start_s")["end_s"].nunique()
    assert (joint == 1).all()  # one end per joint step


def test_lockstep_without_a_peer_is_the_rank_alone(tmp_path: Path) -> None:
    # One request: the other rank stays idle (its dummy batch is not priced),
    # so the busy rank runs as it would alone, step for step.
    trace = tmp_path / "one.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens\n0.0,3000,20\n")
    free = run(lockstep=False, trace=trace)
    together = run(lockstep=True, trace=trace)
    assert set(together["replica"]) == {0}
    assert len(free) == len(together) > 1
    np.testing.assert_allclose(
        np.sort(together["end_s"].to_numpy()), np.sort(free["end_s"].to_numpy()), rtol=1e-9
    )


def test_lockstep_ranks_plan_ahead_as_replicas_do() -> None:
    # vLLM 0.19 keeps async scheduling with data parallelism (its DP padding is
    # agreed over Gloo then): lockstep or not, the run plans one step ahead.
    root = Path(__file__).resolve().parent.parent
    path = root / "scenarios" / "public" / "rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml"
    scenario = load_scenario(path)
    assert scenario.cluster is not None and scenario.cluster.lockstep
    assert scenario.async_scheduling is True
    free = load_scenario(path, ["cluster.lockstep=false"])
    assert free.async_scheduling is True
