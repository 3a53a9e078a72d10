"""A run as a Chrome / Perfetto trace-event file (``trace.json``, ``servesim run --trace``).

The layout: docs/traces.md, "trace.json: one run from the inside". Times are
microseconds of simulated time, rounded to the nanosecond; only the traced requests,
and the steps and counter samples within their window (at most ``max_steps``
steps), are written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from sim.engine.records import RequestTable
from sim.engine.step_runs import StepTable
from sim.metrics.lifecycle import records

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

    # A frame, or a run's columns by name (``RawResult.series``).
    Table: TypeAlias = pd.DataFrame | Mapping[str, npt.NDArray[Any]]

REQUESTS_PID = 1
FIRST_REPLICA_PID = 2
MAX_STEPS = 200_000
# The flow arrows of one request: to its first prefill step and its first token's step.
FIRST_STEP_FLOW = "first prefill step"
TOKEN_STEP_FLOW = "first token step"
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
# What a request's track shows of its record: its span's args, and its times.
_REQUEST_ARGS = ("num_prompt_tokens", "num_output_tokens", "num_preemptions")
_REQUEST_FIELDS = ("arrival_s", "first_token_s", *_REQUEST_ARGS)


def _replica_of(table: Table) -> npt.NDArray[np.int64]:
    """Each row's replica (0 without a ``replica`` column): a frame or columns."""
    if "replica" in table:
        return np.asarray(table["replica"], dtype=np.int64)
    return np.zeros(len(table["time_s" if "time_s" in table else "end_s"]), dtype=np.int64)


def steps_in(
    steps: StepTable, window_s: tuple[float, float], max_steps: int
) -> dict[int, dict[str, npt.NDArray[Any]]]:
    """Per replica, the first ``max_steps`` steps overlapping ``window_s``, as columns.

    Found without expanding the log: a long run has tens of millions of steps,
    the window a few thousand.
    """
    start_s, end_s = window_s
    return {
        part.replica: part.rows(part.overlapping(start_s, end_s)[:max_steps], _STEP_FIELDS)
        for part in steps.parts
        if part.num_steps  # as a frame's rows would show it
    }


def request_events(spans: pd.DataFrame, requests: RequestTable) -> list[Event]:
    """The "requests" process: per request a parent span, its phases and a TTFT instant."""
    events: list[Event] = [_meta("process_name", REQUESTS_PID, 0, name="requests")]
    for request_id, group in spans.groupby("request_id", sort=True):
        tid = int(cast(int, request_id))
        at, found = requests.find(tid)  # only the traced requests' rows: a run has millions
        if not found:
            raise KeyError(f"no request {tid}")
        row = {name: requests[name][int(at)] for name in _REQUEST_FIELDS}
        start, end = float(group["start_s"].min()), float(group["end_s"].max())
        events.append(_meta("thread_name", REQUESTS_PID, tid, name=f"request {tid}"))
        events.append(_meta("thread_sort_index", REQUESTS_PID, tid, sort_index=tid))
        parent = _span(f"request {tid}", "request", start, end, REQUESTS_PID, tid)
        parent["args"] = {name: int(row[name]) for name in _REQUEST_ARGS}
        events.append(parent)
        for span in records(group):
            phase = str(span["phase"])
            event = _span(phase, "phase", span["start_s"], span["end_s"], REQUESTS_PID, tid)
            num_tokens = int(span["num_tokens"])
            if phase == "way_in":  # the way in tokenizes the whole prompt
                num_tokens = int(row["num_prompt_tokens"])
            event["args"] = {"replica": int(span["replica"]), "num_tokens": num_tokens}
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
    windows: dict[int, dict[str, npt.NDArray[Any]]],
    timeseries: Table,
    window_s: tuple[float, float],
    max_steps: int = MAX_STEPS,
) -> list[Event]:
    """One process per replica: its steps of ``windows`` (``steps_in``) and its queue / KV
    counters within ``window_s``."""
    start_s, end_s = window_s
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


def _flow(name: str, flow_id: int, at_s: float, request_id: int, pid: int) -> list[Event]:
    """One arrow at ``at_s`` from the request's track (the slice enclosing it there, its
    prefill span) to replica ``pid``'s step track (the step enclosing it: ``"bp": "e"``)."""
    ts = _us(at_s)
    start = {"name": name, "cat": "flow", "ph": "s", "id": flow_id, "ts": ts}
    return [
        {**start, "pid": REQUESTS_PID, "tid": request_id},
        {**start, "ph": "f", "bp": "e", "pid": pid, "tid": 0},
    ]


def _overlapping_step(
    starts: npt.NDArray[Any], ends: npt.NDArray[Any], start_s: float, end_s: float, first: bool
) -> int | None:
    """The first (else the last) of the steps ``starts``/``ends`` (in time order, one
    after another, as a replica runs them) overlapping ``[start_s, end_s]``; None if none.
    A binary search: a trace of many requests over many steps stays cheap."""
    if first:  # the first step ending after the span starts
        index = int(np.searchsorted(ends, start_s, side="right"))
    else:  # the last step starting before the span ends
        index = int(np.searchsorted(starts, end_s, side="left")) - 1
    if 0 <= index < len(starts) and ends[index] > start_s and starts[index] < end_s:
        return index
    return None


def flow_events(
    spans: pd.DataFrame, windows: dict[int, dict[str, npt.NDArray[Any]]]
) -> list[Event]:
    """Arrows from each request's prefill spans to the steps of ``windows`` that ran them:
    the first step of its prefill and the step that made its first token (the last
    step overlapping its last prefill span), one arrow when they are one step; ids
    1, 2, ... in request order. An arrow sits at the middle of the span's overlap with
    its step, so that both ends bind to the right slice; a step outside ``windows``
    (past ``max_steps``) gets none."""
    events: list[Event] = []
    prefill = spans[spans["phase"] == "prefill"]
    for request_id, group in prefill.groupby("request_id", sort=True):
        ordered = records(group.sort_values("start_s", kind="stable"))
        seen: set[tuple[int, int]] = set()  # (replica, step index): one arrow per step
        for name, span, pick in (
            (FIRST_STEP_FLOW, ordered[0], 0),
            (TOKEN_STEP_FLOW, ordered[-1], -1),
        ):
            replica = int(span["replica"])
            window = windows.get(replica)
            if window is None:
                continue
            start_s, end_s = float(span["start_s"]), float(span["end_s"])
            starts, ends = window["start_s"], window["end_s"]
            step = _overlapping_step(starts, ends, start_s, end_s, first=pick == 0)
            if step is None or (replica, step) in seen:
                continue
            seen.add((replica, step))
            at_s = (max(start_s, float(starts[step])) + min(end_s, float(ends[step]))) / 2
            flow_id = len(events) // 2 + 1
            events += _flow(
                name, flow_id, at_s, int(cast(int, request_id)), FIRST_REPLICA_PID + replica
            )
    return events


def trace_document(
    spans: pd.DataFrame,
    requests: RequestTable,
    steps: StepTable,
    timeseries: Table,
    metadata: dict[str, object] | None = None,
    max_steps: int = MAX_STEPS,
) -> dict[str, Any]:
    """The whole trace: requests' tracks, replicas' tracks, and ``metadata`` as otherData."""
    events = request_events(spans, requests)
    if len(spans):
        window = (float(spans["start_s"].min()), float(spans["end_s"].max()))
        windows = steps_in(steps, window, max_steps)
        events += replica_events(windows, timeseries, window, max_steps)
        events += flow_events(spans, windows)
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
