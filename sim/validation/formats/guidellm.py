"""Reader for GuideLLM benchmark reports (``guidellm benchmark --output-path X.json|.yaml``).

What the source records: ``benchmarks``, a list (one per strategy or rate
of a sweep); each holds ``requests`` with ``successful``, ``incomplete`` and
``errored`` lists. A request carries ``prompt_tokens`` and ``output_tokens``
and its times, Unix epoch seconds on the client, in one of two layouts:

- GuideLLM 0.4 and later: ``info.timings`` with ``targeted_start`` (when
  the scheduler meant to send it), ``request_start`` (sent),
  ``first_token_iteration``, ``last_token_iteration`` (first and last
  streamed chunk), ``token_iterations`` (how many chunks), ``request_end``;
  token counts also under ``input_metrics`` / ``output_metrics``
  ``.total_tokens``;
- GuideLLM 0.2–0.3: ``start_time``, ``first_token_time``,
  ``last_token_time``, ``end_time`` on the request and
  ``scheduler_info.targeted_start_time``.

What servesim takes, and what it reconstructs:

- arrival = ``request_start`` / ``start_time`` (sent to the server; the
  scheduler's targeted start, which lags when the client falls behind, is
  not the server's arrival); first token and finish = the first and last
  token times (finish falls back to the request end when a request streamed
  one chunk);
- not recorded: per-chunk times (only the first, last and a count), so ITL
  cannot be measured, only TTFT, TPOT and E2EL; engine queue and schedule
  times (``first_scheduled_s`` NaN);
- only ``successful`` requests are kept; ``incomplete`` and ``errored`` are
  counted in ``run.json``. A report with several benchmarks needs one
  chosen (``--benchmark N``, 0-based).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ConfigError
from sim.validation.formats.common import (
    count,
    first_present,
    listing,
    load_document,
    mapping,
    number,
)
from sim.validation.runs import ImportedRun, request_table

FORMAT = "guidellm"


def looks_like(document: Any) -> bool:
    """True for a GuideLLM report: an object with a ``benchmarks`` list."""
    return isinstance(document, dict) and isinstance(document.get("benchmarks"), list)


def _times(request: dict[str, Any], where: str) -> tuple[float, float, float]:
    """Sent, first-token and finish times of one request (epoch seconds)."""
    info = request.get("info")
    if isinstance(info, dict) and isinstance(info.get("timings"), dict):
        t = info["timings"]
        start = first_present(t, "request_start", "resolve_start")
        first = t.get("first_token_iteration")
        last = first_present(t, "last_token_iteration", "request_end", "resolve_end")
        names = ("info.timings.request_start", "info.timings.first_token_iteration")
        last_name = "info.timings.last_token_iteration"
    else:
        start = first_present(request, "request_start_time", "start_time")
        first = request.get("first_token_time")
        last = first_present(request, "last_token_time", "end_time", "request_end_time")
        names = ("start_time", "first_token_time")
        last_name = "last_token_time"
    for value, name in ((start, names[0]), (first, names[1]), (last, last_name)):
        if value is None:
            raise ConfigError(f"{where}: missing field {name}")
    sent_s = number(start, where, names[0])
    first_s = number(first, where, names[1])
    finish_s = number(last, where, last_name)
    if not sent_s <= first_s <= finish_s:
        raise ConfigError(f"{where}: times must not decrease (sent, first token, last token)")
    return sent_s, first_s, finish_s


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


def _benchmark(
    document: dict[str, Any], source: Path, index: int | None
) -> tuple[int, dict[str, Any]]:
    benchmarks = document["benchmarks"]
    if not benchmarks:
        raise ConfigError(f"{source}: benchmarks is empty")
    if index is None:
        if len(benchmarks) > 1:
            raise ConfigError(
                f"{source}: {len(benchmarks)} benchmarks in this report; choose one with "
                f"--benchmark 0..{len(benchmarks) - 1} (servesim import-run)"
            )
        index = 0
    if not 0 <= index < len(benchmarks):
        raise ConfigError(f"{source}: --benchmark {index} out of range 0..{len(benchmarks) - 1}")
    return index, mapping(benchmarks[index], f"{source}: benchmarks[{index}]", "benchmark")


def read_guidellm(path: str | Path, benchmark: int | None = None) -> ImportedRun:
    """Benchmark ``benchmark`` (the only one, by default) of a GuideLLM report."""
    source = Path(path)
    document = load_document(source)
    if not looks_like(document):
        raise ConfigError(f"{source}: not a GuideLLM report (no benchmarks list)")
    index, bench = _benchmark(document, source, benchmark)
    here = f"{source}: benchmarks[{index}]"
    requests = mapping(bench.get("requests"), here, "requests")
    successful = listing(requests.get("successful"), here, "requests.successful")
    if not successful:
        raise ConfigError(f"{here}: no successful requests")
    rows: list[tuple[float, float, float, int, int]] = []
    for i, raw in enumerate(successful):
        where = f"{here}.requests.successful[{i}]"
        request = mapping(raw, where, "request")
        rows.append((*_times(request, where), *_tokens(request, where)))
    sent_s, first_s, finish_s, num_prompt, num_output = np.asarray(rows, dtype=np.float64).T
    nan = np.full(sent_s.shape, np.nan)
    table = request_table(sent_s, nan, first_s, finish_s, num_prompt, num_output)
    strategy = (bench.get("config") or bench.get("args") or {}).get("strategy")
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
    }
    return ImportedRun(table, meta)


def _model(document: dict[str, Any], bench: dict[str, Any]) -> Any:
    """The served model, where the report names it."""
    for holder in (bench.get("config") or {}, document.get("args") or {}, bench.get("args") or {}):
        if isinstance(holder, dict) and holder.get("model"):
            return holder["model"]
    backend = bench.get("worker") or bench.get("backend") or {}
    return backend.get("model") if isinstance(backend, dict) else None
