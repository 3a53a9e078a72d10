"""validate refuses a measured run that is not its scenario's, listing every difference.

One check (``sim.validation.match``) for ``servesim measure`` runs (request
``i`` is the scenario's request ``i``) and imported runs (their own ids and
order); these tests build both kinds from the scenario's own requests and
change one thing at a time.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_validate import SCENARIO, _fake_measured_dir

from calibration.compare_measured import load_measured, validate
from sim.api import core_config_for, engine_settings
from sim.cli import main
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset
from sim.scenario import Scenario, load_scenario, scenario_from_dict
from sim.validation.formats.measure_dir import MeasureFolder
from sim.validation.match import (
    RunFacts,
    check_run,
    engine_mismatches,
    hardware_matches,
    imported_engine_settings,
    mismatches,
)
from sim.workload.generate import generate_open_loop

SETS = ["workload.duration_s=5"]


@pytest.fixture
def measured(tmp_path: Path) -> MeasureFolder:
    return load_measured(_fake_measured_dir(tmp_path, SETS))


def scenario(sets: list[str] = SETS) -> Scenario:
    return load_scenario(SCENARIO, sets)


def facts(run: MeasureFolder, **summary: object) -> RunFacts:
    return RunFacts.from_summary(run.requests, {**run.summary, **summary})


def differences(run: RunFacts, sets: list[str] = SETS, vouched: bool = True) -> list[str]:
    """What ``mismatches`` finds. ``vouched``: a run naming no model or no device is
    taken to be of the scenario's (as ``validate --assume-model/--assume-device``
    says), so tests of the other checks see only those."""
    s = scenario(sets)
    if vouched:
        unnamed = run.hardware is None and not run.device_name
        run = replace(
            run,
            model=run.model or s.model.name,
            hardware=s.hardware.name if unnamed else run.hardware,
        )
    return mismatches(s, run, SCENARIO.parent)


def own_requests(sets: list[str] = SETS) -> pd.DataFrame:
    """The scenario's requests as a table, in scenario order (ids 0, 1, 2, ...)."""
    s = scenario(sets)
    work = generate_open_loop(s.workload, np.random.default_rng(s.seed), SCENARIO.parent)  # type: ignore[arg-type]
    return pd.DataFrame(
        {
            "request_id": np.arange(len(work)),
            "num_prompt_tokens": work.num_prompt_tokens,
            "num_output_tokens": work.num_output_tokens,
        }
    )


# --- servesim measure runs ------------------------------------------------------------


def test_the_scenarios_own_run_matches(measured: MeasureFolder) -> None:
    run = facts(measured, model="tiny", hardware="cpu-2core")
    assert run.in_scenario_order and run.num_failed_unlisted == 0
    assert differences(run) == []


def test_another_seed_changes_the_lengths_request_by_request(measured: MeasureFolder) -> None:
    table = own_requests()
    prompts = table["num_prompt_tokens"].to_numpy().copy()
    scenario_prompt = int(prompts[2])
    prompts[2] += 5  # one request's prompt, hand-changed
    (found,) = differences(
        RunFacts(table.assign(num_prompt_tokens=prompts), in_scenario_order=True)
    )
    assert found == (
        f"prompt lengths differ in 1 of {len(table)} requests "
        f"(request 2: {scenario_prompt + 5} measured, {scenario_prompt} in the scenario)"
    )
    other_seed = differences(facts(measured), [*SETS, "seed=12345"])
    assert any("lengths differ" in f or "requests measured" in f for f in other_seed)


def test_a_longer_scenario_is_a_count_difference(measured: MeasureFolder) -> None:
    longer = differences(facts(measured), ["workload.duration_s=20"])
    expected = len(own_requests(["workload.duration_s=20"]))
    assert longer == [f"{len(measured.requests)} requests measured, {expected} in the scenario"]


def test_model_hardware_and_engine_settings_are_all_listed(measured: MeasureFolder) -> None:
    settings = {**measured.summary["engine_settings"], "max_num_seqs": 99}
    found = differences(
        facts(measured, model="smollm2-135m", hardware="h100", engine_settings=settings)
    )
    assert found == [
        "model 'smollm2-135m' measured, 'tiny' in the scenario",
        "hardware 'h100' measured, 'cpu-2core' in the scenario",
        "max_num_seqs 99 measured, 32 in the scenario",
    ]


def test_model_names_are_compared_through_the_aliases(measured: MeasureFolder) -> None:
    llama = load_scenario(SCENARIO, [*SETS, "model=llama-3-8b"])
    run = facts(measured, model="meta-llama/Llama-3.1-8B-Instruct")
    assert not any(f.startswith("model") for f in mismatches(llama, run, SCENARIO.parent))


def test_a_run_cut_short_may_hold_fewer_requests(measured: MeasureFolder) -> None:
    head = measured.requests.sort_values("request_id").head(3)
    cut = RunFacts.from_summary(head, {**measured.summary, "status": "time limit"})
    assert cut.partial and differences(cut) == []
    complete = RunFacts.from_summary(head, measured.summary)
    total = len(measured.requests)
    assert differences(complete) == [f"3 requests measured, {total} in the scenario"]
    # The first three are still checked request by request.
    longer = head.assign(num_output_tokens=head["num_output_tokens"] + 1)
    (found,) = differences(RunFacts(longer, partial=True, in_scenario_order=True))
    assert found.startswith("output lengths differ in 3 of 3 requests (request 0:")


def test_a_partial_run_may_not_hold_more_requests() -> None:
    table = own_requests()
    extra = pd.concat([table, table.tail(1).assign(request_id=len(table))], ignore_index=True)
    found = differences(RunFacts(extra, partial=True, in_scenario_order=True))
    assert found == [f"{len(extra)} requests measured, {len(table)} in the scenario"]


def test_request_ids_of_a_measure_run_must_be_the_scenarios() -> None:
    table = own_requests().assign(request_id=lambda t: t["request_id"] + 100)
    assert differences(RunFacts(table, in_scenario_order=True)) == [
        "request ids are not 0, 1, 2, ... as a measure run writes them"
    ]
    # The same rows from another tool: its ids are its own, the lengths match as values.
    assert differences(RunFacts(table)) == []


def test_a_measure_run_lists_its_failed_requests() -> None:
    # servesim measure --endpoint keeps failed requests as rows: no extra count.
    run = RunFacts.from_summary(own_requests(), {"mode": "measured", "num_failed": 2})
    assert run.num_failed_unlisted == 0 and differences(run) == []
    short = RunFacts.from_summary(own_requests().head(4), {"mode": "measured", "num_failed": 2})
    assert differences(short)[0].startswith("4 requests measured, ")


def test_the_error_is_one_line_and_lists_everything(measured: MeasureFolder) -> None:
    run = facts(measured, model="llama-3-70b", hardware="h100")
    with pytest.raises(ConfigError) as error:
        check_run(scenario([*SETS, "seed=777"]), run, SCENARIO.parent, "--measured x")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("--measured x is not a run of scenario validate_tiny_cpu: ")
    assert "model 'llama-3-70b'" in message and "hardware 'h100'" in message
    assert message.endswith(
        "(measure it again, or give the scenario and --set it was measured with)"
    )
    check_run(scenario(), facts(measured), SCENARIO.parent, "--measured x")  # no error


def test_validate_cli_refuses_a_mismatched_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fake_measured_dir(tmp_path, SETS)
    summary = json.loads((run / "summary.json").read_text())
    changed = {**summary, "model": "llama-3-70b", "hardware": "h100"}
    (run / "summary.json").write_text(json.dumps(changed))
    argv = ["validate", str(SCENARIO), "--measured", str(run), "--out", str(tmp_path / "v")]
    assert main([*argv, *(x for s in SETS for x in ("--set", s)), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "model 'llama-3-70b' measured, 'tiny' in the scenario" in err
    assert "hardware 'h100' measured, 'cpu-2core' in the scenario" in err


def test_validate_checks_the_second_run_too(measured: MeasureFolder, tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    other = load_measured(_fake_measured_dir(tmp_path / "b", SETS))
    other.summary["hardware"] = "h100"
    with pytest.raises(ConfigError, match=rf"--measured {other.path} is not a run of scenario"):
        validate(scenario(), measured, second=other, base_dir=SCENARIO.parent)


# --- imported runs ----------------------------------------------------------------------


def test_an_imported_run_counts_its_failed_requests_apart() -> None:
    table = own_requests()
    head = table.head(len(table) - 2)
    summary = {"format": "vllm-bench", "num_failed": 2}
    run = RunFacts.from_summary(head, summary)
    assert (run.num_failed_unlisted, run.in_scenario_order, run.partial) == (2, False, False)
    assert differences(run) == []  # listed + failed = the scenario's count; lengths unchecked
    one_failed = RunFacts.from_summary(head, {**summary, "num_failed": 1})
    assert differences(one_failed) == [
        f"{len(head)} requests measured (and 1 failed), {len(table)} in the scenario"
    ]


def test_an_imported_run_compares_lengths_as_sorted_values() -> None:
    table = own_requests()
    shuffled = table.iloc[np.random.default_rng(3).permutation(len(table))]
    assert differences(RunFacts(shuffled.reset_index(drop=True))) == []  # order is its own
    changed = table.assign(num_output_tokens=table["num_output_tokens"] * 0 + 1)
    found = differences(RunFacts(changed))
    differ = int(np.count_nonzero(np.sort(table["num_output_tokens"].to_numpy()) != 1))
    assert found == [f"output lengths differ ({differ} of {len(table)} sorted values)"]


def test_an_imported_device_name_is_compared_with_the_preset() -> None:
    table = own_requests()
    cpu_run = RunFacts.from_summary(table, {"device_name": "cpu"})
    assert differences(cpu_run) == []
    gpu_run = RunFacts.from_summary(table, {"device_name": "NVIDIA H100 80GB HBM3"})
    assert differences(gpu_run) == [
        "device 'NVIDIA H100 80GB HBM3' measured, 'cpu-2core' in the scenario"
    ]
    h100 = load_scenario(SCENARIO, [*SETS, "hardware=h100"])
    assert not any(f.startswith("device") for f in mismatches(h100, gpu_run, SCENARIO.parent))


@pytest.mark.parametrize(
    ("device", "preset", "matches"),
    [
        ("NVIDIA GeForce RTX 4090", "rtx-4090", True),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb", True),
        ("NVIDIA H100 PCIe", "h100-pcie", True),
        ("NVIDIA L40S", "l4", False),  # "l4" is inside "l40s", but no word of it
        ("NVIDIA L4", "l40s", False),
        ("cpu", "cpu-2core", True),
        ("cpu-2core", "cpu-2core", True),  # validate --assume-device with the preset's name
        ("cpu-8core", "cpu-2core", False),
        ("NVIDIA H100", "cpu-2core", False),
        ("cpu", "h100", False),
    ],
)
def test_device_names_against_presets(device: str, preset: str, matches: bool) -> None:
    assert hardware_matches(device, hardware_preset(preset)) is matches


def test_only_a_measure_run_names_a_preset_and_only_an_imported_one_a_device() -> None:
    table = own_requests()
    own = RunFacts.from_summary(
        table, {"mode": "measured", "hardware": "h100", "device_name": "Intel Xeon"}
    )
    assert (own.hardware, own.device_name) == ("h100", None)  # a CPU model is no preset
    other = RunFacts.from_summary(table, {"hardware": "h100", "device_name": "NVIDIA L4"})
    assert (other.hardware, other.device_name) == (None, "NVIDIA L4")
    assert RunFacts.from_summary(table, {"engine_settings": "junk"}).engine_settings is None


# --- engine settings and closed loops --------------------------------------------------


def test_engine_settings_differences_name_both_values() -> None:
    s = scenario()
    settings = engine_settings(s, core_config_for(s))
    assert engine_mismatches(s, settings) == []
    assert engine_mismatches(s, {}) == []  # recorded before the settings were
    other = {**settings, "max_num_seqs": 99, "async_scheduling": True, "unknown": 1}
    assert engine_mismatches(s, other) == [
        "max_num_seqs 99 measured, 32 in the scenario",
        "async_scheduling True measured, False in the scenario",
    ]


def test_a_closed_loop_is_checked_on_its_count_only() -> None:
    doc = {
        "name": "closed",
        "model": "tiny",
        "hardware": "cpu-2core",
        "workload": {
            "kind": "closed_loop",
            "num_users": 2,
            "num_requests": 6,
            "think_time_s": {"kind": "exponential", "mean_s": 1.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 16},
            "output_tokens": {"kind": "fixed", "tokens": 4},
        },
    }
    closed = scenario_from_dict(doc)
    table = pd.DataFrame(
        {"request_id": range(6), "num_prompt_tokens": [99] * 6, "num_output_tokens": [1] * 6}
    )
    assert (
        mismatches(
            closed, RunFacts(table, model="tiny", hardware="cpu-2core", in_scenario_order=True)
        )
        == []
    )
    assert mismatches(closed, RunFacts(table.head(5), model="tiny", hardware="cpu-2core")) == [
        "5 requests measured, 6 in the scenario"
    ]


# --- runs that do not say what they ran -----------------------------------------------


def test_a_run_naming_no_model_or_device_is_refused_unless_vouched_for() -> None:
    table = own_requests()
    silent = RunFacts(table)
    assert differences(silent, vouched=False) == [
        "the run names no model (--assume-model NAME if it served the scenario's)",
        "the run names no device (--assume-device NAME if it ran on the scenario's)",
    ]
    assert differences(silent) == []


def test_imported_engine_settings_are_compared_in_the_scenarios_names() -> None:
    engine = {"max_num_seqs": 128, "num_gpu_blocks": None, "block_size": 16, "device_name": "x"}
    assert imported_engine_settings(engine) == {"max_num_seqs": 128, "block_size_tokens": 16}
    recorded = imported_engine_settings({"max_num_seqs": 3})
    run = RunFacts(own_requests(), engine_settings=recorded)
    expected = scenario().scheduler.max_num_seqs  # type: ignore[union-attr]
    assert expected != 3
    assert differences(run) == [f"max_num_seqs 3 measured, {expected} in the scenario"]


def test_a_public_run_of_another_gpu_and_batch_limit_is_refused() -> None:
    """Issue 30's case: the RTX 4090 scenario against the RTX PRO 6000 run (its
    config.json names the GPU; its meta.json vLLM's max_num_seqs 128 against 256)."""
    root = Path(__file__).resolve().parent.parent
    examples = root / "validation/public/llmservingsim/bench/examples"
    rtx4090 = load_scenario(root / "scenarios/public/rtx4090_llama31_8b.yaml")
    pro = load_measured(examples / "RTXPRO6000/Llama-3.1-8B")
    assert pro.summary["device_name"] == "RTXPRO6000"
    here = root / "scenarios/public"
    found = mismatches(rtx4090, RunFacts.from_summary(pro.requests, pro.summary), here)
    assert "device 'RTXPRO6000' measured, 'rtx-4090' in the scenario" in found
    assert "max_num_seqs 128 measured, 256 in the scenario" in found
    own = load_measured(examples / "RTX4090/Llama-3.1-8B")
    assert mismatches(rtx4090, RunFacts.from_summary(own.requests, own.summary), here) == []


def test_assumed_model_and_device_fill_only_what_a_run_does_not_say(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parent.parent / "validation/public/llmservingsim"
    folder = examples / "bench/examples/RTX4090/Llama-3.1-8B"
    kept = load_measured(folder, assume_device="h100", assume_model="qwen3-8b")
    assert (kept.summary["device_name"], kept.summary["model"]) == (
        "NVIDIA GeForce RTX 4090",  # its meta.json's own words
        "meta-llama/Llama-3.1-8B",
    )
    bench = Path(__file__).resolve().parent / "data" / "imports" / "vllm_bench_detailed.json"
    silent = load_measured(bench)  # vllm bench serve records its model, not its device
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert (silent.summary["device_name"], silent.summary["model"]) == (None, model)
    filled = load_measured(bench, assume_device="h100", assume_model="qwen3-8b")
    assert (filled.summary["device_name"], filled.summary["model"]) == ("h100", model)
