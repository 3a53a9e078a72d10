"""The life of each request as a sequence of phase spans (the waterfall and the trace).

A request's phases, in order (``PHASES``): ``way_in`` (arrival to ready),
``waiting``, ``prefill`` (one span per chunk when the run recorded them),
``decode``, ``preempted`` or ``swapped`` (out of the batch until scheduled
again), ``kv_transfer`` (disaggregation: prefill replica to decode replica) and
``detokenize`` (the last token's engine step, ``engine_finish_s``, to the
client, ``finish_s``). Engine phases use engine times; a table without them (a
measured run) is taken as engine times with no frontend. A request's spans abut.

Two sources: ``recorded_spans``, the per-step activity an ``ActivityRecorder``
logged (``servesim run --trace``: exact chunks and gaps); ``reconstructed_spans``,
what every run keeps (records, step log, ``later_runs``): prefill is one span to
the first token, and a preemption gap includes the recompute that followed it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from sim.engine.records import RequestTable
from sim.engine.step_runs import StepTable
from sim.serving.cluster import request_token_times_s

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

SPAN_COLUMNS = ["request_id", "replica", "phase", "start_s", "end_s", "num_tokens"]
SpanRow = tuple[int, int, str, float, float, int]  # one span, as SPAN_COLUMNS
PHASES = (
    "way_in",
    "waiting",
    "prefill",
    "decode",
    "preempted",
    "swapped",
    "kv_transfer",
    "detokenize",
)


def _finite(value: object) -> float | None:
    """``value`` as a float, or None when it is missing or not finite."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


class _Track:
    """Spans of one request, appended in time order, each starting where the last ended;
    the first: the way in, from arrival to ready (the engine's queue)."""

    def __init__(self, row: Row) -> None:
        self.request_id = int(row["request_id"])
        self.replica = int(row["replica"])
        self.now_s = float(row["arrival_s"])
        self.rows: list[SpanRow] = []
        ready = _finite(row["ready_s"])
        if ready is not None:
            self.add("way_in", ready)

    def add(
        self, phase: str, end_s: float, num_tokens: int = 0, replica: int | None = None
    ) -> None:
        """A span from the end of the last one to ``end_s`` (dropped if empty)."""
        if end_s > self.now_s:
            where = self.replica if replica is None else replica
            self.rows.append((self.request_id, where, phase, self.now_s, end_s, num_tokens))
            self.now_s = end_s


def _engine_s(row: Row, column: str) -> float | None:
    """The engine time of ``first_token_s`` or ``finish_s`` (the client time without a frontend)."""
    engine = f"engine_{column}"
    return _finite(row[engine] if engine in row else row[column])


def _tail(track: _Track, row: Row) -> None:
    """Detokenize: from the engine step of the last token to the client's receiving it."""
    finish = _finite(row["finish_s"])
    if finish is not None:
        track.add("detokenize", finish)


Row = dict[str, Any]


def records(frame: pd.DataFrame) -> list[Row]:
    """The rows of ``frame`` as plain dicts (column name to value)."""
    return cast(list[Row], frame.to_dict("records"))


def _first_rows(requests: RequestTable, num_requests: int) -> list[Row]:
    """The ``num_requests`` smallest request ids (open-loop ids follow arrival order):
    the table is in id order."""
    if num_requests < 0:  # a slice would take all but the last few
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    head = min(num_requests, len(requests))
    names = [name for name in requests.columns if name != "rejection_reason"]
    columns = [requests[name][:head].tolist() for name in names]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def recorded_spans(
    requests: RequestTable, activity: pd.DataFrame, num_requests: int
) -> list[SpanRow]:
    """Phase spans from an ``ActivityRecorder`` log (one row per chunk or decode run)."""
    by_request: dict[int, pd.DataFrame] = {}
    for key, group in activity.groupby("request_id", sort=False):
        by_request[int(cast(int, key))] = group
    rows: list[SpanRow] = []
    for row in _first_rows(requests, num_requests):
        track = _Track(row)
        log = by_request.get(track.request_id)
        if log is not None:
            _recorded_body(track, log.sort_values("start_s", kind="stable"))
            _tail(track, row)
        rows += track.rows
    return rows


def _recorded_body(track: _Track, log: pd.DataFrame) -> None:
    """Chunks and decode runs, with what separated them: a wait, a preemption, a transfer."""
    preemptions = swaps = 0
    replica = track.replica
    for index, item in enumerate(records(log)):
        where = int(item["replica"])
        if index > 0 and item["num_preemptions"] > preemptions:
            track.add(
                "swapped" if item["num_swaps"] > swaps else "preempted", item["start_s"], 0, where
            )
        elif index > 0 and where != replica:
            track.add("kv_transfer", item["start_s"], 0, where)
        else:
            track.add("waiting", item["start_s"], 0, where)
        preemptions, swaps, replica = item["num_preemptions"], item["num_swaps"], where
        last = track.rows[-1] if track.rows else None
        end_s, num_tokens = float(item["end_s"]), int(item["num_tokens"])
        if (
            item["kind"] == "decode"
            and last is not None
            and (last[2], last[1], last[4]) == ("decode", where, item["start_s"])
        ):  # back-to-back decode runs: one span
            track.rows[-1] = (*last[:4], end_s, last[5] + num_tokens)
            track.now_s = end_s
            continue
        track.add(str(item["kind"]), end_s, num_tokens, where)


def reconstructed_spans(
    requests: RequestTable,
    steps: StepTable,
    later_runs: dict[int, list[tuple[float, int]]],
    num_requests: int,
) -> list[SpanRow]:
    """Phase spans from the request records, the step log and ``later_runs`` only.

    ``steps``: the compact log, searched as it is. Without pandas for a run's
    columns and compact log (``servesim run``'s waterfall, before pandas is loaded).
    """
    rows: list[SpanRow] = []
    for row in _first_rows(requests, num_requests):
        track = _Track(row)
        scheduled = _finite(row["first_scheduled_s"])
        first = _engine_s(row, "first_token_s")
        if scheduled is not None:
            track.add("waiting", scheduled)
        if first is not None:
            _token_body(track, row, steps, later_runs.get(track.request_id), first)
            _tail(track, row)
        rows += track.rows
    return rows


def _token_body(
    track: _Track,
    row: Row,
    steps: StepTable,
    runs: list[tuple[float, int]] | None,
    first_token_s: float,
) -> None:
    """Prefill to the first token, then decode runs split by preemption gaps (token
    times only where the tokens came in several runs; runs that cannot be placed, as
    under speculative decoding, as one decode span)."""
    prefill = _finite(row.get("prefill_replica"))  # None, NaN or NA: on its own replica
    prefill_replica = None if prefill is None else int(prefill)
    count = int(row["num_generated_tokens"])
    track.add("prefill", first_token_s, int(row["num_prompt_tokens"]), prefill_replica)
    last_s = _engine_s(row, "finish_s")
    if runs:
        try:
            times = request_token_times_s(
                steps, first_token_s, count, runs, track.replica, prefill_replica
            )
        except (ValueError, IndexError):
            runs = None
    if not runs:
        if last_s is not None:
            track.add("decode", last_s, max(count - 1, 0))
        return
    starts = [0, *(before for _, before in runs)]
    swapped = int(row.get("num_swaps", 0) or 0) > 0
    for k, begin in enumerate(starts):
        end_index = (starts[k + 1] if k + 1 < len(starts) else count) - 1
        if k == 1 and prefill_replica is not None and prefill_replica != track.replica:
            track.add("kv_transfer", float(times[begin]))
        elif k > 0:
            track.add("swapped" if swapped else "preempted", float(times[begin]))
        track.add("decode", float(times[end_index]), end_index - begin)
