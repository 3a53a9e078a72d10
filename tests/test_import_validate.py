"""Round trips: a run exported in another tool's format, imported, then validated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.compare_measured import load_measured, validate
from sim import api
from sim.cli import main
from sim.errors import ConfigError
from sim.hardware.model_names import same_model
from sim.scenario import load_scenario
from sim.validation.importers import import_run

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
DATA = ROOT / "tests" / "data" / "imports"
OVERRIDES = ["workload.duration_s=8"]


def simulated_as_vllm_bench(path: Path) -> Path:
    """A simulated run of SCENARIO written as ``vllm bench serve --save-detailed`` would."""
    result = api.run(load_scenario(SCENARIO, OVERRIDES))
    requests = result.requests.sort_values("request_id")
    ttfts, itls, latencies = [], [], []
    for rid, arrival, finish in zip(
        requests["request_id"], requests["arrival_s"], requests["finish_s"], strict=True
    ):
        times = np.asarray(result.token_times_s(int(rid)))
        ttfts.append(float(times[0] - arrival))
        itls.append(np.diff(times).tolist())
        latencies.append(float(finish - arrival))
    n = len(requests)
    document = {
        "model_id": "tiny",
        "request_rate": 4.0,
        "start_times": (requests["arrival_s"] + 5000.0).tolist(),  # perf_counter origin
        "input_lens": requests["num_prompt_tokens"].tolist(),
        "output_lens": requests["num_generated_tokens"].tolist(),
        "ttfts": ttfts,
        "itls": itls,
        "latencies": latencies,
        "errors": [""] * n,
        "generated_texts": ["..."] * n,
    }
    path.write_text(json.dumps(document))
    return path


def test_an_exported_simulated_run_validates_with_no_error(tmp_path: Path) -> None:
    # vllm bench serve records no device: the test vouches for it, as a user would.
    measured = load_measured(simulated_as_vllm_bench(tmp_path / "bench.json"), assume_device="cpu")
    assert measured.summary["format"] == "vllm-bench"
    assert measured.steps is not None and measured.steps.empty
    scenario = load_scenario(SCENARIO, OVERRIDES)
    (comparison,) = validate(scenario, measured, base_dir=SCENARIO.parent).comparisons.values()
    for metric in ("ttft", "tpot", "e2el", "itl"):
        assert comparison[metric]["error_pct"]["p50"] == pytest.approx(0.0, abs=1e-6)
    assert comparison["ttft"]["paired"]["median"] == pytest.approx(0.0, abs=1e-9)


def test_validate_cli_takes_a_file_and_an_imported_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = simulated_as_vllm_bench(tmp_path / "bench.json")
    args = ["validate", str(SCENARIO), "--set", OVERRIDES[0], "--assume-device", "cpu", "--out"]
    assert main([*args, str(tmp_path / "v1"), "--measured", str(bench)]) == 0
    assert "vllm-bench format" in (tmp_path / "v1" / "report.md").read_text()
    assert main(["import-run", str(bench), "--out", str(tmp_path / "imported")]) == 0
    assert main([*args, str(tmp_path / "v2"), "--measured", str(tmp_path / "imported")]) == 0
    first = json.loads((tmp_path / "v1" / "validation.json").read_text())["predictions"]
    second = json.loads((tmp_path / "v2" / "validation.json").read_text())["predictions"]
    assert first == second  # the file and its imported folder are the same run
    capsys.readouterr()


SCENARIO_OF_RUN = """
name: {name}
model: {model}
hardware: h100
cost: {{kind: roofline}}
workload: {{kind: trace, format: csv, path: imported/trace.csv}}
"""


def scenario_of(tmp_path: Path, source: Path, model: str) -> Path:
    """A scenario replaying the run's own requests (its imported trace.csv)."""
    import_run(source).write(tmp_path / "imported")
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO_OF_RUN.format(name=source.stem, model=model))
    return path


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("vllm_bench_detailed.json", "llama-3-8b"),
        ("guidellm_report.json", "qwen3-8b"),
        ("guidellm_report_v02.yaml", "qwen3-8b"),
        ("vllm_otlp_spans.jsonl", "llama-3.1-8b"),
    ],
)
def test_validate_cli_takes_every_fixture_against_its_own_scenario(
    name: str, model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = scenario_of(tmp_path, DATA / name, model)
    argv = ["validate", str(scenario), "--measured", str(DATA / name), "--out", str(tmp_path)]
    assert main(argv) == 2  # none of these records the device: refused, naming the flag
    assert "the run names no device (--assume-device NAME" in capsys.readouterr().err
    code = main([*argv, "--assume-device", "h100", "--assume-model", model])
    assert code == 0, capsys.readouterr().err
    assert "TTFT" in (tmp_path / "report.md").read_text()
    capsys.readouterr()


def test_a_run_of_another_model_or_workload_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = DATA / "vllm_bench_detailed.json"
    code = main(["validate", str(SCENARIO), "--measured", str(bench), "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "model 'meta-llama/Llama-3.1-8B-Instruct' measured, 'tiny' in the scenario" in err
    assert "4 requests measured (and 1 failed), 142 in the scenario" in err
    scenario = scenario_of(tmp_path, bench, "llama-3-8b")
    other = tmp_path / "other.yaml"
    other.write_text(scenario.read_text().replace("llama-3-8b", "qwen3-8b"))
    with pytest.raises(ConfigError, match=r"model 'meta-llama/Llama-3\.1-8B-Instruct' measured"):
        validate(load_scenario(other), load_measured(bench, "h100"), base_dir=tmp_path)
    lengths = pd.read_csv(tmp_path / "imported" / "trace.csv")
    lengths["prompt_tokens"] = lengths["prompt_tokens"] + np.arange(len(lengths)) // 3  # one +1
    lengths.to_csv(tmp_path / "imported" / "trace.csv", index=False)
    with pytest.raises(ConfigError, match=r"prompt lengths differ \(1 of 4 sorted values\)"):
        validate(load_scenario(scenario), load_measured(bench, "h100"), base_dir=tmp_path)


def test_an_imported_run_has_no_step_log_for_the_overhead_fit(tmp_path: Path) -> None:
    bench = DATA / "vllm_bench_detailed.json"
    scenario = load_scenario(scenario_of(tmp_path, bench, "llama-3-8b"))
    with pytest.raises(ConfigError, match="no step log"):
        validate(
            scenario,
            load_measured(bench, "h100"),
            overhead_from=load_measured(tmp_path / "imported", "h100"),
            base_dir=tmp_path,
        )
    with pytest.raises(ConfigError, match="not a servesim measure folder nor a run in a known"):
        load_measured(tmp_path / "nothing")


@pytest.mark.parametrize(
    ("scenario_model", "measured_model", "same"),
    [
        ("llama-3-8b", "meta-llama/Llama-3.1-8B-Instruct", True),
        ("llama-3-8b", "meta-llama/Meta-Llama-3-8B-Instruct", True),
        ("llama-3.1-8b", "Llama-3.1-8B", True),
        ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507", True),
        ("qwen3-32b", "Qwen/Qwen3-30B-A3B", False),
        ("qwen3-8b", "Qwen/Qwen3-8B", True),
        ("llama-3-8b", "meta-llama/Llama-3.1-70B-Instruct", False),
        ("tiny", "meta-llama/Llama-3.1-8B-Instruct", False),
        ("qwen3-8b", "Qwen/Qwen3-8", False),
    ],
)
def test_model_names_match_across_spellings(
    scenario_model: str, measured_model: str, same: bool
) -> None:
    assert same_model(scenario_model, measured_model) is same


def test_a_partial_run_may_hold_fewer_requests(tmp_path: Path) -> None:
    from sim.validation.match import RunFacts, mismatches

    scenario = load_scenario(SCENARIO, OVERRIDES)
    requests = api.run(scenario).requests
    hardware = scenario.hardware.name
    assert mismatches(scenario, RunFacts(requests, model="tiny", hardware=hardware)) == []
    head = requests.iloc[:3]
    partial = RunFacts(head, model="tiny", hardware=hardware, partial=True)
    assert mismatches(scenario, partial) == []
    (complaint,) = mismatches(scenario, RunFacts(head, model="tiny", hardware=hardware))
    assert complaint == f"3 requests measured, {len(requests)} in the scenario"


PUBLIC = {
    "rtx4090_llama31_8b": "RTX4090/Llama-3.1-8B",
    "rtxpro6000_llama31_8b": "RTXPRO6000/Llama-3.1-8B",
    "rtxpro6000_qwen3_30b_a3b_dp2_ep2": "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507",
    "rtxpro6000_qwen3_32b_tp2": "RTXPRO6000/Qwen3-32B",
}


@pytest.mark.parametrize(("scenario", "run"), PUBLIC.items())
def test_the_public_runs_match_their_scenarios_and_not_each_other(scenario: str, run: str) -> None:
    from sim.validation.match import RunFacts, mismatches

    examples = ROOT / "validation" / "public" / "llmservingsim" / "bench" / "examples"
    measured = load_measured(examples / run)
    facts = RunFacts.from_summary(measured.requests, measured.summary)
    assert facts.model == import_run(examples / run).meta["engine"]["model"]
    public = ROOT / "scenarios" / "public"
    own = load_scenario(public / f"{scenario}.yaml")
    assert mismatches(own, facts, base_dir=public) == []
    for other in PUBLIC:
        scenario_of_other = load_scenario(public / f"{other}.yaml")
        found = mismatches(scenario_of_other, facts, base_dir=public)
        if PUBLIC[other].split("/")[1] != run.split("/")[1]:
            assert any(f.startswith("model") for f in found)
        if PUBLIC[other].split("/")[0] != run.split("/")[0]:
            assert any(f.startswith("device") for f in found)  # every public run says
