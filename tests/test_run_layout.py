"""A measured run must have the scenario's parallel layout (issue 41): its recorded
``data_parallel_size`` is the scenario's replicas, ``tensor_parallel_size`` its
``parallelism``, and vLLM's ``enable_expert_parallel`` (experts over dp x tp GPUs) the
kernel cost's ``expert_parallel_size``. A DP 2 run replayed on one replica gets half
the engines it had: its "errors" say nothing about the simulator. ``validate`` and
``calibrate --from-run --scenario`` refuse it in one line (``sim.validation.match``).

A ``servesim measure`` folder records its layout too: the reference engine's (one
process, TP 1), or what ``measure --endpoint --server-setting`` was told of the server,
each field not told ``unknown``; an unknown field (or a folder older than the record)
is a one-line caveat naming the folder and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_endpoint_folder import SCENARIO as TINY
from test_endpoint_folder import WORK, stopped_run

from calibration.compare_measured import load_measured
from sim.cli import main
from sim.cli.endpoint_options import server_setting
from sim.errors import ConfigError
from sim.hardware.specs import model_preset
from sim.scenario import load_scenario
from sim.validation.endpoint import EndpointOptions, endpoint_run
from sim.validation.fit_runs import load_measured_run, replay_runs
from sim.validation.importers import import_run
from sim.validation.match import (
    LAYOUT_SETTINGS,
    UNKNOWN,
    RunFacts,
    check_run,
    engine_mismatches,
    told_settings,
)

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


def _scenario(
    tmp_path: Path, run: Path, num_replicas: int = 1, tensor_parallel_size: int = 1
) -> Path:
    """A scenario of ``run``'s requests on ``num_replicas`` replicas of
    ``tensor_parallel_size`` GPUs."""
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
    if tensor_parallel_size > 1:
        doc["parallelism"] = {"tensor_parallel_size": tensor_parallel_size}
    path = tmp_path / f"layout-{num_replicas}-tp{tensor_parallel_size}.yaml"
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


def _measure_folder(tmp_path: Path, settings: dict[str, Any] | None) -> tuple[Path, Path]:
    """A ``servesim measure`` folder of ``_run_folder``'s two requests on an H100 whose
    summary records ``settings`` as its engine settings (``None``: a folder written
    before measure recorded any), and its scenario file (one replica, TP 1)."""
    run = _run_folder(tmp_path / "vllm")
    folder = tmp_path / "measured"
    folder.mkdir()
    load_measured_run(run).requests.to_parquet(folder / "requests.parquet")
    summary: dict[str, Any] = {"mode": "measured", "model": "llama-3-8b", "hardware": "h100"}
    if settings is not None:
        summary["engine_settings"] = settings
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder, _scenario(tmp_path, run)


REFERENCE = dict.fromkeys(LAYOUT_SETTINGS, 1)  # calibration.measure.REFERENCE_LAYOUT


def _calibrate(folder: Path, scenario: Path) -> list[str]:
    """calibrate --from-run ``folder`` --scenario ``scenario``'s replays' caveats."""
    return replay_runs(
        [str(folder)], model_preset("llama-3-8b"), None, str(scenario), "multipliers"
    ).caveats


def test_calibrate_refuses_a_measure_folder_of_another_layout_in_one_line(
    tmp_path: Path,
) -> None:
    """Seen failing on main: calibrate read no setting of a measure folder at all."""
    folder, one = _measure_folder(tmp_path, REFERENCE)
    assert _calibrate(folder, one) == []  # its own layout: no refusal, no caveat
    two = _scenario(tmp_path, tmp_path / "vllm", tensor_parallel_size=2)
    with pytest.raises(ConfigError) as refused:
        _calibrate(folder, two)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"--from-run {folder}")
    assert "tensor_parallel_size 1 measured, parallelism.tensor_parallel_size 2" in message


def test_validate_refuses_a_measure_folder_of_another_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = _measure_folder(tmp_path, REFERENCE)
    two = _scenario(tmp_path, tmp_path / "vllm", num_replicas=2)
    assert _validate(two, folder, tmp_path / "v") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "data_parallel_size 1 measured, cluster.num_replicas 2 in the scenario" in line


def test_an_old_measure_folder_loads_with_a_caveat_naming_it_and_the_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seen failing on main: a folder without the record was taken as the scenario's
    layout, silently."""
    folder, one = _measure_folder(tmp_path, None)
    (caveat,) = _calibrate(folder, one)
    assert "\n" not in caveat and caveat.startswith(f"--from-run {folder}:")
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        assert key in caveat
    assert "parallelism.tensor_parallel_size 1" in caveat and "cluster.num_replicas 1" in caveat
    assert _validate(one, folder, tmp_path / "v") == 0
    warnings = [
        line for line in capsys.readouterr().err.splitlines() if "servesim: warning:" in line
    ]
    (warning,) = [line for line in warnings if "does not record" in line]
    assert f"--measured {folder}: the run does not record its tensor_parallel_size" in warning
    report = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert any(c.startswith(f"--measured {folder}:") for c in report["caveats"])


def test_a_partly_recorded_layout_names_only_the_unknown_fields(tmp_path: Path) -> None:
    told = {**REFERENCE, "data_parallel_size": UNKNOWN}
    folder, one = _measure_folder(tmp_path, told)
    (caveat,) = _calibrate(folder, one)
    assert "data_parallel_size" in caveat and "cluster.num_replicas 1" in caveat
    assert "tensor_parallel_size" not in caveat and "pipeline_parallel_size" not in caveat


def test_an_endpoint_run_records_what_it_was_told_and_the_rest_unknown(tmp_path: Path) -> None:
    opts = EndpointOptions(url="http://h:9/v1", server_settings={"tensor_parallel_size": 2})
    run = endpoint_run(load_scenario(TINY), WORK, stopped_run(), opts)
    recorded = run.summary["engine_settings"]
    assert recorded["tensor_parallel_size"] == 2
    assert recorded["data_parallel_size"] == recorded["pipeline_parallel_size"] == UNKNOWN
    run.write(tmp_path / "m")
    # calibrate reads an endpoint folder by its run.json: the same record is there.
    assert load_measured_run(tmp_path / "m").meta["engine_settings"] == recorded
    facts = RunFacts.from_summary(run.requests, run.summary)
    one = load_scenario(TINY, ["workload.duration_s=5"])
    with pytest.raises(ConfigError, match="tensor_parallel_size 2 measured, parallelism"):
        check_run(one, facts, TINY.parent, "--measured m")
    two = load_scenario(TINY, ["parallelism.tensor_parallel_size=2"])
    assert engine_mismatches(two, recorded) == []


def test_told_settings_in_vllm_names() -> None:
    assert server_setting("tensor-parallel-size=2") == ("tensor_parallel_size", 2)
    assert server_setting("enable_expert_parallel=True") == ("enable_expert_parallel", True)
    assert server_setting("vllm_version=0.19") == ("vllm_version", "0.19")
    told = told_settings({"data_parallel_size": 2, "tensor_parallel_size": 1,
                          "enable_expert_parallel": True, "max_num_seqs": 64})  # fmt: skip
    assert told["expert_parallel_size"] == 2 and told["max_num_seqs"] == 64
    assert told["pipeline_parallel_size"] == UNKNOWN
    # Experts spread over dp x tp GPUs, dp not told: how many is not known either.
    assert told_settings({"enable_expert_parallel": True})["expert_parallel_size"] == UNKNOWN
    with pytest.raises(ConfigError, match="--server-setting gpu_memory_utilization: not a"):
        told_settings({"gpu_memory_utilization": 0.9})


def test_server_setting_applies_with_endpoint_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["measure", str(TINY), "--server-setting", "tensor_parallel_size=2"]
    assert main([*argv, "--out", str(tmp_path / "m")]) == 2
    assert "--server-setting applies with --endpoint" in capsys.readouterr().err
