"""BurstGPT traces: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``.

BurstGPT (Wang et al., "BurstGPT: A Real-world Workload Dataset to Optimize
LLM Serving Systems", 2024; github.com/HPMLL/BurstGPT, CC BY 4.0) logs
requests to ChatGPT and GPT-4 in Azure OpenAI: ``Timestamp`` in seconds
from the start of the trace, ``Model`` (``ChatGPT`` or ``GPT-4``),
``Request tokens`` and ``Response tokens``, ``Total tokens`` (their sum)
and ``Log Type`` (``Conversation log`` or ``API log``).

Rows can be restricted to one ``model`` and one ``log_type``. Rows with 0
response tokens are requests that failed in the original service: they are
skipped (the count is returned), as a served request emits at least one
token. A row with 0 request tokens is an error naming its line.
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import ConfigError
from sim.workload.trace import (
    CsvColumns,
    TraceRequests,
    parse_timestamps_s,
    parse_token_counts,
    read_csv_columns,
)

TIMESTAMP, MODEL, LOG_TYPE = "Timestamp", "Model", "Log Type"
REQUEST, RESPONSE = "Request tokens", "Response tokens"


def _subset(data: CsvColumns, keep: list[bool]) -> CsvColumns:
    values = {k: [v for v, ok in zip(vs, keep, strict=True) if ok] for k, vs in data.values.items()}
    lines = [n for n, ok in zip(data.line_numbers, keep, strict=True) if ok]
    return CsvColumns(data.path, values, lines)


def read_burstgpt(
    path: Path, model: str | None = None, log_type: str | None = None
) -> tuple[TraceRequests, int]:
    """The requests of a BurstGPT CSV, optionally of one model and one log type, and
    the number of rows skipped as failed."""
    data = read_csv_columns(path, [TIMESTAMP, MODEL, REQUEST, RESPONSE, LOG_TYPE])
    keep = [
        (model is None or m == model) and (log_type is None or t == log_type)
        for m, t in zip(data.values[MODEL], data.values[LOG_TYPE], strict=True)
    ]
    if not any(keep):
        seen = sorted(set(zip(data.values[MODEL], data.values[LOG_TYPE], strict=True)))
        raise ConfigError(
            f"{path}: no row of model {model!r} and log type {log_type!r} "
            f"(the file has: {', '.join(f'{m} / {t}' for m, t in seen) or 'no rows'})"
        )
    data = _subset(data, keep)
    failed = [cell.strip() in ("0", "0.0") for cell in data.values[RESPONSE]]
    num_failed = sum(failed)
    if num_failed == len(failed):
        raise ConfigError(f"{path}: every selected row has 0 response tokens (failed requests)")
    data = _subset(data, [not f for f in failed])
    times_s = parse_timestamps_s(data, TIMESTAMP)
    prompt = parse_token_counts(data, REQUEST)
    return TraceRequests(times_s, prompt, parse_token_counts(data, RESPONSE)), num_failed
