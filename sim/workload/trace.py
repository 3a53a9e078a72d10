"""Trace replay: request arrival times and token counts read from a CSV file.

Two layouts are understood: the Azure LLM inference trace 2023
(``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps such as
``2023-11-16 18:15:46.6805900``) and a generic CSV whose three column names
are given by the caller. A timestamp is either a number of seconds or an ISO
8601 date-time; the first data row decides which, and every row must agree.

Every problem with the file (missing file or column, a malformed row) raises
:class:`sim.errors.ConfigError` whose one-line message names the file and,
for a row, its line number (1-based, the header being line 1).

The CSV helpers here (:func:`read_csv_columns`, :func:`parse_token_counts`)
are also used by the empirical length sampler in :mod:`sim.workload.lengths`.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from sim.errors import ConfigError
from sim.workload.traces.window import TraceWindow, select

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TraceColumns:
    """Names of the three columns a trace needs."""

    timestamp: str
    prompt_tokens: str
    output_tokens: str


AZURE_COLUMNS = TraceColumns("TIMESTAMP", "ContextTokens", "GeneratedTokens")
"""Columns of the Azure LLM inference traces (2023 and 2024)."""

CSV_DEFAULT_COLUMNS = TraceColumns("timestamp", "prompt_tokens", "output_tokens")
"""Default columns of a generic CSV trace."""


@dataclass(frozen=True, slots=True)
class CsvColumns:
    """Raw string cells of some columns, plus the file line of each data row."""

    path: Path
    values: dict[str, list[str]]
    line_numbers: list[int]


class TraceRows(NamedTuple):
    """A parsed trace: one entry per request, sorted by arrival time."""

    arrival_s: FloatArray
    num_prompt_tokens: IntArray
    num_output_tokens: IntArray


def _show(value: str) -> str:
    """A cell value quoted for a one-line message, shortened if long."""
    return repr(value if len(value) <= 40 else value[:37] + "...")


def read_csv_columns(path: Path, columns: Sequence[str]) -> CsvColumns:
    """Read the named columns of a CSV file with a header line.

    Blank lines are skipped. A data row too short to hold a wanted column, or
    with an empty cell there, is an error naming its line.
    """
    try:
        with path.open("r", newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise ConfigError(f"{path}: empty file, expected a header line")
            names = [name.strip() for name in header]
            indices: list[int] = []
            for column in columns:
                if column not in names:
                    raise ConfigError(
                        f"{path}: missing column {column!r} (header has: {', '.join(names)})"
                    )
                indices.append(names.index(column))
            values: list[list[str]] = [[] for _ in columns]
            line_numbers: list[int] = []
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue  # blank line, e.g. a trailing newline
                line = reader.line_num
                for column, index, cells in zip(columns, indices, values, strict=True):
                    cell = row[index].strip() if index < len(row) else ""
                    if not cell:
                        raise ConfigError(
                            f"{path}, line {line}: missing value in column {column!r}"
                        )
                    cells.append(cell)
                line_numbers.append(line)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except csv.Error as error:
        raise ConfigError(f"{path}: malformed CSV ({error})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    return CsvColumns(path, dict(zip(columns, values, strict=True)), line_numbers)


def parse_token_counts(data: CsvColumns, column: str) -> IntArray:
    """Whole, positive token counts of one column, as int64."""
    cells = data.values[column]
    if not cells:
        return np.zeros(0, dtype=np.int64)
    try:
        # Fast path: numpy parses the whole column at C speed.
        counts = np.asarray(cells, dtype=np.float64)
    except ValueError:
        counts = None
    if counts is not None:
        good = np.isfinite(counts) & (counts >= 1) & (counts == np.floor(counts))
        if bool(good.all()) and float(counts.max()) < 2.0**53:
            return counts.astype(np.int64)
    for cell, line in zip(cells, data.line_numbers, strict=True):
        _check_token_count(cell, data.path, line, column)
    # Reached only if numpy rejects a spelling Python accepts (e.g. "1_000").
    return np.asarray([float(cell) for cell in cells], dtype=np.float64).astype(np.int64)


def _check_token_count(cell: str, path: Path, line: int, column: str) -> None:
    """Raise the error for one bad token-count cell; return if it is fine."""
    where = f"{path}, line {line}: column {column!r} value {_show(cell)}"
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(f"{where} is not a number") from None
    if not math.isfinite(value) or value != math.floor(value):
        raise ConfigError(f"{where} is not a whole number of tokens")
    if value < 1:
        raise ConfigError(f"{where} must be a positive token count")
    if value >= 2.0**53:
        raise ConfigError(f"{where} is too large")


# Date, "T" or space, time with optional fraction, optional "Z" or +hh:mm offset.
_ISO_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?"
)


def _iso_to_ns(cell: str) -> int | None:
    """Nanoseconds since 0001-01-01 (UTC if an offset is given), or None.

    Python ints keep the full 100 ns resolution of the Azure timestamps; a
    float of seconds since the epoch would only resolve about 0.2 us.
    """
    match = _ISO_RE.fullmatch(cell)
    if match is None:
        return None
    date_text, hour, minute, second, fraction, offset = match.groups()
    try:
        day = dt.date.fromisoformat(date_text).toordinal()
    except ValueError:
        return None
    h, m, s = int(hour), int(minute), int(second)
    if h > 23 or m > 59 or s > 60:  # 60: a leap second
        return None
    seconds = ((day * 24 + h) * 60 + m) * 60 + s
    if offset and offset != "Z":
        sign = -1 if offset[0] == "+" else 1  # 12:00+01:00 is 11:00 UTC
        digits = offset[1:].replace(":", "")
        seconds += sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    nanos = int((fraction or "0")[:9].ljust(9, "0"))
    return seconds * 1_000_000_000 + nanos


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def parse_timestamps_s(data: CsvColumns, column: str) -> FloatArray:
    """Timestamps of one column in seconds, relative to the earliest one.

    Numbers are taken as seconds; otherwise every cell must be an ISO 8601
    date-time (naive ones are assumed to share one time zone).
    """
    cells = data.values[column]
    if not cells:
        return np.zeros(0, dtype=np.float64)
    if _is_number(cells[0]):
        seconds: list[float] = []
        for cell, line in zip(cells, data.line_numbers, strict=True):
            try:
                number = float(cell)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise ConfigError(
                    f"{data.path}, line {line}: column {column!r} value {_show(cell)} "
                    "is not a number of seconds like the rows before it"
                )
            seconds.append(number)
        times_s = np.asarray(seconds, dtype=np.float64)
        relative_s: FloatArray = times_s - float(times_s.min())
        return relative_s
    nanos: list[int] = []
    for cell, line in zip(cells, data.line_numbers, strict=True):
        stamp = _iso_to_ns(cell)
        if stamp is None:
            raise ConfigError(
                f"{data.path}, line {line}: column {column!r} value {_show(cell)} "
                "is not a timestamp (expected e.g. 2023-11-16 18:15:46.6805900)"
            )
        nanos.append(stamp)
    first = min(nanos)
    relative_ns = np.asarray([stamp - first for stamp in nanos], dtype=np.int64)
    return relative_ns.astype(np.float64) / 1e9


def load_trace(
    path: Path,
    columns: TraceColumns,
    *,
    time_scale: float = 1.0,
    max_requests: int | None = None,
    start_offset_s: float = 0.0,
    duration_s: float | None = None,
) -> TraceRows:
    """Parse a trace file into arrays ready for replay.

    The window (:mod:`sim.workload.traces.window`): sort rows by timestamp;
    keep those in ``[start_offset_s, start_offset_s + duration_s)`` after the
    first row; shift the first kept request to 0; multiply times by
    ``time_scale`` (0.5 replays twice as fast); keep the first
    ``max_requests``. A trace left with no request is an error.
    """
    if time_scale <= 0 or start_offset_s < 0:
        raise ValueError("time_scale must be > 0 and start_offset_s >= 0")
    data = read_csv_columns(path, [columns.timestamp, columns.prompt_tokens, columns.output_tokens])
    if not data.line_numbers:
        raise ConfigError(f"{path}: no data rows after the header")
    times_s = parse_timestamps_s(data, columns.timestamp)
    prompt = parse_token_counts(data, columns.prompt_tokens)
    output = parse_token_counts(data, columns.output_tokens)
    window = TraceWindow(
        time_scale=time_scale,
        max_requests=max_requests,
        start_offset_s=start_offset_s,
        duration_s=duration_s,
    )
    rows, arrival_s = select(times_s, window, path)
    return TraceRows(arrival_s, prompt[rows], output[rows])
