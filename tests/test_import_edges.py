"""Edge cases of the measured-run importers: every refusal names its file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.validation.formats.guidellm import read_guidellm
from sim.validation.formats.measure_dir import read_measure
from sim.validation.formats.otlp import read_otlp
from sim.validation.formats.vllm_bench import read_vllm_bench
from sim.validation.importers import detect_format, import_run, reader

DATA = Path(__file__).resolve().parent / "data" / "imports"
ROOT = Path(__file__).resolve().parent.parent
LLMSERVINGSIM = sorted(
    (ROOT / "validation" / "public" / "llmservingsim").glob("bench/examples/*/*")
)


def write(tmp_path: Path, document: object, name: str = "doc.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def bench(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    document.update(changes)
    return document


def test_vllm_bench_keeps_the_client_queue_as_mean_and_max(tmp_path: Path) -> None:
    run = read_vllm_bench(write(tmp_path, bench(queue_times=[0.0, 0.5, 0.25, 0.25, 1.0])))
    assert run.meta["client_queue_s"] == {"mean": 0.4, "max": 1.0}
    assert read_vllm_bench(DATA / "vllm_bench_detailed.json").meta["client_queue_s"] == {
        "mean": 0.0,
        "max": 0.0,
    }
    no_queue = {k: v for k, v in bench().items() if k != "queue_times"}
    assert read_vllm_bench(write(tmp_path, no_queue)).meta["client_queue_s"] is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"itls": 5}, "itls must be a list, got int"),
        ({"itls": [[0.1], 7, [], [], []]}, "request 1: itls must be a list"),
        ({"ttfts": [-0.1, 0.15, 0.0, 0.075, 0.2]}, "request 0: ttfts and itls must be >= 0"),
        ({"start_times": [1000.0, None, 1, 2, 3]}, r"start_times\[1\]: start time must be"),
        ({"input_lens": []}, "field output_lens has 5 entries, input_lens has 0"),
    ],
)
def test_vllm_bench_more_bad_fields(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_vllm_bench(write(tmp_path, bench(**changes)))


def test_vllm_bench_refuses_what_is_not_an_object(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected a JSON object"):
        read_vllm_bench(write(tmp_path, [1, 2]))
    (tmp_path / "bad.json").write_text('{"ttfts": [1,\n')
    with pytest.raises(ConfigError, match=r"bad.json, line 2: not JSON"):
        read_vllm_bench(tmp_path / "bad.json")


def guidellm(**bench_changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DATA / "guidellm_report.json").read_text())
    document["benchmarks"][0].update(bench_changes)
    return document


def test_guidellm_refusals_name_the_benchmark(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="benchmarks is empty"):
        read_guidellm(write(tmp_path, {"benchmarks": []}))
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]: benchmark must be an object"):
        read_guidellm(write(tmp_path, {"benchmarks": [3]}))
    empty = guidellm(requests={"successful": [], "errored": [{}]})
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]: no successful requests"):
        read_guidellm(write(tmp_path, empty))
    with pytest.raises(ConfigError, match="requests must be an object"):
        read_guidellm(write(tmp_path, guidellm(requests=[1])))
    with pytest.raises(ConfigError, match="not a GuideLLM report"):
        read_guidellm(write(tmp_path, {"benchmark": []}))


def test_guidellm_counts_incomplete_and_finds_the_model(tmp_path: Path) -> None:
    document = guidellm()
    document["benchmarks"][0]["requests"]["incomplete"] = [{}, {}]
    del document["args"]
    document["benchmarks"][0]["worker"] = {"model": "m-from-worker"}
    run = read_guidellm(write(tmp_path, document))
    assert run.meta["num_incomplete"] == 2 and run.meta["engine"]["model"] == "m-from-worker"
    assert run.meta["settings"]["strategy"] == {"type_": "constant", "rate": 2.0}


def test_guidellm_cli_takes_the_benchmark_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = guidellm()
    document["benchmarks"].append(json.loads(json.dumps(document["benchmarks"][0])))
    path = write(tmp_path, document)
    # Without --benchmark, every benchmark is a phase of its own (issue 31).
    assert main(["import-run", str(path), "--out", str(tmp_path / "all")]) == 0
    assert "2 phases" in capsys.readouterr().out
    assert json.loads((tmp_path / "all" / "phase-1" / "run.json").read_text())["benchmark"] == 1
    assert main(["import-run", str(path), "--benchmark", "1", "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "run.json").read_text())["benchmark"] == 1
    assert main(["import-run", str(path), "--benchmark", "2", "--out", str(tmp_path / "x")]) == 2
    assert "--benchmark 2 out of range 0..1" in capsys.readouterr().err


def otlp_span(**changes: Any) -> dict[str, Any]:
    first = json.loads((DATA / "vllm_otlp_spans.jsonl").read_text().splitlines()[0])
    span: dict[str, Any] = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span.update(changes)
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


def test_otlp_refusals_name_the_span(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"spans\[0\]: startTimeUnixNano must be an integer"):
        read_otlp(write(tmp_path, otlp_span(startTimeUnixNano="soon")))
    missing = otlp_span()
    del missing["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"]
    with pytest.raises(ConfigError, match=r"spans\[0\]: missing field startTimeUnixNano"):
        read_otlp(write(tmp_path, missing))
    (tmp_path / "two.jsonl").write_text(json.dumps(otlp_span()) + "\n" + '{"a": 1}\n')
    with pytest.raises(ConfigError, match=r"two.jsonl, line 2: not an OTLP JSON export"):
        read_otlp(tmp_path / "two.jsonl")
    with pytest.raises(ConfigError, match="resourceSpans must be a list"):
        read_otlp(write(tmp_path, {"resourceSpans": {"x": 1}}))


def test_otlp_span_without_engine_durations_keeps_the_arrival_as_ready(tmp_path: Path) -> None:
    document = otlp_span()
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"] = [a for a in span["attributes"] if "model_" not in a["key"]]
    r = read_otlp(write(tmp_path, document)).requests
    assert r["ready_s"].tolist() == [0.0] and r["first_scheduled_s"].isna().all()
    assert r["first_token_s"].tolist() == [0.125] and r["finish_s"].tolist() == [0.5]


def test_measure_reader_refusals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a servesim measure folder"):
        read_measure(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"mode": "measured"}))
    pd.DataFrame({"request_id": [0], "arrival_s": [0.0]}).to_parquet(tmp_path / "requests.parquet")
    with pytest.raises(ConfigError, match=r"requests.parquet: missing columns \['ready_s'"):
        read_measure(tmp_path)


@pytest.mark.skipif(not LLMSERVINGSIM, reason="the public runs are not vendored here")
def test_llmservingsim_runs_go_through_the_same_door() -> None:
    assert detect_format(LLMSERVINGSIM[0]) == "llmservingsim"
    assert len(import_run(LLMSERVINGSIM[0]).requests) == 300


def test_detection_survives_binary_and_unknown_files(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
    with pytest.raises(ConfigError, match="cannot tell its format"):
        detect_format(tmp_path / "blob.bin")
    (tmp_path / "notes.yaml").write_text("a: [1\n")
    with pytest.raises(ConfigError, match="cannot tell its format"):
        detect_format(tmp_path / "notes.yaml")
    with pytest.raises(ConfigError, match="unknown format 'csv'; known: auto, vllm-bench"):
        reader("csv")
    with pytest.raises(ConfigError, match="no such file"):
        import_run(tmp_path / "missing.json")


def test_an_explicit_format_reads_a_file_of_another_name(tmp_path: Path) -> None:
    path = tmp_path / "result.txt"
    path.write_bytes((DATA / "vllm_bench_detailed.json").read_bytes())
    assert len(import_run(path, "vllm-bench").requests) == 4
    with pytest.raises(ConfigError, match="not a GuideLLM report"):
        import_run(path, "guidellm")
