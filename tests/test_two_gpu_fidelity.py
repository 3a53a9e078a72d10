"""What vLLM does on every step of a tensor-parallel replica besides the layers'
all-reduces (issue 41, item 1): the vocab-parallel embedding's all-reduce and the
LM head's logits all-gathered (vLLM 0.19: ``VocabParallelEmbedding.forward``,
``LogitsProcessor._gather_logits``), on every cost route, a per-layer profile's
included (it times one GPU's shard, without them).

Expected figures by hand from NCCL's constants (src/graph/tuning.cc, as in
tests/test_collectives.py): over ``pcie5-rtxpro6000`` (39.4 GB/s, PCI hops) a Simple
ring costs 8.4 us + hops x 5.7 us + bytes over its algorithm bandwidth; an LL ring
6.6 us + hops x 1.0 us at half the rate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_engine_cpu_parts import cpu_only_s

from sim import api
from sim.api.build import cost_model_for
from sim.cli import main
from sim.cost.base import StepShape
from sim.scenario import load_scenario, scenario_from_dict

PUBLIC = Path(__file__).parents[1] / "scenarios" / "public"
TP2_PROFILE = PUBLIC / "rtxpro6000_qwen3_32b_tp2_profile.yaml"
ONE_GPU_PROFILE = PUBLIC / "rtxpro6000_llama31_8b_profile.yaml"
US = 1e-6
BUS = 39.4e9  # pcie5-rtxpro6000, bytes/s
# Qwen3-32B: hidden 5120, vocabulary 151,936 (75,968 columns a GPU at tp 2), bf16.
HIDDEN, VOCAB_PER_GPU = 5120, 75_968


def _breakdown(capsys: pytest.CaptureFixture[str], scenario: Path, step: str) -> dict[str, Any]:
    assert main(["cost-breakdown", str(scenario), "--step", step, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_a_tp2_profile_step_pays_the_embedding_all_reduce_and_the_logits_all_gather(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _breakdown(capsys, TP2_PROFILE, "64d")
    # Embedding: 64 tokens x 5120 x 2 B = 655,360 B all-reduced; the Simple ring
    # (2 hops, each byte once over the link: 2 (n - 1) / n = 1) beats LL (half rate):
    # 8.4 + 2 x 5.7 = 19.8 us + 655,360 / 39.4e9 = 16.63 us -> 36.43 us.
    embedding_s = (8.4 + 2 * 5.7) * US + 64 * HIDDEN * 2 / BUS
    # Logits: 64 rows x 151,936 x 2 B = 19,447,808 B gathered; a ring all-gather on 2
    # GPUs (1 hop) receives the other half: 8.4 + 5.7 = 14.1 us + 9,723,904 / 39.4e9
    # = 246.8 us -> 260.9 us.
    logits_s = (8.4 + 5.7) * US + 64 * VOCAB_PER_GPU * 2 * 2 / 2 / BUS
    assert result["ops_ms"]["embedding_allreduce"] == pytest.approx(embedding_s * 1e3, rel=1e-9)
    assert result["ops_ms"]["logits_all_gather"] == pytest.approx(logits_s * 1e3, rel=1e-9)
    assert result["op_sources"]["logits_all_gather"] == "link"


def test_the_step_time_carries_them() -> None:
    # The step's price (what the simulation runs) is the breakdown's sum, these two
    # included: at 64 decodes they add 36.43 + 260.9 = 297.3 us (above).
    gpu = cost_model_for(load_scenario(TP2_PROFILE)).gpu  # type: ignore[attr-defined]
    shape = StepShape.build(decode_context_tokens=[1000] * 64)
    split = gpu.breakdown_s(shape)
    assert gpu.step_s(shape) == pytest.approx(sum(split.values()), rel=1e-9)
    added = split["embedding_allreduce"] + split["logits_all_gather"]
    assert added == pytest.approx(297.3 * US, rel=1e-3)


def test_one_gpu_has_neither(capsys: pytest.CaptureFixture[str]) -> None:
    result = _breakdown(capsys, ONE_GPU_PROFILE, "64d")
    assert "embedding_allreduce" not in result["ops_ms"]
    assert "logits_all_gather" not in result["ops_ms"]


# -- DP 2 x EP 2: lockstep ranks plan ahead (vLLM 0.19 keeps async scheduling with
# data parallelism and agrees each step's padding over Gloo on the CPU:
# config/vllm.py, disable_nccl_for_dp_synchronization; v1/worker/dp_utils.py).
EP_PROFILE = PUBLIC / "rtxpro6000_qwen3_30b_a3b_dp2_ep2_profile.yaml"


def _lockstep_run(tmp_path: Path, rows: str) -> Any:
    doc = yaml.safe_load(EP_PROFILE.read_text())
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens\n" + rows)
    doc["workload"]["path"] = str(trace)
    return api.run(scenario_from_dict(doc, "lockstep.yaml"))


def test_a_lockstep_step_hides_the_engine_cpu_behind_the_gpu(tmp_path: Path) -> None:
    # One request of 3,000 prompt tokens: the first joint step is rank 0's 2,048-token
    # prefill chunk alone. Async scheduling prices it non_overlapped + max(gpu, cpu)
    # (sim.cost.engine_cpu), not non_overlapped + cpu + gpu.
    steps = _lockstep_run(tmp_path, "0.0,3000,20\n").steps
    first = steps.sort_values("start_s").iloc[0]
    cost = cost_model_for(load_scenario(EP_PROFILE))
    shape = StepShape.build([(2048, 0)])
    gpu_s = cost.gpu.step_s(shape)  # type: ignore[attr-defined]
    config = load_scenario(EP_PROFILE).engine_cpu.config
    cpu_s = cpu_only_s(config, 1, 2048)
    expected_s = config.non_overlapped_s + max(gpu_s, cpu_s)
    assert first["end_s"] - first["start_s"] == pytest.approx(expected_s, rel=1e-9)
    assert expected_s < config.non_overlapped_s + gpu_s + cpu_s


def _first_step_start_s(result: Any, request_id: int) -> float:
    row = result.requests.set_index("request_id").loc[request_id]
    return float(row["ready_s"] + row["queue_s"])


def test_a_busy_rank_s_newcomer_joins_the_step_after_next(tmp_path: Path) -> None:
    # Requests 0 and 1 (3,000-token prompts) start both ranks at 0; request 2 arrives
    # 1 ms into joint step 0 (a 2,048-token prefill chunk: far longer) at a busy rank,
    # whose plan of step 1 was made when step 0 started: it runs first in step 2, as
    # with a single replica under async scheduling (synchronously: step 1).
    result = _lockstep_run(tmp_path, "0.0,3000,20\n0.0,3000,20\n0.001,100,5\n")
    starts = sorted(set(result.steps["start_s"]))
    assert _first_step_start_s(result, 2) == starts[2]


def test_an_idle_rank_s_newcomer_joins_the_next_step(tmp_path: Path) -> None:
    # Request 1 arrives 1 ms into step 0 at the idle rank, which runs its dummy batch
    # synchronously and plans after it (DPEngineCoreProc.run_busy_loop): step 1.
    result = _lockstep_run(tmp_path, "0.0,3000,20\n0.001,100,5\n")
    starts = sorted(set(result.steps["start_s"]))
    assert set(result.requests["replica"]) == {0, 1}
    assert _first_step_start_s(result, 1) == starts[1]
