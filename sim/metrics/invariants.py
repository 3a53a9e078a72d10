"""What must hold after every run, whatever the input: checked on the run's own records.

``check_run`` runs once per simulation, where its result is assembled
(``sim.api.result.build_result``: every run, sweep, capacity search and replay);
``LiveChecks`` runs the same checks on a live engine (``servesim serve
--simulate``). A broken invariant is a simulator bug, never a figure to print:
``InvariantError`` names it and the first request or sample that breaks it.

- ``accounting``: every request sent is recorded exactly once, as completed,
  rejected or unfinished (never both rejected and finished).
- ``ttft_within_e2e``: 0 <= TTFT <= E2E for a completed request with a token.
- ``tokens_out``: a completed request generated exactly the tokens it asked
  for; no request generated more.
- ``kv_pool``: no sample of a replica's KV blocks in use exceeds its pool
  (``num_kv_blocks``) nor falls below 0 (sampled at every plan).
- ``littles_law``: on each replica, the time-average number in the engine
  (``num_waiting + num_running``, each sample held until the next) equals
  throughput x mean time in the engine (``ready_s``, or ``pulled_s`` in a
  central-queue run, to ``engine_finish_s``), within the sampling error: each
  entry or exit moves the area by at most the gap it falls in. Not checked for
  a disaggregated run, whose records join two replicas' times.

The cost, a few numpy passes (O(n log m) for n requests and m samples), is
measured by ``benchmarks/sim_speed.py`` (issue 39: within 5 %).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sim.engine.records import RequestTable, completed_mask, floats
from sim.errors import InvariantError

if TYPE_CHECKING:
    from sim.engine.columns import Columns
    from sim.engine.scheduler import EngineCore

INVARIANTS = ("accounting", "ttft_within_e2e", "tokens_out", "kv_pool", "littles_law")
"""Every invariant ``check_run`` checks, by the name its error gives."""

# Float slack of the Little's-law comparison, relative to the areas summed (s):
# sums of n time spans in float64 are exact to ~n * 1e-16 of their magnitude.
_AREA_RTOL = 1e-9


def check_run(
    records: RequestTable,
    series: dict[str, npt.NDArray[Any]],
    num_sent: int | None,
    num_kv_blocks: int,
) -> None:
    """Raise ``InvariantError`` for the first invariant the run breaks (``series``:
    every replica's queue samples; ``num_sent`` None: not known; ``num_kv_blocks``:
    each replica's pool)."""
    _check_rows(records, series, num_sent, num_kv_blocks)
    # (a disaggregated run's records join two replicas' times: module docstring)
    if "engine_finish_s" in records and "prefill_replica" not in records:
        _check_littles_law(records, series)


def _check_rows(
    records: RequestTable,
    series: dict[str, npt.NDArray[Any]],
    num_sent: int | None,
    num_kv_blocks: int,
) -> None:
    """The invariants that hold row by row (and accounting's count): every one but
    Little's law, which needs whole lifetimes."""
    _check_accounting(records, num_sent)
    done = completed_mask(records)
    _check_ttft_within_e2e(records, done)
    _check_tokens_out(records, done)
    _check_kv_pool(series, num_kv_blocks)


class LiveChecks:
    """``check_run``'s invariants on a live engine core, as it serves.

    ``SimulatedEngine`` calls it with its core after each commit (before the
    step's tokens go out) and at each empty plan. A server has no end, so the
    row checks run on the rows new since the last call (a request that breaks
    one never gets its last token), and each time the core is empty (every
    request it took in is recorded) ``check_run`` runs on the stretch since it
    was last empty, Little's law included, the number sent unknown. An
    ``InvariantError`` on the engine's thread stops the engine. Cost:
    ``benchmarks/live_invariants.py``.
    """

    def __init__(self) -> None:
        # The core's logs the cursors count rows of: an engine that drops its logs
        # (``EngineCore.new_logs``, when idle) starts new ones, counted from 0.
        self._records: Columns | None = None
        self._series: Columns | None = None
        self._num_records = self._num_samples = 0  # rows checked row by row
        self._num_done = 0  # the core's count of records written, at the last call
        self._stretch_records = self._stretch_samples = 0  # first rows since the core was empty

    def __call__(self, core: EngineCore) -> None:
        """Check ``core``'s rows since the last call, and its stretch if it is empty."""
        if core.records is not self._records:
            self._records, self._num_records, self._stretch_records = core.records, 0, 0
        if core.series is not self._series:
            self._series, self._num_samples, self._stretch_samples = core.series, 0, 0
        num_kv_blocks = core.kv.num_blocks
        series = _live_series(core, self._num_samples)
        self._num_samples += len(series["time_s"])
        if core.num_done != self._num_done:  # records written since the last call
            self._num_done = core.num_done
            records = _live_records(core, self._num_records)
            self._num_records += len(records)
            _check_rows(records, series, None, num_kv_blocks)
        else:  # most steps finish nobody: only their sample is new
            _check_kv_pool(series, num_kv_blocks)
        if core.running or core.waiting or core.held:
            return
        check_run(
            _live_records(core, self._stretch_records),
            _live_series(core, self._stretch_samples),
            None,
            num_kv_blocks,
        )
        self._stretch_records, self._stretch_samples = self._num_records, self._num_samples


def _rows(columns: Columns, start: int) -> dict[str, npt.NDArray[Any]]:
    """``columns``' rows from ``start`` on, copied: a view would pin the engine's
    arrays, which could then no longer grow."""
    return {name: column[start:].copy() for name, column in columns.views().items()}


def _live_records(core: EngineCore, start: int) -> RequestTable:
    """``core``'s records from row ``start`` on, as a run's table: a live engine's
    client times are its engine times (``engine_finish_s``: its ``finish_s``)."""
    columns = _rows(core.records, start)
    columns["engine_finish_s"] = columns["finish_s"]
    return RequestTable(columns, core.rejections)


def _live_series(core: EngineCore, start: int) -> dict[str, npt.NDArray[Any]]:
    """``core``'s queue samples from row ``start`` on, with their replica."""
    series = _rows(core.series, start)
    series["replica"] = np.full(len(series["time_s"]), core.replica, np.int32)
    return series


def _first(mask: npt.NDArray[np.bool_]) -> int:
    """Index of the first True of ``mask``."""
    return int(np.argmax(mask))


def _check_accounting(records: RequestTable, num_sent: int | None) -> None:
    ids = np.sort(np.asarray(records["request_id"]))
    if num_sent is not None and len(ids) != num_sent:
        raise InvariantError(
            "accounting", f"{num_sent} requests sent but {len(ids)} recorded (each exactly once)"
        )
    repeated = ids[1:] == ids[:-1]
    if repeated.any():
        raise InvariantError("accounting", f"request {ids[_first(repeated)]} recorded twice")
    both = records.rejected & np.isfinite(floats(records["finish_s"]))
    if both.any():
        request = np.asarray(records["request_id"])[_first(both)]
        raise InvariantError("accounting", f"request {request} both rejected and finished")


def _check_ttft_within_e2e(records: RequestTable, done: npt.NDArray[np.bool_]) -> None:
    # No token, no TTFT: an online client that left before its first (tokens_out
    # judges any other request that asked for tokens).
    done = done & (np.asarray(records["num_generated_tokens"]) > 0)
    # Times compared directly: t - arrival is monotone in t, so TTFT <= E2E exactly
    # when first_token_s <= finish_s (NaN compares False: a missing time breaks it).
    arrival = floats(records["arrival_s"])[done]
    first = floats(records["first_token_s"])[done]
    finish = floats(records["finish_s"])[done]
    broken = ~((arrival <= first) & (first <= finish))
    if broken.any():
        at = _first(broken)
        request = np.asarray(records["request_id"])[done][at]
        raise InvariantError(
            "ttft_within_e2e",
            f"request {request}: TTFT {(first[at] - arrival[at]) * 1e3:.6g} ms, "
            f"E2E {(finish[at] - arrival[at]) * 1e3:.6g} ms (need 0 <= TTFT <= E2E)",
        )


def _check_tokens_out(records: RequestTable, done: npt.NDArray[np.bool_]) -> None:
    asked = np.asarray(records["num_output_tokens"])
    generated = np.asarray(records["num_generated_tokens"])
    broken = (done & (generated != asked)) | (generated > asked)
    if broken.any():
        at = _first(broken)
        state = "completed" if done[at] else "unfinished or rejected"
        raise InvariantError(
            "tokens_out",
            f"request {np.asarray(records['request_id'])[at]} ({state}) generated "
            f"{generated[at]} tokens of the {asked[at]} it asked for",
        )


def _check_kv_pool(series: dict[str, npt.NDArray[Any]], num_kv_blocks: int) -> None:
    used = np.asarray(series["num_kv_blocks_used"])
    broken = (used > num_kv_blocks) | (used < 0)
    if broken.any():
        at = _first(broken)
        raise InvariantError(
            "kv_pool",
            f"replica {series['replica'][at]} had {used[at]} KV blocks in use at "
            f"{series['time_s'][at]:.9g} s, of a pool of {num_kv_blocks}",
        )


def _check_littles_law(records: RequestTable, series: dict[str, npt.NDArray[Any]]) -> None:
    accepted = ~records.rejected
    if "pulled_s" in records:  # a central-queue run (module docstring)
        enter_all = floats(records["pulled_s"])
        still_queued = accepted & np.isnan(enter_all)
        if np.isfinite(floats(records["engine_finish_s"])[still_queued]).any():
            request = np.asarray(records["request_id"])[_first(still_queued)]
            raise InvariantError("littles_law", f"request {request} finished, never pulled")
        accepted &= ~still_queued
    else:
        enter_all = floats(records["ready_s"])
    enter_all = enter_all[accepted]
    leave_all = floats(records["engine_finish_s"])[accepted]
    owner = np.asarray(records["replica"])[accepted]
    sample_owner = np.asarray(series["replica"])
    time_all = floats(series["time_s"])
    count_all = np.asarray(series["num_waiting"], np.float64) + series["num_running"]
    series_area = records_area = tolerance = slack = 0.0
    start_s, end_s = np.inf, -np.inf
    num_in = 0
    for replica in sorted(set(owner.tolist())):  # (np.unique imports numpy.ma: ~30 ms)
        mine = owner == replica
        enter, leave = enter_all[mine], leave_all[mine]
        samples = sample_owner == replica
        times, counts = time_all[samples], count_all[samples]
        # The replica's window: its first entry or sample to its last exit or sample;
        # no one is in before the first sample, a request unfinished at the end is
        # in until the window closes, and the last sample holds until then.
        first_s = float(min(enter.min(), times[0] if len(times) else np.inf))
        last_s = float(np.nanmax([np.nanmax(leave), times[-1] if len(times) else -np.inf]))
        leave = np.where(np.isnan(leave), last_s, leave)
        bounds = np.concatenate(([first_s], times, [last_s]))
        gaps = np.diff(bounds)  # gap 0: before the first sample (count 0)
        # A product and a sum, not ``@``: BLAS's threads cost ms on a busy machine.
        area = float((counts * gaps[1:]).sum())
        series_area += area
        spans = leave - enter
        records_area += float(spans.sum())
        # Each entry and exit: at most the gap it falls in (a sample at its start counts
        # it or not; the next sample does).
        for events in (enter, leave):
            tolerance += float(gaps[np.searchsorted(times, events, side="right")].sum())
        slack += _AREA_RTOL * (float(np.abs(spans).sum()) + area)
        start_s, end_s = min(start_s, first_s), max(end_s, last_s)
        num_in += len(enter)
    if num_in == 0 or not end_s > start_s:
        return
    if abs(series_area - records_area) > tolerance + slack:
        window_s = end_s - start_s
        throughput_per_s, mean_s = num_in / window_s, records_area / num_in
        raise InvariantError(
            "littles_law",
            f"time-average number in the engine {series_area / window_s:.6g} (queue samples) "
            f"!= throughput {throughput_per_s:.6g}/s x mean time in it {mean_s:.6g} s = "
            f"{records_area / window_s:.6g} (records), beyond the sampling error "
            f"{tolerance / window_s:.3g}",
        )
