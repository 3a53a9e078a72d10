"""Trace parsing and replay options: Azure and generic CSV, malformed rows, windows."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.workload.trace import (
    AZURE_COLUMNS,
    CSV_DEFAULT_COLUMNS,
    TraceColumns,
    parse_timestamps_s,
    read_csv_columns,
)
from sim.workload.traces.workload import TraceRequests, TraceWorkload, trace_requests

REPO = Path(__file__).resolve().parents[1]
AZURE_SAMPLE = REPO / "scenarios" / "data" / "azure_conv_sample.csv"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def load_trace(path: Path, columns: TraceColumns, **window: Any) -> TraceRequests:
    """The replay of a CSV trace with these columns, as a ``kind: trace`` workload reads it."""
    names: dict[str, Any] = {"format": "azure"}
    if columns != AZURE_COLUMNS:
        names = {
            "format": "csv",
            "timestamp_column": columns.timestamp,
            "prompt_tokens_column": columns.prompt_tokens,
            "output_tokens_column": columns.output_tokens,
        }
    workload = TraceWorkload(path=str(path), **names, **window)
    return trace_requests(workload, np.random.default_rng(0))


def write(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_bytes((newline.join(lines) + newline).encode("utf-8"))
    return path


def azure(tmp_path: Path, rows: list[str], newline: str = "\r\n") -> Path:
    return write(tmp_path / "azure.csv", [AZURE_HEADER, *rows], newline)


def generic(tmp_path: Path, rows: list[str]) -> Path:
    return write(tmp_path / "trace.csv", ["timestamp,prompt_tokens,output_tokens", *rows])


# --- the Azure format ------------------------------------------------------------


def test_azure_rows_parse_with_seven_fraction_digits(tmp_path: Path) -> None:
    path = azure(
        tmp_path,
        [
            "2023-11-16 18:15:46.6805900,374,44",
            "2023-11-16 18:15:50.9951690,396,109",
            "2023-11-16 18:15:51.2224670,879,55",
        ],
    )
    rows = load_trace(path, AZURE_COLUMNS)
    assert rows.arrival_s.dtype == np.float64
    assert rows.num_prompt_tokens.dtype == np.int64
    assert rows.num_output_tokens.dtype == np.int64
    assert rows.arrival_s[0] == 0.0
    assert rows.arrival_s[1] == pytest.approx(50.9951690 - 46.6805900, abs=1e-9)
    assert rows.arrival_s[2] == pytest.approx(51.2224670 - 46.6805900, abs=1e-9)
    assert rows.num_prompt_tokens.tolist() == [374, 396, 879]
    assert rows.num_output_tokens.tolist() == [44, 109, 55]


def test_azure_timestamps_keep_sub_microsecond_differences(tmp_path: Path) -> None:
    path = azure(tmp_path, ["2023-11-16 18:15:46.0000000,1,1", "2023-11-16 18:15:46.0000003,1,1"])
    assert load_trace(path, AZURE_COLUMNS).arrival_s[1] == pytest.approx(3e-7, rel=1e-6)


def test_timestamps_cross_midnight_and_month_end(tmp_path: Path) -> None:
    path = azure(tmp_path, ["2023-11-30 23:59:59.5,1,1", "2023-12-01 00:00:00.25,1,1"])
    assert load_trace(path, AZURE_COLUMNS).arrival_s[1] == pytest.approx(0.75)


@pytest.mark.parametrize(
    "stamps",
    [
        ["2023-11-16T18:15:46", "2023-11-16T18:15:48.5"],
        ["2023-11-16 18:15:46Z", "2023-11-16 18:15:48.500Z"],
        ["2023-11-16 18:15:46+01:00", "2023-11-16 17:15:48.5+00:00"],
        ["2023-11-16 18:15:46,0", "2023-11-16 18:15:48,5"],
        ["2023-11-16 18:15:46.123456789123", "2023-11-16 18:15:48.623456789"],
    ],
)
def test_iso_variants(tmp_path: Path, stamps: list[str]) -> None:
    # A comma fraction needs quoting in a CSV.
    path = azure(tmp_path, [f'"{stamps[0]}",1,1', f'"{stamps[1]}",1,1'])
    assert load_trace(path, AZURE_COLUMNS).arrival_s[1] == pytest.approx(2.5, abs=1e-6)


def test_shipped_azure_sample() -> None:
    rows = load_trace(AZURE_SAMPLE, AZURE_COLUMNS)
    assert len(rows.arrival_s) == 2000
    assert rows.arrival_s[0] == 0.0
    assert np.all(np.diff(rows.arrival_s) >= 0)
    assert rows.num_prompt_tokens.min() >= 1
    assert rows.num_output_tokens.min() >= 1
    first, last = _first_and_last_stamp(AZURE_SAMPLE)
    assert rows.arrival_s[-1] == pytest.approx((last - first).total_seconds(), abs=1e-5)


def _first_and_last_stamp(path: Path) -> tuple[dt.datetime, dt.datetime]:
    lines = path.read_text().splitlines()[1:]
    stamps = [dt.datetime.fromisoformat(line.split(",")[0][:26]) for line in lines]
    return min(stamps), max(stamps)


FULL_TRACE_NAME = "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"


def full_trace() -> Path | None:
    """The full Azure trace (not shipped: 20 MB): $SERVESIM_DATA, else ../shared/data.

    Resolved relative to the repository, not at one machine's absolute path.
    """
    root = Path(__file__).resolve().parent.parent
    bases = [Path(os.environ["SERVESIM_DATA"])] if os.environ.get("SERVESIM_DATA") else []
    bases += [root / "data", root.parent / "shared" / "data"]
    return next((b / FULL_TRACE_NAME for b in bases if (b / FULL_TRACE_NAME).is_file()), None)


def test_shipped_sample_is_the_head_of_the_full_trace() -> None:
    full = full_trace()
    if full is None:
        pytest.skip("full trace not found: set SERVESIM_DATA to the folder holding it")
    with full.open("rb") as handle:
        head = b"".join(handle.readline() for _ in range(2001))
    assert AZURE_SAMPLE.read_bytes() == head


def test_shipped_sample_has_attribution_and_licence() -> None:
    readme = (AZURE_SAMPLE.parent / "README.md").read_text()
    assert "Creative Commons Attribution 4.0" in readme
    assert "Patel et al." in readme and "Splitwise" in readme and "ISCA 2024" in readme
    assert "Azure/AzurePublicDataset" in readme
    assert (
        "Attribution 4.0 International"
        in (AZURE_SAMPLE.parent / "LICENSE-azure-llm-2023").read_text()
    )


# --- generic CSV -----------------------------------------------------------------------


def test_generic_csv_with_seconds(tmp_path: Path) -> None:
    path = generic(tmp_path, ["100.5,10,20", "101.0,11,21", "103.25,12,22"])
    rows = load_trace(path, CSV_DEFAULT_COLUMNS)
    assert rows.arrival_s.tolist() == [0.0, 0.5, 2.75]
    assert rows.num_prompt_tokens.tolist() == [10, 11, 12]
    assert rows.num_output_tokens.tolist() == [20, 21, 22]


def test_generic_csv_with_custom_columns_in_any_order(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", ["out,id,t,inp", "5,a,0,7", "6,b,2,8"])
    rows = load_trace(path, TraceColumns(timestamp="t", prompt_tokens="inp", output_tokens="out"))
    assert rows.arrival_s.tolist() == [0.0, 2.0]
    assert rows.num_prompt_tokens.tolist() == [7, 8]
    assert rows.num_output_tokens.tolist() == [5, 6]


def test_generic_csv_with_iso_timestamps(tmp_path: Path) -> None:
    path = generic(tmp_path, ["2024-05-01T00:00:00,1,1", "2024-05-01T00:01:00,1,1"])
    assert load_trace(path, CSV_DEFAULT_COLUMNS).arrival_s.tolist() == [0.0, 60.0]


def test_whole_number_floats_and_spaces_are_accepted(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.csv", ["timestamp, prompt_tokens, output_tokens", "0, 12.0 ,3", "1,4, 5"]
    )
    rows = load_trace(path, CSV_DEFAULT_COLUMNS)
    assert rows.num_prompt_tokens.tolist() == [12, 4]
    assert rows.num_output_tokens.tolist() == [3, 5]


def test_blank_lines_and_bom_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("\ufefftimestamp,prompt_tokens,output_tokens\n0,1,2\n\n3,4,5\n\n".encode())
    rows = load_trace(path, CSV_DEFAULT_COLUMNS)
    assert rows.arrival_s.tolist() == [0.0, 3.0]


def test_out_of_order_rows_are_sorted_stably(tmp_path: Path) -> None:
    path = generic(tmp_path, ["5,1,1", "2,2,2", "5,3,3", "2,4,4", "9,5,5"])
    rows = load_trace(path, CSV_DEFAULT_COLUMNS)
    assert rows.arrival_s.tolist() == [0.0, 0.0, 3.0, 3.0, 7.0]
    assert rows.num_prompt_tokens.tolist() == [2, 4, 1, 3, 5]
    assert rows.num_output_tokens.tolist() == [2, 4, 1, 3, 5]


@given(
    stamps=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50),
    scale=st.floats(0.01, 100.0),
)
@settings(max_examples=50, deadline=None)
def test_replay_invariants(stamps: list[float], scale: float) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        lines = [f"{stamp!r},{i + 1},{i + 2}" for i, stamp in enumerate(stamps)]
        path = generic(Path(tmp), lines)
        rows = load_trace(path, CSV_DEFAULT_COLUMNS, time_scale=scale)
    assert rows.arrival_s[0] == 0.0
    assert np.all(np.diff(rows.arrival_s) >= 0)
    assert (
        len(rows.arrival_s)
        == len(rows.num_prompt_tokens)
        == len(rows.num_output_tokens)
        == len(stamps)
    )
    assert rows.arrival_s[-1] == pytest.approx(
        (max(stamps) - min(stamps)) * scale, rel=1e-9, abs=1e-6
    )
    # Each request keeps its own lengths through the sort.
    assert np.array_equal(rows.num_output_tokens, rows.num_prompt_tokens + 1)


# --- replay options ------------------------------------------------------------------


@pytest.fixture
def ten_rows(tmp_path: Path) -> Path:
    # Rows at t = 10, 11, ..., 19 s with prompt tokens 1..10.
    return generic(tmp_path, [f"{10 + i},{i + 1},1" for i in range(10)])


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 0.001])
def test_time_scale_multiplies_gaps(ten_rows: Path, scale: float) -> None:
    base = load_trace(ten_rows, CSV_DEFAULT_COLUMNS)
    scaled = load_trace(ten_rows, CSV_DEFAULT_COLUMNS, time_scale=scale)
    assert np.allclose(np.diff(scaled.arrival_s), np.diff(base.arrival_s) * scale)
    assert scaled.arrival_s[0] == 0.0
    assert np.array_equal(scaled.num_prompt_tokens, base.num_prompt_tokens)


def test_max_requests_keeps_the_first(ten_rows: Path) -> None:
    rows = load_trace(ten_rows, CSV_DEFAULT_COLUMNS, max_requests=3)
    assert rows.num_prompt_tokens.tolist() == [1, 2, 3]
    assert rows.arrival_s.tolist() == [0.0, 1.0, 2.0]


def test_max_requests_larger_than_trace(ten_rows: Path) -> None:
    assert len(load_trace(ten_rows, CSV_DEFAULT_COLUMNS, max_requests=1000).arrival_s) == 10


def test_window_is_half_open_in_trace_seconds_and_shifted_to_zero(ten_rows: Path) -> None:
    rows = load_trace(ten_rows, CSV_DEFAULT_COLUMNS, start_offset_s=2.0, duration_s=3.0)
    # Trace seconds since the first row: 2, 3, 4 are in [2, 5); 5 is not.
    assert rows.num_prompt_tokens.tolist() == [3, 4, 5]
    assert rows.arrival_s.tolist() == [0.0, 1.0, 2.0]


def test_window_applies_before_time_scale_and_max_requests(ten_rows: Path) -> None:
    rows = load_trace(
        ten_rows,
        CSV_DEFAULT_COLUMNS,
        start_offset_s=2.0,
        duration_s=6.0,
        time_scale=0.5,
        max_requests=2,
    )
    assert rows.num_prompt_tokens.tolist() == [3, 4]
    assert rows.arrival_s.tolist() == [0.0, 0.5]


def test_start_offset_without_duration_runs_to_the_end(ten_rows: Path) -> None:
    rows = load_trace(ten_rows, CSV_DEFAULT_COLUMNS, start_offset_s=7.5)
    assert rows.num_prompt_tokens.tolist() == [9, 10]


def test_empty_window_is_an_error(ten_rows: Path) -> None:
    with pytest.raises(ConfigError, match=r"no request in the window"):
        load_trace(ten_rows, CSV_DEFAULT_COLUMNS, start_offset_s=100.0)


def test_invalid_option_values(ten_rows: Path) -> None:
    with pytest.raises(ValueError):
        load_trace(ten_rows, CSV_DEFAULT_COLUMNS, time_scale=0.0)
    with pytest.raises(ValueError):
        load_trace(ten_rows, CSV_DEFAULT_COLUMNS, start_offset_s=-1.0)


# --- errors --------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.csv: file not found"):
        load_trace(tmp_path / "missing.csv", AZURE_COLUMNS)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read"):
        load_trace(tmp_path, AZURE_COLUMNS)


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(ConfigError, match=r"e\.csv: empty file"):
        load_trace(tmp_path / "e.csv", AZURE_COLUMNS)


def test_header_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no data rows"):
        load_trace(azure(tmp_path, []), AZURE_COLUMNS)


def test_missing_column_names_it_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", ["TIMESTAMP,ContextTokens", "2023-11-16 18:15:46,1"])
    with pytest.raises(ConfigError, match=r"t\.csv: missing column 'GeneratedTokens'"):
        load_trace(path, AZURE_COLUMNS)


def test_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00\x01garbage\n")
    with pytest.raises(ConfigError, match=r"b\.csv"):
        load_trace(tmp_path / "b.csv", AZURE_COLUMNS)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Permission bits do not stop root (CI runs as root): make opening it fail instead.
    path = azure(tmp_path, ["2023-11-16 18:15:46,1,1"])
    real_open = Path.open

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(ConfigError, match=r"cannot read"):
        load_trace(path, AZURE_COLUMNS)


def test_a_folder_given_as_the_trace_is_unreadable_even_for_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read"):
        load_trace(tmp_path, AZURE_COLUMNS)


GOOD = "2023-11-16 18:15:46.6805900,374,44"
MALFORMED = {
    "missing column": (
        "2023-11-16 18:15:47.0000000,374",
        "missing value in column 'GeneratedTokens'",
    ),
    "empty cell": ("2023-11-16 18:15:47.0000000,,44", "missing value in column 'ContextTokens'"),
    "non-numeric prompt": (
        "2023-11-16 18:15:47.0000000,abc,44",
        "'ContextTokens' value 'abc' is not a number",
    ),
    "non-numeric output": (
        "2023-11-16 18:15:47.0000000,3,4x",
        "'GeneratedTokens' value '4x' is not a number",
    ),
    "zero tokens": ("2023-11-16 18:15:47.0000000,0,44", "positive token count"),
    "negative tokens": ("2023-11-16 18:15:47.0000000,5,-3", "positive token count"),
    "fractional tokens": ("2023-11-16 18:15:47.0000000,5.5,3", "not a whole number"),
    "nan tokens": ("2023-11-16 18:15:47.0000000,nan,3", "not a whole number"),
    "infinite tokens": ("2023-11-16 18:15:47.0000000,5,inf", "not a whole number"),
    "bad timestamp": ("yesterday,5,3", "'TIMESTAMP' value 'yesterday' is not a timestamp"),
    "bad month": ("2023-13-16 18:15:47.0,5,3", "is not a timestamp"),
    "bad hour": ("2023-11-16 25:15:47.0,5,3", "is not a timestamp"),
    "date only": ("2023-11-16,5,3", "is not a timestamp"),
    "seconds among dates": ("12.5,5,3", "is not a timestamp"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("position", [0, 2])
def test_malformed_row_names_file_and_line(tmp_path: Path, case: str, position: int) -> None:
    bad, message = MALFORMED[case]
    rows = [GOOD, GOOD, GOOD]
    rows.insert(position, bad)
    path = azure(tmp_path, rows)
    line = position + 2  # 1-based, the header is line 1
    with pytest.raises(ConfigError) as caught:
        load_trace(path, AZURE_COLUMNS)
    text = str(caught.value)
    if position == 0 and case == "seconds among dates":
        # A number first makes seconds the format; the next row's date is the bad one.
        assert f"{path}, line 3:" in text
        return
    assert f"{path}, line {line}:" in text
    assert message in text
    assert "\n" not in text


def test_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", [AZURE_HEADER, GOOD, "", "", "2023-11-16 18:15:47,x,1"])
    with pytest.raises(ConfigError, match=r"t.csv, line 5:"):
        load_trace(path, AZURE_COLUMNS)


def test_date_among_seconds_names_line(tmp_path: Path) -> None:
    path = generic(tmp_path, ["1.0,1,1", "2.0,1,1", "2023-11-16 18:15:47,1,1"])
    with pytest.raises(
        ConfigError, match=r"line 4: column 'timestamp' value .* not a number of seconds"
    ):
        load_trace(path, CSV_DEFAULT_COLUMNS)


def test_long_bad_value_is_shortened(tmp_path: Path) -> None:
    path = azure(tmp_path, [GOOD, f"{'9' * 30}x{'9' * 30},1,1"])
    with pytest.raises(ConfigError, match=r"\.\.\.") as caught:
        load_trace(path, AZURE_COLUMNS)
    assert len(str(caught.value)) < len(str(path)) + 150


def test_quoted_newline_in_cell_does_not_break_the_message(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", [AZURE_HEADER, GOOD, '"2023-11-16\n18:15:47",1,1'])
    with pytest.raises(ConfigError) as caught:
        load_trace(path, AZURE_COLUMNS)
    assert "\n" not in str(caught.value)
    assert "line 4" in str(caught.value)  # the row's last physical line


# --- helpers -----------------------------------------------------------------------------


def test_read_csv_columns_reports_line_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", ["a,b", "1,2", "", "3,4"])
    data = read_csv_columns(path, ["b"])
    assert data.values == {"b": ["2", "4"]}
    assert data.line_numbers == [2, 4]


def test_parse_timestamps_relative_to_earliest_not_first(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", ["t", "5", "3", "4"])
    times = parse_timestamps_s(read_csv_columns(path, ["t"]), "t")
    assert times.tolist() == [2.0, 0.0, 1.0]
