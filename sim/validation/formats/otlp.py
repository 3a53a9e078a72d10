"""Reader for vLLM's OpenTelemetry request spans exported as OTLP JSON.

vLLM started with ``--otlp-traces-endpoint`` sends one span per finished request;
an OpenTelemetry collector's file exporter writes them as OTLP JSON
(``resourceSpans`` -> ``scopeSpans`` -> ``spans``, one document or one export
request per line). What a span records and what servesim reconstructs:
docs/validation.md, "Importing measured runs" (the ``otlp`` row).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ConfigError
from sim.validation.formats.common import count, listed_once, listing, mapping, number
from sim.validation.runs import ImportedRun, request_table
from sim.workload.json_lines import json_lines, read_text

FORMAT = "otlp"
TTFT = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
QUEUE = "gen_ai.latency.time_in_queue"
PREFILL = "gen_ai.latency.time_in_model_prefill"
DECODE = "gen_ai.latency.time_in_model_decode"
PROMPT = "gen_ai.usage.prompt_tokens"
OUTPUT = "gen_ai.usage.completion_tokens"
MODEL = "gen_ai.response.model"
REQUEST_ID = "gen_ai.request.id"


def looks_like(document: Any) -> bool:
    """True for an OTLP JSON export (an object with ``resourceSpans``)."""
    return isinstance(document, dict) and "resourceSpans" in document


def _documents(path: Path) -> list[tuple[str, Any]]:
    """(where, export request) pairs: the whole file, or one per line."""
    text = read_text(path)
    try:
        return [(str(path), json.loads(text))]
    except json.JSONDecodeError:
        return list(json_lines(path, text))  # JSON lines: one export request per line


def _value(attribute: dict[str, Any]) -> Any:
    """The value of an OTLP ``AnyValue`` (``{"doubleValue": 0.5}``...)."""
    value = attribute.get("value") or {}
    for kind in ("doubleValue", "intValue", "stringValue", "boolValue"):
        if kind in value:
            return value[kind]
    return None


def _spans(path: Path) -> list[tuple[str, dict[str, Any]]]:
    spans = []
    for where, document in _documents(path):
        if not looks_like(document):
            raise ConfigError(f"{where}: not an OTLP JSON export (no resourceSpans)")
        for r, resource in enumerate(listing(document["resourceSpans"], where, "resourceSpans")):
            here = f"{where}: resourceSpans[{r}]"
            scopes = mapping(resource, here, "resource").get("scopeSpans") or []
            for s, scope in enumerate(listing(scopes, here, "scopeSpans")):
                at = f"{here}.scopeSpans[{s}]"
                for k, span in enumerate(
                    listing(mapping(scope, at, "scope").get("spans") or [], at, "spans")
                ):
                    spans.append((f"{at}.spans[{k}]", mapping(span, at, "span")))
    return spans


def _nanos(value: Any, where: str) -> int:
    """A ``*TimeUnixNano`` value (a decimal string in OTLP JSON) as an int; not a true (1)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: startTimeUnixNano must be an integer of nanoseconds, got {value!r}"
        ) from None


def _request(where: str, span: dict[str, Any], attributes: dict[str, Any]) -> list[float]:
    """arrival (epoch ns), ready, scheduled, first token, finish (s after arrival), tokens."""
    if "startTimeUnixNano" not in span:
        raise ConfigError(f"{where}: missing field startTimeUnixNano")
    for name in (PROMPT, OUTPUT):
        if attributes.get(name) is None:
            raise ConfigError(f"{where}: missing attribute {name}")
    first = number(attributes[TTFT], where, TTFT)
    if attributes.get(E2E) is not None:
        finish = number(attributes[E2E], where, E2E)
    elif attributes.get(DECODE) is not None:
        finish = first + number(attributes[DECODE], where, DECODE)
    else:
        raise ConfigError(f"{where}: missing attribute {E2E}")
    scheduled, ready = np.nan, 0.0
    if attributes.get(PREFILL) is not None:
        scheduled = first - number(attributes[PREFILL], where, PREFILL)
        if attributes.get(QUEUE) is not None:
            ready = max(0.0, scheduled - number(attributes[QUEUE], where, QUEUE))
    prompt, output = (
        count(attributes[PROMPT], where, PROMPT),
        count(attributes[OUTPUT], where, OUTPUT),
    )
    if min(prompt, output) < 1 or not 0 <= first <= finish:
        raise ConfigError(f"{where}: token counts must be >= 1 and times must not decrease")
    arrival_ns = _nanos(span["startTimeUnixNano"], where)
    return [arrival_ns, ready, scheduled, first, finish, prompt, output]


def read_otlp(path: str | Path) -> ImportedRun:
    """Request spans of an OTLP JSON (or JSON lines) file exported from vLLM."""
    source = Path(path)
    rows: list[list[float]] = []
    models: set[str] = set()
    seen: dict[Any, str] = {}
    for where, span in _spans(source):
        listed = listing(span.get("attributes") or [], where, "attributes")
        attributes = {a.get("key"): _value(a) for a in listed}
        if attributes.get(TTFT) is None:
            continue  # not a vLLM request span
        listed_once(seen, attributes.get(REQUEST_ID), where, REQUEST_ID)
        rows.append(_request(where, span, attributes))
        if attributes.get(MODEL):
            models.add(str(attributes[MODEL]))
    if not rows:
        raise ConfigError(f"{source}: no vLLM request spans (none has {TTFT})")
    if len(models) > 1:  # a run serves one model: no scenario replays these requests
        raise ConfigError(
            f"{source}: spans of {len(models)} models ({', '.join(sorted(models))}); "
            f"keep one model's spans (its {MODEL})"
        )
    # Times from the earliest arrival in exact integer nanoseconds, then seconds:
    # epoch nanoseconds as a float would resolve only 256 ns.
    origin_ns = min(int(row[0]) for row in rows)
    arrival = np.asarray([(int(row[0]) - origin_ns) / 1e9 for row in rows])
    c = np.asarray([row[1:] for row in rows], dtype=np.float64).T
    requests = request_table(
        arrival, arrival + c[1], arrival + c[2], arrival + c[3], c[4], c[5], arrival + c[0]
    )
    meta = {
        "format": FORMAT,
        "source": str(source),
        "num_requests": len(requests),
        "arrival": "span start (request arrival at the vLLM frontend)",
        "engine": {"model": models.pop() if models else None},
    }
    return ImportedRun(requests, meta)
