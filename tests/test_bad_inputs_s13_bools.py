"""Session 13: true is not a number. pydantic's lax mode read a true or false given where a
number is wanted as 1 or 0 (``--set workload.arrival.rate_per_s=true`` ran at 1 request
per second, ``--set seed=true`` ran seed 1, a YAML ``max_num_seqs: yes`` was 1). Every
configuration model (``sim.config.Frozen``) now refuses it in one line naming the field;
a field that takes a bool still does."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from calibration.compare_measured import PROBE_POINTS, speed_ratio
from sim.cost.base import StepShape
from sim.cost.fitted_cpu import load_engine_cpu_artifact
from sim.cost.kernels.artifact import load_kernel_artifact
from sim.cost.linear import LinearCost
from sim.errors import ConfigError
from sim.hardware.specs import HF_CONFIGS, from_hf_config
from sim.planning.plan_file import PlanConfig
from sim.scenario import load_scenario
from sim.validation.formats.guidellm import read_guidellm
from sim.validation.formats.otlp import read_otlp
from sim.validation.match import engine_mismatches
from sim.validation.runs import ImportedRun, load_run
from tests.cli_errors import one_line_error, run_error

CHAT = "scenarios/chat.yaml"


@pytest.mark.parametrize(
    ("setting", "field", "value"),
    [
        ("workload.arrival.rate_per_s=true", "workload.arrival.rate_per_s", "true"),
        ("seed=true", "seed", "true"),
        ("scheduler.max_num_seqs=yes", "scheduler.max_num_seqs", "true"),  # YAML 1.1's yes
        ("parallelism.tensor_parallel_size=true", "parallelism.tensor_parallel_size", "true"),
        ("workload.num_requests=false", "workload.num_requests", "false"),
    ],
)
def test_a_bool_set_where_a_number_is_wanted_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, setting: str, field: str, value: str
) -> None:
    message = run_error(capsys, tmp_path, CHAT, "--set", setting)
    assert message.startswith(f"{CHAT}: {field}"), message
    assert message.endswith(f"not {value}") or f"not {value};" in message, message


def test_a_bool_in_a_scenario_file_where_a_number_is_wanted_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(Path(CHAT).read_text())
    doc["workload"]["prompt_tokens"] = {"kind": "fixed", "tokens": 100}
    doc["workload"]["priority"] = {"kind": "classes", "weights": [0.5, True]}
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    message = run_error(capsys, tmp_path, str(scenario))
    assert (
        message
        == f"{scenario}: workload.priority.weights.1: Input should be a valid number, not true"
    )


def test_a_bool_key_where_a_number_is_wanted_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sets = ["scheduler.mode=weighted", "scheduler.weights={0: 4, true: 1}"]
    message = run_error(
        capsys,
        tmp_path,
        "scenarios/priority.yaml",
        *[arg for value in sets for arg in ("--set", value)],
    )
    assert message.startswith("scenarios/priority.yaml: scheduler.weights.true:"), message


def test_a_sweep_file_s_bool_seeds_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"scenario: {Path(CHAT).resolve()}\nseeds: true\n")
    message = one_line_error(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "o"), "-q"])
    assert message.startswith(f"{sweep}: seeds: "), message
    assert "not true" in message, message


def test_fields_that_take_a_bool_still_do() -> None:
    scenario = load_scenario(
        CHAT,
        [
            "engine.enable_prefix_caching=true",
            "scheduler.chunked_prefill=false",
            "scheduler.max_num_batched_tokens=8192",
        ],
    )
    assert scenario.engine.enable_prefix_caching is True
    assert scenario.scheduler.chunked_prefill is False
    assert PlanConfig(chunked_prefill=[True, False]).chunked_prefill == [True, False]
    # A number where a number is wanted is unchanged, a whole one in a float field too.
    assert load_scenario(CHAT, ["workload.arrival.rate_per_s=3"]).workload.arrival.rate_per_s == 3


# Measured files are read without pydantic: a JSON true there was 1 too (bool is an int in
# Python). Each reader now refuses it in one line naming the file and field.
IMPORTS = Path(__file__).resolve().parent / "data" / "imports"


def _guidellm(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    document = json.loads((IMPORTS / "guidellm_report.json").read_text())
    change(document)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    return path


def _first_timings(document: dict[str, Any]) -> dict[str, Any]:
    timings: dict[str, Any] = document["benchmarks"][0]["requests"]["successful"][0]["info"]
    return timings["timings"]


def test_a_guidellm_targeted_start_of_true_is_refused(tmp_path: Path) -> None:
    path = _guidellm(tmp_path, lambda d: _first_timings(d).update(targeted_start=True))
    with pytest.raises(ConfigError, match=r"info.timings.targeted_start must be .*got True$"):
        read_guidellm(path)


@pytest.mark.parametrize("field", ["prefix_tokens", "prefix_count"])
def test_a_guidellm_prefix_of_true_is_refused(tmp_path: Path, field: str) -> None:
    data = {"prefix_tokens": 64, "prefix_count": 2} | {field: True}
    path = _guidellm(tmp_path, lambda d: d.setdefault("config", {}).update(data=data))
    with pytest.raises(ConfigError, match=rf"benchmarks\[0\]: {field} must be .*got True$"):
        read_guidellm(path)


def test_an_otlp_start_time_of_true_is_refused(tmp_path: Path) -> None:
    first = json.loads((IMPORTS / "vllm_otlp_spans.jsonl").read_text().splitlines()[0])
    first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = True
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(first))
    with pytest.raises(ConfigError, match=r"spans\[0\]: startTimeUnixNano must be .*got True$"):
        read_otlp(path)


@pytest.mark.parametrize("field", ["decoder_sparse_step", "shared_expert_intermediate_size"])
def test_a_config_json_true_where_a_count_is_wanted_is_refused(field: str) -> None:
    # decoder_sparse_step true was read as 1 (every layer MoE); the shared expert's true
    # was refused without the field's name.
    config = {**HF_CONFIGS["qwen3-30b-a3b"], field: True}
    with pytest.raises(ConfigError, match=rf"^cfg.json: field '{field}' must be a positive"):
        from_hf_config(config, "q", "cfg.json")


def test_a_probe_time_of_true_is_skipped_as_other_unreadable_ones() -> None:
    # summary.json's probe_s: a true was 1 second, moving the machine-drift ratio.
    cost = LinearCost(step_overhead_s=0.002, per_prefill_token_s=1e-4, per_decode_seq_s=5e-4)
    shape = StepShape.build([], list(PROBE_POINTS["decode 8 x 160"][1]))
    good = {"decode 8 x 160": 3.0 * cost.step_s(shape)}
    assert speed_ratio([{"prefill 128": True}, good], cost) == pytest.approx(3.0)


V1_ARTIFACT = Path("tests/data/engine_cpu/format-1-rtx4090-llama-3.1-8b.json")
KERNELS = Path("sim/cost/kernels/artifacts/a100_sxm-vllm-0.14.0-llama-3.1-8b.json.gz")


def _kernels(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    data = json.loads(gzip.decompress(KERNELS.read_bytes()))
    change(data)
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps(data))
    return path


def test_a_kernel_artifact_s_format_version_of_true_is_refused(tmp_path: Path) -> None:
    path = _kernels(tmp_path, lambda d: d.update(format_version=True))
    with pytest.raises(ConfigError, match=r"kernels.json: format_version True, this servesim"):
        load_kernel_artifact(path)


@pytest.mark.parametrize("column", ["m", "latency_s"])
def test_a_kernel_table_s_true_is_refused(tmp_path: Path, column: str) -> None:
    path = _kernels(tmp_path, lambda d: d["tables"]["gemm"][column].__setitem__(0, True))
    with pytest.raises(ConfigError, match=rf"kernels.json: table gemm: {column} .*true"):
        load_kernel_artifact(path)


def test_an_engine_cpu_artifact_s_format_version_of_true_is_refused(tmp_path: Path) -> None:
    # A format 1 artifact is read as format 2: its true was format 1.
    data = json.loads(V1_ARTIFACT.read_text()) | {"format_version": True}
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"cpu.json: format_version True, this servesim"):
        load_engine_cpu_artifact(path)


def test_a_run_s_recorded_setting_of_true_is_not_1() -> None:
    # A run.json's engine tensor_parallel_size true matched the scenario's 1 (True == 1).
    found = engine_mismatches(load_scenario(CHAT), {"tensor_parallel_size": True})
    assert found == [
        "tensor_parallel_size True measured, parallelism.tensor_parallel_size 1 in the scenario"
    ]


@pytest.mark.parametrize("field", ["num_failed", "num_incomplete", "num_cached_tokens"])
def test_an_imported_run_s_count_of_true_is_refused(tmp_path: Path, field: str) -> None:
    # run.json's num_failed true was one failed request (int(True) is 1).
    run = read_guidellm(IMPORTS / "guidellm_report.json")
    ImportedRun(run.requests, {**run.meta, field: True}).write(tmp_path / "run")
    with pytest.raises(ConfigError, match=rf"run.json: {field} must be a number, got True$"):
        load_run(tmp_path / "run")
