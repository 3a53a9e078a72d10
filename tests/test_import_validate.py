"""Round trips: a run exported in another tool's format, imported, then validated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.validate import MeasuredDir, validate
from sim import api
from sim.cli import main
from sim.errors import ConfigError
from sim.scenario import load_scenario

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
    measured = MeasuredDir.load(simulated_as_vllm_bench(tmp_path / "bench.json"))
    assert measured.summary["format"] == "vllm-bench" and measured.steps.empty
    scenario = load_scenario(SCENARIO, OVERRIDES)
    (comparison,) = validate(scenario, measured, base_dir=SCENARIO.parent).comparisons.values()
    for metric in ("ttft", "tpot", "e2el", "itl"):
        assert comparison[metric]["error_pct"]["p50"] == pytest.approx(0.0, abs=1e-6)
    assert comparison["ttft"]["paired"]["median"] == pytest.approx(0.0, abs=1e-9)


def test_validate_cli_takes_a_file_and_an_imported_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = simulated_as_vllm_bench(tmp_path / "bench.json")
    args = ["validate", str(SCENARIO), "--set", OVERRIDES[0], "--out"]
    assert main([*args, str(tmp_path / "v1"), "--measured", str(bench)]) == 0
    assert "vllm-bench format" in (tmp_path / "v1" / "report.md").read_text()
    assert main(["import-run", str(bench), "--out", str(tmp_path / "imported")]) == 0
    assert main([*args, str(tmp_path / "v2"), "--measured", str(tmp_path / "imported")]) == 0
    first = json.loads((tmp_path / "v1" / "validation.json").read_text())["predictions"]
    second = json.loads((tmp_path / "v2" / "validation.json").read_text())["predictions"]
    assert first == second  # the file and its imported folder are the same run
    capsys.readouterr()


@pytest.mark.parametrize("name", ["guidellm_report.json", "vllm_otlp_spans.jsonl"])
def test_validate_cli_takes_the_other_fixtures(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["validate", str(SCENARIO), "--measured", str(DATA / name), "--out", str(tmp_path)])
    assert code == 0
    assert "ITL" in (tmp_path / "report.md").read_text()
    capsys.readouterr()


def test_an_imported_run_has_no_step_log_for_the_overhead_fit(tmp_path: Path) -> None:
    bench = DATA / "vllm_bench_detailed.json"
    scenario = load_scenario(SCENARIO)
    with pytest.raises(ConfigError, match="no step log"):
        validate(
            scenario,
            MeasuredDir.load(bench),
            overhead_from=MeasuredDir.load(DATA / "guidellm_report.json"),
        )
    with pytest.raises(ConfigError, match="not a servesim measure folder nor a run in a known"):
        MeasuredDir.load(tmp_path)
