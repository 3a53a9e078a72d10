"""A run as a Chrome / Perfetto trace-event file (``trace.json``, ``servesim run --trace``).

Opens in https://ui.perfetto.dev and chrome://tracing. Layout:

- process 1, "requests": one track (thread) per traced request, holding a
  ``request N`` span from arrival to the last streamed token, and inside it
  the request's phase spans (``sim.metrics.lifecycle``) one after another,
  plus an instant event at its first streamed token (TTFT);
- process 2 + r, "replica r": one track of engine steps (named ``prefill``,
  ``decode`` or ``mixed``, with the batch composition as arguments) and two
  counters, the queue (waiting and running requests) and the KV blocks in use.

Times are microseconds of simulated time (the format's unit), rounded to the
nanosecond. Only the traced requests are written, and only the steps and
counter samples within their time window (at most ``max_steps`` steps), so
the file stays small however long the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from sim.engine.step_runs import StepTable
from sim.metrics.lifecycle import records

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

    # A frame, or a run's columns by name (``RawResult.series``).
    Table: TypeAlias = pd.DataFrame | Mapping[str, npt.NDArray[Any]]

REQUESTS_PID = 1
FIRST_REPLICA_PID = 2
MAX_STEPS = 200_000
_US_PER_S = 1e6

Event = dict[str, Any]


def _us(time_s: float) -> float:
    """Seconds to microseconds, rounded to the nanosecond (the file stays exact enough)."""
    return round(float(time_s) * _US_PER_S, 3)


def _span(name: str, cat: str, start_s: float, end_s: float, pid: int, tid: int) -> Event:
    """A complete ("X") event; its duration is computed from the rounded ends."""
    ts = _us(start_s)
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": round(_us(end_s) - ts, 3),
        "pid": pid,
        "tid": tid,
    }


def _meta(kind: str, pid: int, tid: int, **args: object) -> Event:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


_STEP_FIELDS = ("start_s", "end_s", "num_prefill_tokens", "num_decode_seqs")


def _replica_of(table: Table) -> npt.NDArray[np.int64]:
    """Each row's replica (0 without a ``replica`` column): a frame or columns."""
    if "replica" in table:
        return np.asarray(table["replica"], dtype=np.int64)
    return np.zeros(len(table["time_s" if "time_s" in table else "end_s"]), dtype=np.int64)


def _steps_in(
    steps: pd.DataFrame | StepTable, window_s: tuple[float, float], max_steps: int
) -> dict[int, dict[str, npt.NDArray[Any]]]:
    """Per replica, the first ``max_steps`` steps overlapping ``window_s``, as columns.

    A ``StepTable`` (a run's compact log) gives them without expanding the
    log: a long run has tens of millions of steps, the window a few thousand.
    """
    start_s, end_s = window_s
    if isinstance(steps, StepTable):
        return {
            part.replica: part.rows(part.overlapping(start_s, end_s)[:max_steps], _STEP_FIELDS)
            for part in steps.parts
            if part.num_steps  # as a frame's rows would show it
        }
    step_replica = _replica_of(steps)
    out = {}
    for replica in sorted(set(step_replica.tolist())):
        mine = step_replica == replica
        starts = np.asarray(steps["start_s"], dtype=np.float64)[mine]
        ends = np.asarray(steps["end_s"], dtype=np.float64)[mine]
        keep = np.flatnonzero((ends > start_s) & (starts < end_s))[:max_steps]
        out[replica] = {name: np.asarray(steps[name])[mine][keep] for name in _STEP_FIELDS}
    return out


def request_events(spans: pd.DataFrame, requests: pd.DataFrame) -> list[Event]:
    """The "requests" process: per request a parent span, its phases and a TTFT instant."""
    events: list[Event] = [_meta("process_name", REQUESTS_PID, 0, name="requests")]
    # Only the traced requests' rows: a long run has millions.
    traced = requests[requests["request_id"].isin(spans["request_id"].unique())]
    rows = {int(row["request_id"]): row for row in records(traced)}
    for request_id, group in spans.groupby("request_id", sort=True):
        tid = int(cast(int, request_id))
        row = rows[tid]
        start, end = float(group["start_s"].min()), float(group["end_s"].max())
        events.append(_meta("thread_name", REQUESTS_PID, tid, name=f"request {tid}"))
        events.append(_meta("thread_sort_index", REQUESTS_PID, tid, sort_index=tid))
        parent = _span(f"request {tid}", "request", start, end, REQUESTS_PID, tid)
        parent["args"] = {
            "num_prompt_tokens": int(row["num_prompt_tokens"]),
            "num_output_tokens": int(row["num_output_tokens"]),
            "num_preemptions": int(row["num_preemptions"]),
        }
        events.append(parent)
        for span in records(group):
            event = _span(
                str(span["phase"]), "phase", span["start_s"], span["end_s"], REQUESTS_PID, tid
            )
            event["args"] = {"replica": int(span["replica"]), "num_tokens": int(span["num_tokens"])}
            events.append(event)
        first = float(row["first_token_s"])
        if np.isfinite(first):
            ttft_ms = (first - float(row["arrival_s"])) * 1e3
            events.append(
                {
                    "name": "first token",
                    "cat": "ttft",
                    "ph": "i",
                    "s": "t",
                    "ts": _us(first),
                    "pid": REQUESTS_PID,
                    "tid": tid,
                    "args": {"ttft_ms": round(ttft_ms, 6)},
                }
            )
    return events


def _step_name(num_prefill_tokens: int, num_decode_seqs: int) -> str:
    if num_prefill_tokens and num_decode_seqs:
        return "mixed"
    return "prefill" if num_prefill_tokens else "decode"


def replica_events(
    steps: pd.DataFrame | StepTable,
    timeseries: Table,
    window_s: tuple[float, float],
    max_steps: int = MAX_STEPS,
) -> list[Event]:
    """One process per replica: its steps within ``window_s`` and its queue / KV counters."""
    start_s, end_s = window_s
    windows = _steps_in(steps, window_s, max_steps)
    series_replica = _replica_of(timeseries)
    events: list[Event] = []
    for replica in sorted(set(windows) | set(series_replica.tolist())):
        pid = FIRST_REPLICA_PID + replica
        events.append(_meta("process_name", pid, 0, name=f"replica {replica}"))
        events.append(_meta("thread_name", pid, 0, name="engine steps"))
        mine = series_replica == replica
        sample_s = np.asarray(timeseries["time_s"], dtype=np.float64)[mine]
        kv = np.asarray(timeseries["num_kv_blocks_used"])[mine]
        window = windows.get(replica) or {name: np.empty(0) for name in _STEP_FIELDS}
        starts, ends = window["start_s"], window["end_s"]
        prefill, decode = window["num_prefill_tokens"], window["num_decode_seqs"]
        # KV blocks in use when the step was planned: the last sample at or before its start.
        at = np.searchsorted(sample_s, starts, side="right") - 1
        for index, sample in enumerate(at.tolist()):
            num_prefill, num_decode = int(prefill[index]), int(decode[index])
            event = _span(
                _step_name(num_prefill, num_decode), "step", starts[index], ends[index], pid, 0
            )
            event["args"] = {
                "num_prefill_tokens": num_prefill,
                "num_decode_seqs": num_decode,
                "num_kv_blocks_used": int(kv[sample]) if sample >= 0 else None,
            }
            events.append(event)
        inside = np.flatnonzero((sample_s >= start_s) & (sample_s <= end_s))
        waiting = np.asarray(timeseries["num_waiting"])[mine]
        running = np.asarray(timeseries["num_running"])[mine]
        for index in inside[: 2 * max_steps].tolist():
            ts = _us(sample_s[index])
            queue = {"waiting": int(waiting[index]), "running": int(running[index])}
            events.append({"name": "queue", "ph": "C", "ts": ts, "pid": pid, "args": queue})
            blocks = {"blocks used": int(kv[index])}
            events.append({"name": "KV cache", "ph": "C", "ts": ts, "pid": pid, "args": blocks})
    return events


def trace_document(
    spans: pd.DataFrame,
    requests: pd.DataFrame,
    steps: pd.DataFrame | StepTable,
    timeseries: Table,
    metadata: dict[str, object] | None = None,
    max_steps: int = MAX_STEPS,
) -> dict[str, Any]:
    """The whole trace: requests' tracks, replicas' tracks, and ``metadata`` as otherData."""
    events = request_events(spans, requests)
    if len(spans):
        window = (float(spans["start_s"].min()), float(spans["end_s"].max()))
        events += replica_events(steps, timeseries, window, max_steps)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"time_unit": "us of simulated time", **(metadata or {})},
    }


def write_trace(path: str | Path, document: dict[str, Any]) -> Path:
    """Write ``document`` (from ``trace_document``) as compact JSON; return the path."""
    out = Path(path)
    out.write_text(json.dumps(document, separators=(",", ":"), allow_nan=False) + "\n")
    return out
