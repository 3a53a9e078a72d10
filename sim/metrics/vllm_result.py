"""``vllm bench serve``'s result JSON from a run (``--save-result``, ``--save-detailed``).

vLLM's keys in its order (``vllm/benchmarks/serve.py``); what a simulated run
writes for each: docs/benchmark-tools.md, "The result JSON and summary.json". A
request is sent at its arrival; tokens reaching the client together are one chunk
(one ``itls`` gap); a rejected or unfinished request is failed; a statistic without
a sample is null (vLLM writes 0). ``servesim import-run`` reads the file back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray
from sim.engine.records import RequestTable, completed_mask, floats
from sim.engine.step_runs import StepTable
from sim.errors import ConfigError
from sim.metrics.quantiles import check_percentiles, percentile_key
from sim.metrics.report import PERCENTILE_KEY, caveat_metric, jsonable, vllm_spelling
from sim.metrics.stats import sample_notes, summarize

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
"""The metrics ``--percentile-metrics`` may name (vLLM's client-queue ones are not simulated)."""

DETAILED_FIELDS: tuple[str, ...] = ("input_lens", "output_lens", "start_times", "ttfts", "itls")
DETAILED_FIELDS += ("generated_texts", "errors")
"""The per-request lists ``--save-detailed`` adds (vLLM drops them without it)."""

_LIST_ORDER: tuple[str, ...] = ("input_lens", "output_lens", "ttfts", "itls", "latencies")
_LIST_ORDER += ("start_times",)
_LIST_ORDER += ("generated_texts", "errors")
UNFINISHED = "unfinished when the simulation ended"


def parse_percentile_metrics(text: str | None) -> tuple[str, ...] | None:
    """``"ttft,tpot"`` as ``("ttft", "tpot")`` (None: not given); an unknown name is a
    one-line error."""
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(","))
    unknown = [name for name in names if name not in PERCENTILE_METRICS]
    if unknown or not names:
        raise ConfigError(
            f"--percentile-metrics {text!r}: expected some of {','.join(PERCENTILE_METRICS)}"
            f" (comma-separated), got {', '.join(map(repr, unknown))}"
        )
    return tuple(dict.fromkeys(names))


def parse_metric_percentiles(text: str | None) -> tuple[float, ...] | None:
    """``"50,90,99"`` as ``(50.0, 90.0, 99.0)`` (None: not given): each in [0, 100], as
    numpy's (and vLLM's)."""
    if text is None:
        return None
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--metric-percentiles {text!r}: expected comma-separated numbers, e.g. 50,90,99"
        ) from None
    try:
        check_percentiles(values)
    except ConfigError as error:
        raise ConfigError(f"--metric-percentiles {text!r}: {error}") from None
    return tuple(dict.fromkeys(values))


def restate_percentiles(
    summary: Mapping[str, Any],
    requests: RequestTable,
    steps: StepTable,
    extra_itl_s: npt.ArrayLike,
    percentiles: Sequence[float],
) -> dict[str, Any]:
    """``summary`` with every metric's ``p<P>_..._ms`` keys at ``percentiles``
    instead (where the first of them stood) and its ``caveats`` for them."""
    fresh = summarize(requests, steps, extra_itl_s, None, percentiles)
    out: dict[str, Any] = {}
    for key, value in summary.items():
        match = PERCENTILE_KEY.match(key)
        if match is None:
            out[key] = value
            continue
        metric = match.group(1)
        for p in percentiles:  # at the first of the metric's old keys; the rest go
            key = percentile_key(p, metric)
            out.setdefault(key, fresh[key])
    if "caveats" in summary:  # the percentiles' anew; the others (the cost model's) kept
        kept = [c for c in summary["caveats"] if caveat_metric(c) is None]
        out["caveats"] = sample_notes(requests, percentiles)["caveats"] + kept
    return out


def chunk_times_s(token_times_s: FloatArray) -> FloatArray:
    """When the chunks of a stream of token times reach the client: tokens at one
    instant are one chunk."""
    if token_times_s.size < 2:
        return token_times_s
    return token_times_s[np.concatenate([[True], np.diff(token_times_s) > 0])]


def stream_peaks(
    start_s: FloatArray, latency_s: FloatArray, chunk_s: list[FloatArray]
) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` (the most chunks in one whole second from
    the first send) and ``max_concurrent_requests`` (the most requests in one whole
    second, each counted in every second from its start's to its end's, both
    included: vLLM's buckets, not the peak at one instant) of the completed requests."""
    if start_s.size == 0:
        return 0.0, 0
    first_s = float(start_s.min())
    num_seconds = int(np.ceil(float((start_s + latency_s).max()) - first_s)) + 1
    times = np.concatenate(chunk_s) - first_s if chunk_s else np.empty(0)
    seconds = times.astype(np.int64)
    seconds = seconds[(seconds >= 0) & (seconds < num_seconds)]
    per_second = np.bincount(seconds, minlength=num_seconds)
    # +1 at each request's first second, -1 after its last: the running sum is per second.
    starts = (start_s - first_s).astype(np.int64)
    ends = (start_s + latency_s - first_s).astype(np.int64) + 1
    changes = np.bincount(starts, minlength=num_seconds + 1)
    changes -= np.bincount(ends, minlength=num_seconds + 1)
    return float(per_second.max()), int(np.cumsum(changes).max())


def result_document(
    summary: Mapping[str, Any],
    requests: RequestTable,
    token_times_s: Callable[[int], FloatArray],
    *,
    metrics: Sequence[str] = PERCENTILE_METRICS,
    percentiles: Sequence[float] = (90, 99),
    detailed: bool = True,
    date: datetime | None = None,
) -> dict[str, Any]:
    """``vllm bench serve``'s result JSON of a run (module docstring): from its
    ``summary`` (with ``percentiles`` among its keys: ``restate_percentiles``),
    its request table and each request's client token times (by ``request_id``)."""
    check_percentiles(percentiles)
    arrival_s = floats(requests["arrival_s"])
    order = np.lexsort((np.asarray(requests["request_id"]), arrival_s))
    done = completed_mask(requests)
    rejected = requests.rejected
    reasons = np.asarray(requests["rejection_reason"], dtype=object)
    ids = np.asarray(requests["request_id"])
    first_token_s = floats(requests["first_token_s"])
    finish_s = floats(requests["finish_s"])
    num_prompt = np.asarray(requests["num_prompt_tokens"])
    num_generated = np.asarray(requests["num_generated_tokens"])
    lists: dict[str, list[Any]] = {name: [] for name in (*DETAILED_FIELDS, "latencies")}
    chunk_times: list[FloatArray] = []
    for i in order.tolist():
        ok = bool(done[i])
        lists["input_lens"].append(int(num_prompt[i]))
        lists["start_times"].append(float(arrival_s[i]))
        lists["generated_texts"].append("")
        lists["output_lens"].append(int(num_generated[i]) if ok else 0)
        lists["ttfts"].append(float(first_token_s[i] - arrival_s[i]) if ok else 0.0)
        lists["latencies"].append(float(finish_s[i] - arrival_s[i]) if ok else 0.0)
        if ok:
            chunks_s = chunk_times_s(np.asarray(token_times_s(int(ids[i])), dtype=np.float64))
            lists["itls"].append(np.diff(chunks_s).tolist())
            chunk_times.append(chunks_s)
            lists["errors"].append("")
        else:
            lists["itls"].append([])
            lists["errors"].append(str(reasons[i]) if rejected[i] else UNFINISHED)
    ok_order = order[done[order]]
    peak_per_s, peak_in_flight = stream_peaks(
        arrival_s[ok_order], finish_s[ok_order] - arrival_s[ok_order], chunk_times
    )
    model = summary.get("model")
    document: dict[str, Any] = {
        "date": (date or datetime.now()).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "servesim",
        "backend": "servesim",
        "label": summary.get("scenario"),
        "model_id": model,
        "tokenizer_id": model,
    }
    for key in ("num_prompts", "request_rate", "burstiness", "max_concurrency"):
        document[key] = summary.get(key)
    for key in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens"):
        document[key] = summary.get(key)
    for key in ("request_throughput", "request_goodput", "output_throughput"):
        document[key] = summary.get(key)
    document["total_token_throughput"] = summary.get("total_token_throughput")
    for name in _LIST_ORDER:  # vLLM's order
        document[name] = lists[name]
    if not detailed:
        for name in DETAILED_FIELDS:
            del document[name]
    document["max_output_tokens_per_s"] = peak_per_s
    document["max_concurrent_requests"] = peak_in_flight
    document["rtfx"] = 0.0  # no audio input
    for metric in metrics:
        keys = [f"{stat}_{metric}_ms" for stat in ("mean", "median", "std")]
        keys += [percentile_key(p, metric) for p in percentiles]
        for key in keys:
            document[key] = summary.get(key)
    return document


def write_result(path: str | Path, document: Mapping[str, Any]) -> Path:
    """Write ``document`` as one line of strict JSON (NaN: null) to ``path``,
    replacing it whole (written beside it under a hidden name, then moved)."""
    target = Path(path)
    text = json.dumps(jsonable(vllm_spelling(document)), allow_nan=False)
    # check_out_file allowed a missing folder it can make: make it.
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text + "\n", encoding="utf-8")  # the umask's mode, as open's
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target
