"""Session 13's audit of measured runs (import, validate, calibrate --from-run): a run
of another GPU or storage dtype was taken for the scenario's, a request exported twice
was counted twice, ttfts in milliseconds were read as seconds, and failed requests
left out of a replay went unsaid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from calibration.compare_measured import load_measured, validate
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset
from sim.scenario import load_scenario
from sim.validation.fit_runs import load_measured_run, scenario_for_run
from sim.validation.importers import import_run
from sim.validation.match import hardware_matches
from tests.cli_errors import one_line_error
from tests.test_import_validate import OVERRIDES, SCENARIO, simulated_as_vllm_bench

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "validation" / "public" / "llmservingsim" / "bench" / "examples"
RTX4090_RUN = PUBLIC / "RTX4090" / "Llama-3.1-8B"
IMPORTS = ROOT / "tests" / "data" / "imports"


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIA L40S", "l4"),  # "l4" is inside "l40s", but no word of it
        ("NVIDIA GH200 480GB", "h200"),
        ("NVIDIA GB200", "b200"),
        ("NVIDIA A100-SXM4-80GB", "a100-40gb"),  # the size the name states
        ("NVIDIA A100-PCIE-40GB", "a100-80gb"),
        ("NVIDIA H100 PCIe", "h100-sxm"),  # the form factor both state
        ("NVIDIA H100 NVL", "h100-pcie"),
    ],
)
def test_a_device_is_no_preset_whose_name_is_only_inside_it(device: str, preset: str) -> None:
    assert not hardware_matches(device, hardware_preset(preset))


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("RTX4090", "rtx-4090"),
    ],
)
def test_a_device_is_the_preset_its_words_name(device: str, preset: str) -> None:
    assert hardware_matches(device, hardware_preset(preset))


def _public_run(tmp_path: Path, **hardware: str) -> Path:
    """The public RTX 4090 run, its meta.json's hardware changed as given."""
    run = tmp_path / "run"
    shutil.copytree(RTX4090_RUN, run)
    meta_path = run / "vllm" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["hardware"] |= hardware
    meta_path.write_text(json.dumps(meta))
    return run


def _roofline_scenario(tmp_path: Path, hardware: str) -> Path:
    """The public RTX 4090 scenario on ``hardware`` with a roofline cost (no kernel
    tables to refuse other dtypes first)."""
    path = tmp_path / "scenario.yaml"
    text = (ROOT / "scenarios" / "public" / "rtx4090_llama31_8b.yaml").read_text()
    text = text.replace("hardware: rtx-4090", f"hardware: {hardware}")
    text = text.replace("kind: kernels\n  source: path\n  artifact: ", "kind: roofline\n  # ")
    text = text.replace("path: data/", f"path: {ROOT / 'scenarios' / 'public' / 'data'}/")
    path.write_text(text)
    assert load_scenario(path).cost.kind == "roofline"
    return path


def test_validate_refuses_an_l40s_run_against_an_l4_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _public_run(tmp_path, device_name="NVIDIA L40S")
    scenario = _roofline_scenario(tmp_path, "l4")
    argv = ["validate", str(scenario), "--measured", str(run), "--out", str(tmp_path / "out")]
    message = one_line_error(capsys, [*argv, "-q"])
    assert "device 'NVIDIA L40S' measured, 'l4' in the scenario" in message


@pytest.mark.parametrize(
    ("setting", "difference"),
    [
        ("quantization.weights=fp8", "weights_dtype bf16 measured, quantization.weights fp8"),
        ("quantization.kv_cache=fp8", "kv_cache_dtype bf16 measured, quantization.kv_cache fp8"),
    ],
)
def test_validate_refuses_a_scenario_of_other_dtypes_than_the_run_records(
    setting: str, difference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _roofline_scenario(tmp_path, "rtx-4090")
    argv = ["validate", str(scenario), "--measured", str(RTX4090_RUN), "-q"]
    message = one_line_error(capsys, [*argv, "--set", setting, "--out", str(tmp_path / "o")])
    assert difference in message


def test_a_fit_replays_the_dtypes_the_run_records(tmp_path: Path) -> None:
    run = _public_run(tmp_path)
    meta_path = run / "vllm" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["engine_kwargs"]["kv_cache_dtype"] = "fp8_e4m3"
    meta_path.write_text(json.dumps(meta))
    replay = scenario_for_run(
        load_measured_run(run),
        str(run),
        load_scenario(_roofline_scenario(tmp_path, "rtx-4090")).model,
        hardware_preset("rtx-4090"),
        {"kind": "roofline"},
    )
    assert (replay.quantization.weights, replay.quantization.kv_cache) == ("bf16", "fp8")


def test_a_request_listed_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    run = _public_run(tmp_path)
    requests = run / "vllm" / "requests.jsonl"
    first = requests.read_text().splitlines()[0]
    requests.write_text(requests.read_text() + first + "\n")
    with pytest.raises(ConfigError, match=r"line 301: request_id 'bench-0' listed again.*line 1"):
        import_run(run)


def test_a_span_exported_twice_is_refused(tmp_path: Path) -> None:
    lines = (IMPORTS / "vllm_otlp_spans.jsonl").read_text().splitlines()
    spans = tmp_path / "spans.jsonl"
    spans.write_text("\n".join([*lines, lines[0]]) + "\n")
    with pytest.raises(ConfigError, match=r"gen_ai.request.id 'cmpl-1' listed again"):
        import_run(spans)


def test_vllm_bench_times_in_milliseconds_are_refused(tmp_path: Path) -> None:
    document = json.loads((IMPORTS / "vllm_bench_detailed.json").read_text())
    for field in ("ttfts", "latencies"):
        document[field] = [1e3 * t for t in document[field]]
    document["itls"] = [[1e3 * gap for gap in gaps] for gaps in document["itls"]]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match="ttfts and itls must be in seconds"):
        import_run(bench)


def test_validate_says_how_many_failed_requests_it_does_not_replay(tmp_path: Path) -> None:
    bench = simulated_as_vllm_bench(tmp_path / "bench.json")
    document = json.loads(bench.read_text())
    for i in range(0, len(document["errors"]), 3):
        document["errors"][i] = "ServerDisconnectedError"
        document["output_lens"][i], document["ttfts"][i], document["itls"][i] = 0, 0.0, []
    bench.write_text(json.dumps(document))
    num_failed = len(range(0, len(document["errors"]), 3))
    measured = load_measured(bench, assume_device="cpu")
    outcome = validate(load_scenario(SCENARIO, OVERRIDES), measured, base_dir=SCENARIO.parent)
    total = len(document["errors"])
    assert any(f"{num_failed} of the run's {total} requests failed" in c for c in outcome.caveats)


def test_spans_of_two_models_are_refused_not_taken_for_an_assumed_one(tmp_path: Path) -> None:
    lines = (IMPORTS / "vllm_otlp_spans.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B")
    spans = tmp_path / "spans.jsonl"
    spans.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"spans of 2 models \(Qwen/Qwen3-8B, meta-llama"):
        load_measured(spans, assume_device="h100", assume_model="llama-3.1-8b")


def test_validate_names_the_pipeline_parallel_size_the_resolved_config_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = ROOT / "scenarios" / "public" / "rtx4090_llama31_8b.yaml"
    argv = ["validate", str(scenario), "--measured", str(RTX4090_RUN), "-q"]
    argv += ["--set", "parallelism.pipeline_parallel_size=2", "--out", str(tmp_path)]
    message = one_line_error(capsys, argv)
    assert "pipeline_parallel_size 1 measured, parallelism.pipeline_parallel_size 2" in message


def test_a_fit_of_a_run_with_no_tpot_sample_is_refused_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((IMPORTS / "vllm_bench_detailed.json").read_text())
    for i, error in enumerate(document["errors"]):
        if not error:  # every completed request one token long: no TPOT
            document["output_lens"][i], document["itls"][i] = 1, []
            document["latencies"][i] = document["ttfts"][i]
    bench = tmp_path / "one_token.json"
    bench.write_text(json.dumps(document))
    argv = ["calibrate", "--model", "llama-3-8b", "--hardware", "h100", "--from-run", str(bench)]
    message = one_line_error(capsys, [*argv, "--out", str(tmp_path / "fit.json")])
    assert "no request has a TPOT (TPOT needs 2 or more output tokens)" in message


def test_a_noise_floor_of_one_run_against_itself_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = simulated_as_vllm_bench(tmp_path / "bench.json")
    import_run(bench).write(tmp_path / "imported")  # the same run, imported
    argv = ["validate", str(SCENARIO), "--set", OVERRIDES[0], "--assume-device", "cpu", "-q"]
    argv += ["--measured", str(bench), "--measured", str(tmp_path / "imported")]
    message = one_line_error(capsys, [*argv, "--out", str(tmp_path / "out")])
    assert "the same run as" in message and "the noise floor compares two runs" in message


def test_a_guidellm_request_listed_twice_is_refused(tmp_path: Path) -> None:
    document = json.loads((IMPORTS / "guidellm_report.json").read_text())
    successful = document["benchmarks"][0]["requests"]["successful"]
    successful.append(successful[0])
    report = tmp_path / "report.json"
    report.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"successful\[3\]: request_id 'a' listed again"):
        import_run(report)
