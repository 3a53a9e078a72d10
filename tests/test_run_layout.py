"""A measured run must have the scenario's parallel layout (issue 41): its recorded
``data_parallel_size`` is the scenario's replicas, ``tensor_parallel_size`` its
``parallelism``, and vLLM's ``enable_expert_parallel`` (experts over dp x tp GPUs) the
kernel cost's ``expert_parallel_size``. A DP 2 run replayed on one replica gets half
the engines it had: its "errors" say nothing about the simulator. ``validate`` and
``calibrate --from-run --scenario`` refuse it in one line (``sim.validation.match``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from calibration.compare_measured import load_measured
from sim.cli import main
from sim.errors import ConfigError
from sim.hardware.specs import model_preset
from sim.scenario import load_scenario
from sim.validation.fit_runs import replay_runs
from sim.validation.importers import import_run
from sim.validation.match import engine_mismatches

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "validation/public/llmservingsim/bench/examples"


def _run_folder(folder: Path, **engine_kwargs: Any) -> Path:
    """An LLMServingSim vLLM run of two requests whose meta.json records ``engine_kwargs``."""
    folder.mkdir()
    rows = [
        {"input_toks": 100, "output_toks": 10, "queued_ts": 0.0, "scheduled_ts": 0.0,
         "first_token_ts": 0.05, "last_token_ts": 0.5},
        {"input_toks": 100, "output_toks": 5, "queued_ts": 0.07, "scheduled_ts": 0.15,
         "first_token_ts": 0.17, "last_token_ts": 0.37},
    ]  # fmt: skip
    (folder / "requests.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    meta = {"model": "llama-3-8b", "engine_kwargs": engine_kwargs}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def _scenario(tmp_path: Path, run: Path, num_replicas: int = 1) -> Path:
    """A scenario of ``run``'s requests on ``num_replicas`` one-GPU replicas."""
    import_run(run).write(tmp_path / f"imported-{run.name}")
    doc: dict[str, Any] = {
        "name": "layout",
        "seed": 0,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "linear", "step_overhead_s": 0.05},
        "scheduler": {"kind": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 2048},
        "workload": {
            "kind": "trace",
            "format": "csv",
            "path": str(tmp_path / f"imported-{run.name}" / "trace.csv"),
        },
    }
    if num_replicas > 1:
        doc["cluster"] = {"num_replicas": num_replicas}
    path = tmp_path / f"layout-{num_replicas}.yaml"
    path.write_text(json.dumps(doc))
    return path


def _validate(scenario: Path, run: Path, out: Path) -> int:
    args = ["validate", str(scenario), "--assume-device", "h100", "--measured", str(run)]
    return main([*args, "--out", str(out)])


def test_validate_refuses_a_dp2_run_against_one_replica_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_folder(tmp_path / "dp2", data_parallel_size=2)
    one = _scenario(tmp_path, run)
    assert _validate(one, run, tmp_path / "v") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "data_parallel_size 2 measured, cluster.num_replicas 1 in the scenario" in line
    assert "Traceback" not in line


def test_validate_accepts_the_run_on_as_many_replicas_as_it_had_ranks(tmp_path: Path) -> None:
    dp2 = _run_folder(tmp_path / "dp2", data_parallel_size=2)
    assert _validate(_scenario(tmp_path, dp2, num_replicas=2), dp2, tmp_path / "v2") == 0
    dp1 = _run_folder(tmp_path / "dp1", data_parallel_size=1, tensor_parallel_size=1)
    assert _validate(_scenario(tmp_path, dp1), dp1, tmp_path / "v1") == 0


def test_calibrate_with_a_scenario_refuses_a_run_of_another_layout(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "tp2", tensor_parallel_size=2, data_parallel_size=2)
    one = _scenario(tmp_path, run)
    with pytest.raises(ConfigError) as refused:
        replay_runs([str(run)], model_preset("llama-3-8b"), None, str(one), "multipliers")
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"--from-run {run}")
    assert "tensor_parallel_size 2 measured, parallelism.tensor_parallel_size 1" in message
    assert "data_parallel_size 2 measured, cluster.num_replicas 1" in message
    two = _scenario(tmp_path, _run_folder(tmp_path / "dp2", data_parallel_size=2), 2)
    (fit_run,) = replay_runs(
        [str(tmp_path / "dp2")], model_preset("llama-3-8b"), None, str(two), "multipliers"
    ).runs
    assert fit_run.scenario.cluster is not None and fit_run.scenario.cluster.num_replicas == 2


def test_the_public_dp2_ep2_run_matches_its_scenario_and_no_other_expert_layout() -> None:
    """vLLM's enable_expert_parallel at dp 2, tp 1 spreads the experts over 2 GPUs:
    the shipped scenario's cost.expert_parallel_size 2."""
    scenario = load_scenario(ROOT / "scenarios/public/rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml")
    run = load_measured(EXAMPLES / "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507")
    recorded = run.summary["engine_settings"]
    assert (recorded["data_parallel_size"], recorded["expert_parallel_size"]) == (2, 2)
    assert engine_mismatches(scenario, recorded) == []
    no_experts = {**recorded, "expert_parallel_size": 1}
    assert engine_mismatches(scenario, no_experts) == [
        "expert_parallel_size 1 measured, cost.expert_parallel_size 2 in the scenario"
    ]
