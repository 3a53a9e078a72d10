"""Measured-run import: LLMServingSim's vLLM runs into servesim's per-request table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.metrics.stats import with_request_metrics
from sim.validation.importers import detect_format, import_run
from sim.validation.llmservingsim import read_llmservingsim
from sim.validation.runs import REQUEST_COLUMNS, load_run

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "validation" / "public" / "llmservingsim" / "bench" / "examples"
RUNS = sorted(p.parent for p in PUBLIC.glob("*/*/vllm"))


def write_run(folder: Path, rows: list[dict[str, object]], meta: object | None = None) -> Path:
    vllm = folder / "vllm"
    vllm.mkdir(parents=True)
    (vllm / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if meta is not None:
        (vllm / "meta.json").write_text(json.dumps(meta))
    return folder


def row(queued: float, first: float, last: float, inp: int = 10, out: int = 4) -> dict[str, object]:
    return {
        "request_id": f"r{queued}",
        "input_toks": inp,
        "output_toks": out,
        "arrival_time": 1e9 + queued,
        "queued_ts": queued,
        "scheduled_ts": queued,
        "first_token_ts": first,
        "last_token_ts": last,
    }


def test_the_four_public_runs_are_vendored_with_their_licence() -> None:
    assert len(RUNS) == 4
    licence = (ROOT / "validation" / "public" / "llmservingsim" / "LICENSE").read_text()
    assert "MIT" in licence and "KAIST" in licence


@pytest.mark.parametrize("run", RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_public_runs_import_with_llmservingsims_own_metrics(run: Path) -> None:
    imported = read_llmservingsim(run)
    requests = imported.requests
    assert list(requests.columns[: len(REQUEST_COLUMNS)]) == list(REQUEST_COLUMNS)
    assert len(requests) == 300 and requests["request_id"].tolist() == list(range(300))
    assert requests["arrival_s"].iloc[0] == 0.0 and requests["arrival_s"].is_monotonic_increasing
    # TTFT and E2EL from the engine's queue time, as LLMServingSim's summary.txt reports
    # them: compare our medians with the "vLLM" column of its own summary.
    summary = (run / "validation" / "summary.txt").read_text().splitlines()
    published = {line[:30].strip(): float(line.split()[-3]) for line in summary if "Median" in line}
    metrics = with_request_metrics(requests)
    assert metrics["ttft_s"].median() * 1e3 == pytest.approx(published["TTFT Median"], abs=0.1)
    assert metrics["tpot_s"].median() * 1e3 == pytest.approx(published["TPOT Median"], abs=0.1)
    assert metrics["e2el_s"].median() * 1e3 == pytest.approx(published["Latency Median"], abs=0.1)
    engine = imported.meta["engine"]
    assert engine["max_num_batched_tokens"] == 2048 and engine["max_num_seqs"] in (128, 256)


def test_recorded_kv_blocks_are_kept_and_missing_ones_are_none() -> None:
    by_gpu = {run.parent.name + "/" + run.name: read_llmservingsim(run).meta for run in RUNS}
    assert by_gpu["RTX4090/Llama-3.1-8B"]["engine"]["num_gpu_blocks"] == 2588
    assert by_gpu["RTXPRO6000/Llama-3.1-8B"]["engine"]["num_gpu_blocks"] is None


def test_requests_are_ordered_by_queue_time_with_times_from_the_first(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", [row(105.0, 106.0, 109.0), row(100.0, 100.5, 101.5)])
    requests = read_llmservingsim(run).requests
    assert requests["arrival_s"].tolist() == [0.0, 5.0]
    assert requests["first_token_s"].tolist() == [0.5, 6.0]
    assert requests["finish_s"].tolist() == [1.5, 9.0]
    metrics = with_request_metrics(requests)
    assert metrics["tpot_s"].tolist() == pytest.approx([1.0 / 3, 3.0 / 3])


def test_write_and_load_round_trip_and_trace(tmp_path: Path) -> None:
    run = read_llmservingsim(write_run(tmp_path / "r", [row(1.0, 2.0, 3.0), row(2.5, 3.0, 4.0)]))
    run.write(tmp_path / "out")
    again = load_run(tmp_path / "out")
    pd.testing.assert_frame_equal(again.requests, run.requests)
    assert again.meta == json.loads(json.dumps(run.meta))
    trace = pd.read_csv(tmp_path / "out" / "trace.csv")
    assert trace["timestamp"].tolist() == [0.0, 1.5]
    assert trace["prompt_tokens"].tolist() == [10, 10]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json\n", "requests.jsonl, line 1: not JSON"),
        ('{"input_toks": 3}\n', "requests.jsonl, line 1: missing field output_toks"),
        ("[1, 2]\n", "requests.jsonl, line 1: expected a JSON object"),
        ("", "no requests"),
    ],
)
def test_bad_request_files_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    vllm = tmp_path / "vllm"
    vllm.mkdir()
    (vllm / "requests.jsonl").write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_llmservingsim(tmp_path)


def test_bad_values_name_the_field(tmp_path: Path) -> None:
    bad = row(1.0, 2.0, 3.0)
    bad["first_token_ts"] = "soon"
    run = write_run(tmp_path / "a", [row(0.0, 0.5, 1.0), bad])
    with pytest.raises(
        ConfigError, match=r"requests.jsonl, line 2: first_token_ts must be a finite"
    ):
        read_llmservingsim(run)
    backwards = write_run(tmp_path / "b", [row(1.0, 0.5, 2.0)])
    with pytest.raises(ConfigError, match="must not decrease"):
        read_llmservingsim(backwards)
    empty = write_run(tmp_path / "c", [row(1.0, 1.5, 2.0, out=0)])
    with pytest.raises(ConfigError, match="output_toks must be >= 1"):
        read_llmservingsim(empty)


def test_a_meta_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", [row(0.0, 1.0, 2.0)], meta=[1, 2])
    with pytest.raises(ConfigError, match=r"meta.json: expected a JSON object"):
        read_llmservingsim(run)


def test_format_detection(tmp_path: Path) -> None:
    assert detect_format(RUNS[0]) == "llmservingsim"
    assert detect_format(RUNS[0] / "vllm") == "llmservingsim"
    with pytest.raises(ConfigError, match="cannot tell its format"):
        detect_format(tmp_path)
    with pytest.raises(ConfigError, match="no such file"):
        import_run(tmp_path / "missing")


def test_cli_writes_the_folder_and_reports_errors_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import-run", str(RUNS[0]), "--out", str(tmp_path / "out")]) == 0
    assert "imported 300 requests" in capsys.readouterr().out
    assert load_run(tmp_path / "out").requests["num_output_tokens"].min() >= 1
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["import-run", str(RUNS[0]), "--out", str(blocker)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["import-run", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err


def test_imported_arrivals_replay_exactly(tmp_path: Path) -> None:
    # The trace keeps arrival times to the nanosecond, so a replay sees the measured ones.
    run = read_llmservingsim(RUNS[0])
    run.write(tmp_path)
    trace = pd.read_csv(tmp_path / "trace.csv")
    assert np.max(np.abs(trace["timestamp"] - run.requests["arrival_s"])) < 1e-9


def test_an_out_under_a_file_is_one_line_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out /proc/nope`` (or under a file) was a traceback from mkdir (issue 30)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["import-run", str(RUNS[0]), "--out", str(blocker / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, not a folder" in err and "Traceback" not in err
