"""Run outputs on disk (re-readable, strict JSON, PNGs) and the vllm-style result table."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from frontend_frames import step_table

import sim.metrics.report
from sim.engine.records import RequestTable
from sim.engine.step_runs import StepTable
from sim.errors import ConfigError
from sim.metrics.report import format_summary_table, summary_to_json, write_outputs
from sim.metrics.stats import Slo, summarize

NAN = math.nan


def run_frames(n: int = 40) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A small, plausible run: requests (a few rejected), steps, timeseries."""
    rng = np.random.default_rng(5)
    arrival = np.sort(rng.uniform(0, 10, n))
    ttft = rng.uniform(0.05, 0.5, n)
    gen = rng.integers(1, 50, n)
    rejected = np.arange(n) % 10 == 3
    finish = np.where(rejected, NAN, arrival + ttft + 0.02 * gen)
    requests = pd.DataFrame(
        {
            "request_id": np.arange(n),
            "arrival_s": arrival,
            "ready_s": arrival + 0.001,
            "first_scheduled_s": np.where(rejected, NAN, arrival + ttft / 2),
            "first_token_s": np.where(rejected, NAN, arrival + ttft),
            "finish_s": finish,
            "num_prompt_tokens": rng.integers(10, 500, n),
            "num_output_tokens": gen,
            "num_generated_tokens": np.where(rejected, 0, gen),
            "num_preemptions": np.zeros(n, dtype=np.int64),
            "rejection_reason": [("prompt too long" if r else None) for r in rejected],
            "replica": np.zeros(n, dtype=np.int64),
        }
    )
    end = np.cumsum(rng.uniform(0.01, 0.03, 500))
    steps = pd.DataFrame(
        {
            "start_s": end - 0.02,
            "end_s": end,
            "num_prefill_tokens": rng.integers(0, 100, 500),
            "num_decode_seqs": rng.integers(0, 20, 500),
            "num_itl_tokens": rng.integers(0, 20, 500).astype(np.int32),
        }
    )
    timeseries = pd.DataFrame(
        {
            "time_s": end,
            "num_waiting": rng.integers(0, 10, 500),
            "num_running": rng.integers(0, 20, 500),
            "num_kv_blocks_used": rng.integers(0, 100, 500),
            "kv_cache_usage": rng.uniform(0, 1, 500),
        }
    )
    return requests, steps, timeseries


@pytest.fixture
def run() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    requests, steps, timeseries = run_frames()
    summary = summarize(
        RequestTable.from_frame(requests),
        step_table(steps),
        np.array([0.3]),
        Slo(ttft_ms=300),
        (50, 90, 99, 99.9),
    )
    return requests, steps, timeseries, summary


# --- write_outputs -------------------------------------------------------------------------


def test_default_outputs_are_written_and_re_readable(tmp_path: Path, run: Any) -> None:
    requests, steps, timeseries, summary = run
    out = tmp_path / "a" / "b"  # created, parents too
    written = write_outputs(out, requests, steps, timeseries, summary)
    names = {p.name for p in written}
    assert names == {
        "requests.parquet",
        "summary.json",
        "timeseries.csv",
        "latency_cdf.png",
        "timeseries.png",
    }
    assert {p.name for p in out.iterdir()} == names
    assert all(p.parent == out for p in written)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "requests.parquet"), requests)
    pd.testing.assert_frame_equal(pd.read_csv(out / "timeseries.csv"), timeseries)
    assert json.loads((out / "summary.json").read_text()) == json.loads(summary_to_json(summary))
    for png in ("latency_cdf.png", "timeseries.png"):
        data = (out / png).read_bytes()
        assert data[:4] == b"\x89PNG" and len(data) > 20_000, png


def test_steps_are_written_only_on_request(tmp_path: Path, run: Any) -> None:
    requests, steps, timeseries, summary = run
    write_outputs(tmp_path / "no", requests, steps, timeseries, summary)
    assert not list((tmp_path / "no").glob("steps.*"))
    written = write_outputs(
        tmp_path / "yes", requests, steps, timeseries, summary, write_steps=True
    )
    assert tmp_path / "yes" / "steps.parquet" in written
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "yes" / "steps.parquet"), steps)


def test_csv_format_writes_requests_csv(tmp_path: Path, run: Any) -> None:
    requests, steps, timeseries, summary = run
    written = write_outputs(tmp_path, requests, steps, timeseries, summary, ["csv"], plots=False)
    assert {p.name for p in written} == {"requests.csv", "summary.json", "timeseries.csv"}
    back = pd.read_csv(tmp_path / "requests.csv", keep_default_na=False, na_values=[""])
    assert back["request_id"].tolist() == requests["request_id"].tolist()
    np.testing.assert_allclose(back["finish_s"], requests["finish_s"])
    assert (back["rejection_reason"].notna() == requests["rejection_reason"].notna()).all()


def test_both_formats_and_steps_in_both(tmp_path: Path, run: Any) -> None:
    requests, steps, timeseries, summary = run
    write_outputs(
        tmp_path, requests, steps, timeseries, summary, {"csv", "parquet"}, write_steps=True
    )
    for name in ("requests.csv", "requests.parquet", "steps.csv", "steps.parquet"):
        assert (tmp_path / name).exists(), name
    assert len(pd.read_csv(tmp_path / "steps.csv")) == len(steps)


def test_parquet_falls_back_to_csv_without_pyarrow(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, steps, timeseries, summary = run
    monkeypatch.setattr(sim.metrics.report, "have_parquet_engine", lambda: False)
    with pytest.warns(UserWarning, match="pyarrow"):
        written = write_outputs(
            tmp_path, requests, steps, timeseries, summary, ("parquet", "csv"), plots=False
        )
    assert [p.name for p in written].count("requests.csv") == 1
    assert not (tmp_path / "requests.parquet").exists()
    assert len(pd.read_csv(tmp_path / "requests.csv")) == len(requests)


def test_parquet_engine_is_detected_here() -> None:
    assert sim.metrics.report.have_parquet_engine()


@pytest.mark.parametrize("formats", [[], ["xlsx"], ["csv", "feather"]])
def test_unknown_formats_are_a_config_error(tmp_path: Path, run: Any, formats: list[str]) -> None:
    requests, steps, timeseries, summary = run
    with pytest.raises(ConfigError, match="formats"):
        write_outputs(tmp_path / "x", requests, steps, timeseries, summary, formats)
    assert not (tmp_path / "x").exists()  # checked before anything is written


def test_rewriting_a_folder_overwrites(tmp_path: Path, run: Any) -> None:
    requests, steps, timeseries, summary = run
    write_outputs(tmp_path, requests, steps, timeseries, summary, plots=False)
    write_outputs(tmp_path, requests.iloc[:5], steps, timeseries, summary, plots=False)
    assert len(pd.read_parquet(tmp_path / "requests.parquet")) == 5


def test_an_empty_run_writes_everything(tmp_path: Path) -> None:
    empty = pd.DataFrame()
    no_steps = StepTable.from_frame(empty)
    summary = summarize(RequestTable.from_frame(empty), no_steps, np.empty(0), Slo(ttft_ms=1))
    written = write_outputs(tmp_path, empty, empty, empty, summary)
    assert len(written) == 5
    loaded = json.loads((tmp_path / "summary.json").read_text())
    assert loaded["completed"] == 0 and loaded["duration"] is None


# --- summary JSON --------------------------------------------------------------------------


def test_summary_json_is_strict_with_nulls_for_nan(tmp_path: Path) -> None:
    summary = {
        "completed": np.int64(3),
        "duration": np.float64(2.5),
        "mean_ttft_ms": NAN,
        "p99_ttft_ms": math.inf,
        "request_goodput": None,
        "nested": {"values": np.array([1.0, NAN]), "pair": (np.float32(0.5), -math.inf)},
    }
    text = summary_to_json(summary)
    assert "NaN" not in text and "Infinity" not in text
    loaded = json.loads(text)
    assert loaded == {
        "completed": 3,
        "duration": 2.5,
        "mean_ttft_ms": None,
        "p99_ttft_ms": None,
        "request_goodput": None,
        "nested": {"values": [1.0, None], "pair": [0.5, None]},
    }
    assert text.splitlines()[1].startswith('  "')  # indent 2


def test_summary_json_of_a_real_summary_round_trips(run: Any) -> None:
    *_, summary = run
    loaded = json.loads(summary_to_json(summary))
    assert loaded.keys() == summary.keys()
    for key, value in summary.items():
        assert loaded[key] == (pytest.approx(value) if isinstance(value, float) else value), key


# --- the result table ----------------------------------------------------------------------


def test_table_has_the_vllm_frame(run: Any) -> None:
    *_, summary = run
    lines = format_summary_table(summary).splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[-1] == "=" * 50
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    for line in lines:
        if re.fullmatch(r"[=-]+.*[=-]+", line):
            assert len(line) == 50, line


def test_table_values_are_aligned_after_40_columns(run: Any) -> None:
    *_, summary = run
    rows = [ln for ln in format_summary_table(summary).splitlines() if ":" in ln]
    assert len(rows) > 20
    for row in rows:
        assert row[40] == " " and row[41] != " " and row[:40].rstrip().endswith(":"), row


def _value(table: str, label: str) -> str:
    (line,) = [ln for ln in table.splitlines() if ln.startswith(label)]
    return line[41:]


def test_table_rows_show_the_summary_values(run: Any) -> None:
    *_, summary = run
    table = format_summary_table(summary)
    assert _value(table, "Successful requests:") == str(summary["completed"])
    assert _value(table, "Rejected requests:") == str(summary["num_rejected"])
    assert _value(table, "Total input tokens:") == str(summary["total_input_tokens"])
    assert _value(table, "Benchmark duration (s):") == f"{summary['duration']:.2f}"
    assert _value(table, "Request goodput (req/s):") == f"{summary['request_goodput']:.2f}"
    assert _value(table, "Mean TTFT (ms):") == f"{summary['mean_ttft_ms']:.2f}"
    assert _value(table, "P99.9 E2EL (ms):") == f"{summary['p99.9_e2el_ms']:.2f}"
    assert _value(table, "Median ITL (ms):") == f"{summary['median_itl_ms']:.2f}"


def test_table_sections_list_mean_median_then_percentiles_in_order(run: Any) -> None:
    *_, summary = run
    lines = format_summary_table(summary).splitlines()
    start = lines.index("---------------Inter-token Latency----------------")
    labels = [ln.split(" (ms)")[0] for ln in lines[start + 1 : start + 7]]
    assert labels == ["Mean ITL", "Median ITL", "P50 ITL", "P90 ITL", "P99 ITL", "P99.9 ITL"]
    headers = [ln.strip("-") for ln in lines if ln.startswith("-")]
    assert headers == [
        "Time to First Token",
        "Time per Output Token (excl. 1st token)",
        "Inter-token Latency",
        "End-to-end Latency",
    ]


def test_table_hides_goodput_without_an_slo(run: Any) -> None:
    requests, steps, _, _ = run
    summary = summarize(RequestTable.from_frame(requests), step_table(steps), np.empty(0))
    table = format_summary_table(summary)
    assert "goodput" not in table
    assert "Request throughput (req/s):" in table


def test_table_of_an_empty_run_says_n_a() -> None:
    empty = pd.DataFrame()
    no_steps = StepTable.from_frame(empty)
    table = format_summary_table(summarize(RequestTable.from_frame(empty), no_steps, np.empty(0)))
    assert _value(table, "Successful requests:") == "0"
    assert _value(table, "Benchmark duration (s):") == "n/a"
    assert _value(table, "Mean TPOT (ms):") == "n/a"
    assert "nan" not in table.lower().replace("n/a", "")


def test_table_skips_what_the_summary_lacks() -> None:
    table = format_summary_table({"completed": 2, "mean_ttft_ms": 1.5, "p99_ttft_ms": NAN})
    lines = table.splitlines()
    assert lines[1].startswith("Successful requests:")
    assert "Time to First Token" in table and "End-to-end" not in table
    assert _value(table, "P99 TTFT (ms):") == "n/a"
    assert "Median TTFT" not in table
