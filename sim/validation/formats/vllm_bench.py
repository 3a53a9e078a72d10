"""Reader for ``vllm bench serve --save-result --save-detailed`` result JSON.

What the source records and what servesim reconstructs: docs/validation.md,
"Importing measured runs" (the ``vllm-bench`` row). ``start_times`` are the
client's ``time.perf_counter()`` (one clock, arbitrary origin) and ``itls`` the gaps
between streamed chunks (a chunk may carry several tokens).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.errors import ConfigError
from sim.validation.formats.common import count, listing, load_document, number
from sim.validation.runs import ImportedRun, chunk_table, request_table

FORMAT = "vllm-bench"
REQUIRED = ("input_lens", "output_lens", "ttfts", "itls")
OPTIONAL = ("start_times", "latencies", "errors", "queue_times")
SETTINGS: tuple[str, ...] = ("model_id", "backend", "endpoint_type", "label", "tokenizer_id")
SETTINGS += ("num_prompts", "request_rate", "burstiness", "max_concurrency", "date", "duration")


def looks_like(document: Any) -> bool:
    """True for a ``vllm bench serve`` result (detailed, or summary only: refused later)."""
    if not isinstance(document, dict):
        return False
    return "ttfts" in document or {"request_throughput", "mean_ttft_ms"} <= document.keys()


def _columns(document: dict[str, Any], path: Path) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {}
    for field in (*REQUIRED, *OPTIONAL):
        if field not in document or document[field] is None:
            if field in REQUIRED:
                hint = " (save the run with --save-detailed)" if field != "itls" else ""
                raise ConfigError(f"{path}: missing field {field}{hint}")
            continue
        columns[field] = listing(document[field], str(path), field)
    size = len(columns["input_lens"])
    for field, values in columns.items():
        if len(values) != size:
            raise ConfigError(
                f"{path}: field {field} has {len(values)} entries, input_lens has {size}"
            )
    if size == 0:
        raise ConfigError(f"{path}: no requests")
    return columns


def _send_times_s(
    document: dict[str, Any], columns: dict[str, list[Any]], path: Path
) -> list[float]:
    if "start_times" in columns:
        return [
            number(v, f"{path}: start_times[{i}]", "start time")
            for i, v in enumerate(columns["start_times"])
        ]
    if _sent_at_once(document) and document.get("max_concurrency") is None:
        return [0.0] * len(columns["input_lens"])  # all sent at once
    rate = document.get("request_rate")
    raise ConfigError(
        f"{path}: no start_times, and arrivals at request_rate {rate!r} "
        f"(max_concurrency {document.get('max_concurrency')!r}) were random and are not saved: "
        "cannot reconstruct them (rerun with a vLLM that saves start_times)"
    )


def _request(
    columns: dict[str, list[Any]], i: int, sent_s: float, where: str
) -> tuple[list[float], npt.NDArray[np.float64]]:
    """Row (sent, first token, finish in s; prompt, output tokens) and chunk times of request i."""
    num_output = count(columns["output_lens"][i], where, "output_lens")
    ttft_s = number(columns["ttfts"][i], where, "ttfts")
    gaps_s = [number(g, where, "itls") for g in listing(columns["itls"][i], where, "itls")]
    if ttft_s < 0 or any(g < 0 for g in gaps_s):
        raise ConfigError(f"{where}: ttfts and itls must be >= 0")
    first_s = sent_s + ttft_s
    chunk_s = first_s + np.concatenate([[0.0], np.cumsum(gaps_s)])
    finish_s = float(chunk_s[-1])
    if "latencies" in columns:
        finish_s = sent_s + number(columns["latencies"][i], where, "latencies")
        if finish_s < first_s:
            raise ConfigError(f"{where}: latencies is shorter than ttfts")
    num_prompt = count(columns["input_lens"][i], where, "input_lens")
    return [sent_s, first_s, finish_s, num_prompt, num_output], chunk_s


def read_vllm_bench(path: str | Path) -> ImportedRun:
    """A ``vllm bench serve`` result JSON saved with ``--save-result --save-detailed``."""
    source = Path(path)
    document = load_document(source)
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: not a vllm bench serve result (expected a JSON object)")
    columns = _columns(document, source)
    sent_s = _send_times_s(document, columns, source)
    errors = columns.get("errors", [""] * len(sent_s))
    rows: list[list[float]] = []
    held_s: list[float] = []  # time each kept request waited for the client's cap
    queue_s = [  # time each request waited for the client's concurrency limit
        number(v, f"{source}: queue_times[{i}]", "queue time")
        for i, v in enumerate(columns.get("queue_times") or [])
    ]
    chunk_request: list[int] = []
    chunk_time_s: list[float] = []
    failed: list[str] = []
    for i, sent in enumerate(sent_s):
        where = f"{source}: request {i}"
        if errors[i] or count(columns["output_lens"][i], where, "output_lens") < 1:
            failed.append(str(errors[i] or "no output tokens"))
            continue
        row, chunk_s = _request(columns, i, sent, where)
        if queue_s:
            held_s.append(queue_s[i])
        chunk_request.extend([len(rows)] * len(chunk_s))
        chunk_time_s.extend(chunk_s.tolist())
        rows.append(row)
    if not rows:
        raise ConfigError(f"{source}: every request failed ({failed[0]})")
    arrival_s, first_s, finish_s, num_prompt, num_output = np.asarray(rows, dtype=np.float64).T
    _check_seconds(document, first_s - arrival_s, source)
    nan = np.full(arrival_s.shape, np.nan)
    requests = request_table(arrival_s, nan, first_s, finish_s, num_prompt, num_output)
    tokens = chunk_table(np.asarray(chunk_request), np.asarray(chunk_time_s), arrival_s)
    if held_s:  # the schedule the client's cap held requests back from, in table order
        scheduled_s = (arrival_s - np.asarray(held_s))[np.argsort(arrival_s, kind="stable")]
        requests["scheduled_s"] = scheduled_s - scheduled_s.min()
    meta = {
        "format": FORMAT,
        "source": str(source),
        "num_requests": len(requests),
        "num_failed": len(failed),
        "failed_errors": sorted(set(failed))[:5],
        "arrival": "start_times (client send time)"
        if "start_times" in columns
        else "0 for every request (request_rate inf: all sent at once)",
        "client_queue_s": {"mean": sum(queue_s) / len(queue_s), "max": max(queue_s)}
        if queue_s
        else None,
        "engine": {"model": document.get("model_id")},
        "settings": {k: document.get(k) for k in SETTINGS if k in document},
        "load": _load(document, source),
    }
    return ImportedRun(requests, meta, tokens)


def _check_seconds(document: dict[str, Any], ttft_s: npt.NDArray[np.float64], source: Path) -> None:
    """ConfigError when the completed requests' ``ttfts`` do not average to the file's own
    ``mean_ttft_ms`` (vLLM's, over the same requests): they are not in seconds, as
    ``vllm bench serve`` saves them (times in milliseconds read as seconds are 1000x)."""
    stated = document.get("mean_ttft_ms")
    if isinstance(stated, bool) or not isinstance(stated, int | float) or not stated > 0:
        return
    mean_ms = 1e3 * float(np.mean(ttft_s))
    if not math.isclose(mean_ms, stated, rel_tol=0.01):
        raise ConfigError(
            f"{source}: ttfts average {mean_ms:.6g} ms over the completed requests, but "
            f"mean_ttft_ms is {stated:.6g}: ttfts and itls must be in seconds, as vllm bench "
            "serve saves them, and the summary of the same requests"
        )


def _load(document: dict[str, Any], source: Path) -> dict[str, Any] | None:
    """The client's cap as a replay load (``sim.validation.predict.replay_work``), if any."""
    limit = document.get("max_concurrency")
    if limit is None:
        return None
    cap = count(limit, str(source), "max_concurrency")
    if cap < 1:
        raise ConfigError(f"{source}: max_concurrency must be >= 1, got {limit!r}")
    at_once: dict[str, Any] = {"profile": "throughput"} if _sent_at_once(document) else {}
    return at_once | {"max_concurrency": cap}


def _sent_at_once(document: dict[str, Any]) -> bool:
    """Whether the run's ``request_rate`` is infinite (``"inf"`` in the JSON): every
    request sent at once."""
    rate = document.get("request_rate")
    if isinstance(rate, float):
        return math.isinf(rate)
    return isinstance(rate, str) and rate.lower() in ("inf", "infinity")
