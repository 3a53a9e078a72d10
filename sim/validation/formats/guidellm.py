"""Reader for GuideLLM benchmark reports (``guidellm run ... --output-path X.json``).

What a report records and what servesim takes from it: docs/validation.md,
"Importing measured runs" (the ``guidellm`` row, and "GuideLLM: commands, phases,
loads, prefixes"). A request's times are Unix epoch seconds on the client (``_times``
reads both layouts); the scheduler's targeted start is kept as ``scheduled_s``, the
schedule a capped rate replays.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ConfigError
from sim.validation.formats.common import (
    count,
    first_present,
    listed_once,
    listing,
    load_document,
    mapping,
    number,
    with_shared_prefix,
)
from sim.validation.runs import ImportedRun, request_table

FORMAT = "guidellm"


def looks_like(document: Any) -> bool:
    """True for a GuideLLM report: an object with a ``benchmarks`` list."""
    return isinstance(document, dict) and isinstance(document.get("benchmarks"), list)


def _times(request: dict[str, Any], where: str) -> tuple[float, float, float, float]:
    """Sent, first-token and finish times of one request, and when the scheduler meant
    to send it (its send time where the report does not say); epoch seconds."""
    info = request.get("info")
    if isinstance(info, dict) and isinstance(info.get("timings"), dict):
        t = info["timings"]
        start = first_present(t, "request_start", "resolve_start")
        first = t.get("first_token_iteration")
        last = first_present(t, "last_token_iteration", "request_end", "resolve_end")
        targeted = t.get("targeted_start")
        names = ("info.timings.request_start", "info.timings.first_token_iteration")
        last_name = "info.timings.last_token_iteration"
        targeted_name = "info.timings.targeted_start"
    else:
        start = first_present(request, "request_start_time", "start_time")
        first = request.get("first_token_time")
        last = first_present(request, "last_token_time", "end_time", "request_end_time")
        targeted = (request.get("scheduler_info") or {}).get("targeted_start_time")
        names = ("start_time", "first_token_time")
        last_name, targeted_name = "last_token_time", "scheduler_info.targeted_start_time"
    for value, name in ((start, names[0]), (first, names[1]), (last, last_name)):
        if value is None:
            raise ConfigError(f"{where}: missing field {name}")
    sent_s = number(start, where, names[0])
    first_s = number(first, where, names[1])
    finish_s = number(last, where, last_name)
    if not sent_s <= first_s <= finish_s:
        raise ConfigError(f"{where}: times must not decrease (sent, first token, last token)")
    targeted_s = sent_s if targeted is None else number(targeted, where, targeted_name)
    return sent_s, first_s, finish_s, targeted_s


def _tokens(request: dict[str, Any], where: str) -> tuple[int, int]:
    prompt = first_present(request, "prompt_tokens")
    output = first_present(request, "output_tokens")
    if prompt is None:
        prompt = (request.get("input_metrics") or {}).get("total_tokens")
    if output is None:
        output = (request.get("output_metrics") or {}).get("total_tokens")
    for value, name in ((prompt, "prompt_tokens"), (output, "output_tokens")):
        if value is None:
            raise ConfigError(f"{where}: missing field {name}")
    num_prompt = count(prompt, where, "prompt_tokens")
    num_output = count(output, where, "output_tokens")
    if num_prompt < 1 or num_output < 1:
        raise ConfigError(f"{where}: prompt_tokens and output_tokens must be >= 1")
    return num_prompt, num_output


def _cached_tokens(request: dict[str, Any], where: str) -> int:
    """Prompt tokens the server reported as prefix-cache hits (0 where it reported none)."""
    cached = first_present(request, "cached_tokens")
    if cached is None:
        cached = (request.get("input_metrics") or {}).get("cached_tokens")
    return 0 if cached is None else count(cached, where, "cached_tokens")


def _benchmarks(document: Any, source: Path) -> list[Any]:
    if not looks_like(document):
        raise ConfigError(f"{source}: not a GuideLLM report (no benchmarks list)")
    benchmarks: list[Any] = document["benchmarks"]
    if not benchmarks:
        raise ConfigError(f"{source}: benchmarks is empty")
    return benchmarks


def _check_index(index: int, benchmarks: list[Any], source: Path) -> None:
    if not 0 <= index < len(benchmarks):
        raise ConfigError(f"{source}: --benchmark {index} out of range 0..{len(benchmarks) - 1}")


def read_guidellm(
    path: str | Path, benchmark: int | None = None, prefix_tokens: int | None = None
) -> ImportedRun:
    """Benchmark ``benchmark`` (the only one, by default) of a GuideLLM report;
    ``prefix_tokens``: a shared prompt prefix declared (else the report's, if any)."""
    source = Path(path)
    document = load_document(source)
    benchmarks = _benchmarks(document, source)
    if benchmark is None:
        if len(benchmarks) > 1:
            raise ConfigError(
                f"{source}: {len(benchmarks)} benchmarks in this report; choose one with "
                f"--benchmark 0..{len(benchmarks) - 1}, or import them all as phases "
                "(servesim import-run FILE --out DIR)"
            )
        benchmark = 0
    _check_index(benchmark, benchmarks, source)
    return _read_benchmark(document, source, benchmark, prefix_tokens)


def read_guidellm_phases(
    path: str | Path, benchmarks: Sequence[int] | None = None, prefix_tokens: int | None = None
) -> list[ImportedRun]:
    """Every benchmark of a GuideLLM report (or those listed), one run each, in order."""
    source = Path(path)
    document = load_document(source)
    every = _benchmarks(document, source)
    chosen = range(len(every)) if benchmarks is None else benchmarks
    for index in chosen:
        _check_index(index, every, source)
    return [_read_benchmark(document, source, index, prefix_tokens) for index in chosen]


def _read_benchmark(
    document: dict[str, Any], source: Path, index: int, prefix_tokens: int | None
) -> ImportedRun:
    here = f"{source}: benchmarks[{index}]"
    bench = mapping(document["benchmarks"][index], here, "benchmark")
    requests = mapping(bench.get("requests"), here, "requests")
    successful = listing(requests.get("successful"), here, "requests.successful")
    if not successful:
        raise ConfigError(f"{here}: no successful requests")
    rows: list[tuple[float, float, float, float, int, int]] = []
    seen: dict[Any, str] = {}
    num_cached_tokens = 0  # prefix-cache hits the server reported (a caveat if unshared)
    for i, raw in enumerate(successful):
        where = f"{here}.requests.successful[{i}]"
        request = mapping(raw, where, "request")
        listed_once(seen, request.get("request_id"), where, "request_id")
        rows.append((*_times(request, where), *_tokens(request, where)))
        num_cached_tokens += _cached_tokens(request, where)
    columns = np.asarray(rows, dtype=np.float64).T
    sent_s, first_s, finish_s, targeted_s, num_prompt, num_output = columns
    nan = np.full(sent_s.shape, np.nan)
    table = request_table(sent_s, nan, first_s, finish_s, num_prompt, num_output)
    # The schedule (GuideLLM's targeted starts), from its own first entry, in the
    # table's order: what a capped rate replays (sim.validation.predict).
    scheduled_s = targeted_s[np.argsort(sent_s, kind="stable")]
    table["scheduled_s"] = scheduled_s - scheduled_s.min()
    config = _object(bench.get("config"))
    strategy = config.get("strategy") or (bench.get("args") or {}).get("strategy")
    meta = {
        "format": FORMAT,
        "source": str(source),
        "benchmark": index,
        "num_requests": len(table),
        "num_failed": len(requests.get("errored") or []),
        "num_incomplete": len(requests.get("incomplete") or []),
        "arrival": "request start (client send time)",
        "engine": {"model": _model(document, bench)},
        "settings": {"strategy": strategy} if strategy is not None else {},
        "load": strategy_load(strategy, f"{here}.config.strategy"),
    }
    if num_cached_tokens:
        meta["num_cached_tokens"] = num_cached_tokens
    run = ImportedRun(table, meta)
    if prefix_tokens is not None:
        return with_shared_prefix(run, prefix_tokens, 1, "--prefix-tokens")
    declared = report_prefix(document, bench, here)
    if declared is None:
        return run
    tokens, groups = declared
    return with_shared_prefix(run, tokens, groups, f"{source}: prefix_tokens")


def _object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a field a report may omit)."""
    return value if isinstance(value, dict) else {}


def strategy_load(strategy: Any, where: str) -> dict[str, Any] | None:
    """A benchmark's strategy as a servesim load profile (``sim.workload.profiles``):
    ``{"profile": ..., "streams" | "rate_per_s" | "max_concurrency": ...}``; None for
    a strategy without one (a trace replay, or none recorded): replayed at its
    measured send times."""
    if not isinstance(strategy, dict):
        return None
    kind = strategy.get("type_") or strategy.get("type")
    limit = strategy.get("max_concurrency")
    capped = {} if limit is None else {"max_concurrency": count(limit, where, "max_concurrency")}
    if kind == "synchronous":
        return {"profile": "synchronous"}
    if kind == "concurrent":
        return {
            "profile": "concurrent",
            "streams": count(strategy.get("streams"), where, "streams"),
        }
    if kind == "throughput":
        return {"profile": "throughput"} | capped
    if kind in ("constant", "poisson"):
        rate = number(strategy.get("rate"), where, "rate")
        return {"profile": kind, "rate_per_s": rate} | capped
    return None


_PREFIX_TEXT = re.compile(r"prefix_(tokens|count)\s*[=:]\s*\"?(\d+)")


def _prefix(holder: dict[str, Any], where: str) -> tuple[int, int]:
    """``(prefix_tokens, prefix_count)`` of an object that names ``prefix_tokens``; a count
    absent or 0 is 1 (one shared prefix). A true is not 1 (bool is an int in Python)."""
    num_prefixes = holder.get("prefix_count")
    return (
        count(holder["prefix_tokens"], where, "prefix_tokens"),
        1 if num_prefixes is None else count(num_prefixes, where, "prefix_count") or 1,
    )


def _prefix_sources(value: Any, where: str) -> Iterator[tuple[int, int]]:
    """Every ``(prefix_tokens, prefix_count)`` a data configuration names, in
    objects (``prefix_tokens``, ``prefix_buckets``) or in argument strings
    (``prompt_tokens=256,prefix_tokens=64``, a JSON string)."""
    if isinstance(value, dict):
        buckets = value.get("prefix_buckets")
        if isinstance(buckets, list):
            for bucket in buckets:
                if isinstance(bucket, dict) and bucket.get("prefix_tokens") is not None:
                    yield _prefix(bucket, where)
        elif value.get("prefix_tokens") is not None:
            yield _prefix(value, where)
        for key, item in value.items():
            if key != "prefix_buckets":
                yield from _prefix_sources(item, where)
    elif isinstance(value, list):
        for item in value:
            yield from _prefix_sources(item, where)
    elif isinstance(value, str) and "prefix_" in value:
        found = dict(_PREFIX_TEXT.findall(value))
        if "tokens" in found:
            yield int(found["tokens"]), int(found.get("count", 1))


def report_prefix(
    document: dict[str, Any], bench: dict[str, Any], where: str
) -> tuple[int, int] | None:
    """``(prefix_tokens, prefix_count)`` of the synthetic data the report names
    (report ``config.data`` / ``config.spec.data``, ``args.data``, the benchmark's
    ``config.requests``),
    None if none or 0 tokens; ConfigError for several different prefixes."""
    holders = [
        document.get("config"),
        document.get("args"),
        (bench.get("config") or {}).get("requests"),
    ]
    found = {pair for holder in holders for pair in _prefix_sources(holder, where) if pair[0] > 0}
    if len(found) > 1:
        raise ConfigError(
            f"{where}: the report names several prefixes {sorted(found)}; declare the one "
            "to replay with --prefix-tokens N"
        )
    return found.pop() if found else None


def _model(document: dict[str, Any], bench: dict[str, Any]) -> Any:
    """The served model, where the report names it (v2: the benchmark's backend)."""
    config, report = _object(bench.get("config")), _object(document.get("config"))
    holders = (
        config.get("backend"),
        config,
        report.get("backend"),
        report,
        document.get("args"),
        bench.get("args"),
        bench.get("worker"),
        bench.get("backend"),
    )
    for holder in holders:
        if isinstance(holder, dict) and isinstance(holder.get("model"), str) and holder["model"]:
            return holder["model"]
    return None
