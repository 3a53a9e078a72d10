"""CSV trace files read strictly: named columns, token counts and timestamps.

The Azure LLM inference traces (``TIMESTAMP,ContextTokens,GeneratedTokens``,
timestamps such as ``2023-11-16 18:15:46.6805900``), generic CSVs whose three
column names are configured, and the empirical length sampler's column. A timestamp
is a number of seconds or an ISO 8601 date-time; the first data row decides which.
Every problem raises a ``ConfigError`` naming the file and, for a row, its line
(1-based, the header being line 1).
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

from sim.config import FloatArray, IntArray
from sim.errors import ConfigError

HashIds = tuple[tuple[int, ...], ...]


class TraceRequests(NamedTuple):
    """A trace's requests, as every format's reader returns them (times in seconds
    from the first row) and once replayed (in arrival order, from 0); hash ids
    only where the trace has them."""

    arrival_s: FloatArray
    num_prompt_tokens: IntArray
    num_output_tokens: IntArray
    block_hash_ids: HashIds | None = None
    block_hash_tokens: int | None = None


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


def _show(value: str) -> str:
    """A cell value quoted for a one-line message, shortened if long."""
    return repr(value if len(value) <= 40 else value[:37] + "...")


def read_csv_columns(path: Path, columns: Sequence[str]) -> CsvColumns:
    """The named columns of a CSV file with a header line (blank lines skipped; a
    missing or empty cell is an error naming its line)."""
    try:
        with path.open("r", newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise ConfigError(f"{path}: empty file, expected a header line")
            names = [name.strip() for name in header]
            # A header's trailing empty names ('a,b,' from a spreadsheet's export) name
            # no column: its rows are as wide as the names before them.
            num_columns = len(names)
            while num_columns > 0 and not names[num_columns - 1]:
                num_columns -= 1
            indices: list[int] = []
            for column in columns:
                if column not in names:
                    raise ConfigError(
                        f"{path}: missing column {column!r} (header has: {', '.join(names)})"
                    )
                if names.count(column) > 1:
                    # Which of the two holds the data is a guess: refuse rather than pick.
                    raise ConfigError(f"{path}: column {column!r} appears twice in the header")
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
                # A cell more or less than the header (an unquoted '1,200') shifts the
                # cells after it into the wrong columns: refuse it rather than read it.
                width = len(row)
                while width > num_columns and not row[width - 1].strip():
                    width -= 1  # trailing empty cells ('a,b,c,') hold nothing to shift
                if width != num_columns:
                    raise ConfigError(
                        f"{path}, line {line}: {width} cells, the header has {num_columns} columns"
                    )
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


TOO_MANY_TOKENS = 2.0**53
"""A token count this large or larger is refused: float64 holds whole numbers
exactly only below it, and int64 overflows not far above."""


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
        if bool(good.all()) and float(counts.max()) < TOO_MANY_TOKENS:
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
    if value >= TOO_MANY_TOKENS:
        raise ConfigError(f"{where} is too large")


# Date, "T" or space, time with optional fraction, optional "Z" or +hh:mm offset.
_ISO_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?"
)


def _iso_to_ns(cell: str) -> int | None:
    """Nanoseconds since 0001-01-01 (UTC if an offset is given), or None: ints keep the
    Azure timestamps' 100 ns (a float of epoch seconds resolves about 0.2 us)."""
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
    """Timestamps of one column in seconds from the earliest one: numbers of seconds, or
    ISO 8601 date-times (naive ones assumed to share one time zone)."""
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
