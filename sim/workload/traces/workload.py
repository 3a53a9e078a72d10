"""``workload: {kind: trace, format: ...}``: a trace file replayed as requests.

Formats ``azure``, ``csv`` (columns named by ``*_column``, optional prefix hash ids),
``burstgpt``, ``mooncake`` and ``sharegpt`` (lengths without times: ``arrival``
gives the process); docs/traces.md tables each one's columns. A relative ``path``
is resolved against the scenario's folder. Every timed format takes the same window
(``select``): sort by timestamp (stable), keep the rows in ``[start_offset_s,
start_offset_s + duration_s)`` after the first, shift the first kept to 0, keep
``max_requests``, then rescale by ``time_scale`` or to a mean rate of ``rate_per_s``
(``(n - 1) / span``: the same gaps, stretched or squeezed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sim.config import FloatArray, Frozen, IntArray, anchored
from sim.errors import ConfigError
from sim.workload.arrivals import ArrivalConfig, arrival_times_s
from sim.workload.trace import (
    AZURE_COLUMNS,
    CSV_DEFAULT_COLUMNS,
    HashIds,
    TraceColumns,
    TraceRequests,
    parse_timestamps_s,
    parse_token_counts,
    read_csv_columns,
)
from sim.workload.traces.burstgpt import read_burstgpt
from sim.workload.traces.mooncake import MOONCAKE_BLOCK_TOKENS, read_mooncake
from sim.workload.traces.sharegpt import read_sharegpt


class TraceWorkload(Frozen):
    """Replay of a trace file; the module docstring lists the formats and options."""

    kind: Literal["trace"] = "trace"
    path: str = Field(min_length=1)
    format: Literal["azure", "csv", "burstgpt", "mooncake", "sharegpt"] = "azure"
    timestamp_column: str | None = Field(default=None, min_length=1)
    prompt_tokens_column: str | None = Field(default=None, min_length=1)
    output_tokens_column: str | None = Field(default=None, min_length=1)
    hash_ids_column: str | None = Field(default=None, min_length=1)  # csv only
    hash_block_tokens: int | None = Field(default=None, gt=0)  # tokens per hash id
    model: str | None = Field(default=None, min_length=1)  # burstgpt: keep one model
    log_type: str | None = Field(default=None, min_length=1)  # burstgpt: keep one log type
    arrival: ArrivalConfig | None = None  # sharegpt: the arrival process
    time_scale: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    rate_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_requests: int | None = Field(default=None, gt=0)
    start_offset_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    duration_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # At most this many requests in flight (vllm bench serve --max-concurrency).
    max_concurrency: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check_format_fields(self) -> TraceWorkload:
        only = {
            "csv": (
                "timestamp_column",
                "prompt_tokens_column",
                "output_tokens_column",
                "hash_ids_column",
            ),
            "burstgpt": ("model", "log_type"),
            "sharegpt": ("arrival",),
        }
        values = self.model_dump()
        for fmt, fields in only.items():
            for field in fields:
                if self.format != fmt and values[field] is not None:
                    raise ValueError(f"{field} applies only to format '{fmt}'")
        if self.hash_block_tokens is not None and self.format not in ("csv", "mooncake"):
            raise ValueError("hash_block_tokens applies only to formats 'csv' and 'mooncake'")
        unread = self.format == "csv" and self.hash_ids_column is None  # no ids read
        if self.hash_block_tokens is not None and unread:
            raise ValueError("hash_block_tokens sizes the ids of hash_ids_column: give it")
        if self.rate_per_s is not None and self.time_scale != 1.0:
            raise ValueError("give time_scale or rate_per_s, not both")
        if self.format == "sharegpt":
            if self.arrival is None:
                raise ValueError("format 'sharegpt' has no times: give an arrival process")
            timed = ("time_scale", "rate_per_s", "start_offset_s", "duration_s")
            if any(name in self.model_fields_set for name in timed):
                raise ValueError("format 'sharegpt' has no times to window or rescale")
        return self

    def columns(self) -> TraceColumns:
        """The three column names to read (formats ``azure`` and ``csv``)."""
        if self.format == "azure":
            return AZURE_COLUMNS
        default = CSV_DEFAULT_COLUMNS
        return TraceColumns(
            self.timestamp_column or default.timestamp,
            self.prompt_tokens_column or default.prompt_tokens,
            self.output_tokens_column or default.output_tokens,
        )


def select(times_s: FloatArray, window: TraceWorkload, path: Path) -> tuple[IntArray, FloatArray]:
    """Row indices of the replayed requests, in arrival order, and their arrival times:
    ``window``'s offset, duration, request cap and time scale or rate (module docstring)."""
    order = np.argsort(times_s, kind="stable")
    relative_s = times_s[order] - (float(times_s[order[0]]) if order.size else 0.0)
    keep = relative_s >= window.start_offset_s
    if window.duration_s is not None:
        keep &= relative_s < window.start_offset_s + window.duration_s
    order, relative_s = order[keep], relative_s[keep]
    if order.size == 0:
        raise ConfigError(
            f"{path}: no request in the window starting {window.start_offset_s} s "
            f"after the first row (duration {window.duration_s} s)"
        )
    arrival_s = (relative_s - relative_s[0]) * window.time_scale
    if window.max_requests is not None:
        order, arrival_s = order[: window.max_requests], arrival_s[: window.max_requests]
    if window.rate_per_s is not None:
        span_s = float(arrival_s[-1])
        if order.size < 2 or span_s <= 0:
            raise ConfigError(f"{path}: rate_per_s needs a window of requests spanning time")
        arrival_s = arrival_s * ((order.size - 1) / span_s / window.rate_per_s)
    return order.astype(np.int64), arrival_s


def _hash_ids(cell: str, where: str) -> tuple[int, ...]:
    """A CSV cell of hash ids: a JSON list ``[1, 2]`` or ids separated by spaces or ``;``."""
    text = cell.strip()
    try:
        values = json.loads(text) if text.startswith("[") else text.replace(";", " ").split()
        ids = tuple(int(v) for v in values)
    except (ValueError, TypeError):
        raise ConfigError(f"{where}: hash ids must be whole numbers, got {cell[:40]!r}") from None
    if any(i < 0 for i in ids):
        raise ConfigError(f"{where}: hash ids must be >= 0")
    return ids


def _read_csv(config: TraceWorkload, path: Path) -> TraceRequests:
    columns = config.columns()
    names = [columns.timestamp, columns.prompt_tokens, columns.output_tokens]
    if config.hash_ids_column is not None:
        names.append(config.hash_ids_column)
    data = read_csv_columns(path, names)
    if not data.line_numbers:
        raise ConfigError(f"{path}: no data rows after the header")
    hash_ids: HashIds | None = None
    if config.hash_ids_column is not None:
        cells = data.values[config.hash_ids_column]
        hash_ids = tuple(
            _hash_ids(c, f"{path}, line {n}: column {config.hash_ids_column!r}")
            for c, n in zip(cells, data.line_numbers, strict=True)
        )
    return TraceRequests(
        parse_timestamps_s(data, columns.timestamp),
        parse_token_counts(data, columns.prompt_tokens),
        parse_token_counts(data, columns.output_tokens),
        hash_ids,
        config.hash_block_tokens if hash_ids is not None else None,
    )


def _rows(config: TraceWorkload, path: Path) -> TraceRequests:
    """Every row of the file, times in seconds from the first, before the window."""
    if config.format in ("azure", "csv"):
        return _read_csv(config, path)
    if config.format == "burstgpt":
        return read_burstgpt(path, config.model, config.log_type)[0]
    return read_mooncake(path, config.hash_block_tokens or MOONCAKE_BLOCK_TOKENS)


def trace_requests(
    config: TraceWorkload, rng: np.random.Generator, base_dir: Path | str | None = None
) -> TraceRequests:
    """The requests a trace workload replays (``rng``: arrivals of a ``sharegpt`` list)."""
    path = anchored(config.path, base_dir)
    if config.format == "sharegpt":
        assert config.arrival is not None
        prompts, outputs = read_sharegpt(path)
        if config.max_requests is not None:
            prompts, outputs = prompts[: config.max_requests], outputs[: config.max_requests]
        (arrival_rng,) = rng.spawn(1)
        arrival_s = arrival_times_s(config.arrival, arrival_rng, num_requests=prompts.size)
        return TraceRequests(arrival_s, prompts, outputs)
    rows = _rows(config, path)
    kept, arrival_s = select(rows.arrival_s, config, path)
    hash_ids = None
    if rows.block_hash_ids is not None:
        hash_ids = tuple(rows.block_hash_ids[i] for i in kept.tolist())
    return TraceRequests(
        arrival_s,
        rows.num_prompt_tokens[kept],
        rows.num_output_tokens[kept],
        hash_ids,
        rows.block_hash_tokens,
    )
