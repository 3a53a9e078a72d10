"""Serving metrics as ``vllm bench serve`` reports them, from simulation outputs.

Definitions (all per completed request; times in seconds in frames, reported in ms):

- completed: a request with a finite ``finish_s`` that was not rejected. Rejected
  requests count in ``num_rejected`` only; unfinished ones (still running when the
  simulation stopped) count nowhere, as in vllm, which only scores successes.
- TTFT = ``first_token_s - arrival_s``; E2EL = ``finish_s - arrival_s``.
- TTFT's parts (``TTFT_PARTS``), per request, summing to its TTFT: the way in
  (``way_in_s``: arrival to ready, the server's HTTP, tokenization and IPC),
  queueing (``queue_s``: ready to first scheduled), prefill (``prefill_s``:
  first scheduled to the engine step that computed the first token, chunks,
  the steps between them and any preemption before it included) and the way
  out (``way_out_s``: that step's end to the client, through the frontend; 0
  for a table without engine times, such as a measured run).
- TPOT = (E2EL - TTFT) / (``num_generated_tokens`` - 1), only for requests with at
  least two generated tokens (for goodput a 1-token request has TPOT 0, as in vllm).
- ITL: every gap between consecutive tokens, weighted (``sim.metrics.itl``). Unlike
  vllm, gaps of requests unfinished at the end of the simulation count too.
- duration: from the first arrival (any request, rejected or not) to the last
  finish of a completed request: the simulated counterpart of vllm's benchmark
  wall time, which starts when the first request is sent.
- goodput: completed requests meeting every given SLO (``<=``), per second.

Undefined values (no completed request, no TPOT sample, no ITL gap, zero
duration) are ``None`` (JSON null). Percentiles: numpy's ``linear`` method, as vllm's
(``sim.metrics.quantiles``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from pydantic import Field

from sim.config import FloatArray, Frozen

# (REQUEST_COLUMNS, RequestTable and text_dtype also for sim.validation's frames)
from sim.engine.records import REQUEST_COLUMNS as REQUEST_COLUMNS
from sim.engine.records import RequestTable, completed_mask, floats
from sim.engine.records import text_dtype as text_dtype
from sim.engine.step_runs import StepTable
from sim.metrics.itl import itl_distribution
from sim.metrics.quantiles import Summary, check_percentiles, latency_stats_ms, percentile_key

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

BoolArray = npt.NDArray[np.bool_]

# Columns of text a request table holds: stored as text even when no row holds any
# (a frame holds them in pandas' text dtype: ``sim.engine.records.text_dtype``).
TEXT_COLUMNS = ("rejection_reason",)


class Slo(Frozen):
    """Per-request service-level objectives in milliseconds; ``None`` = no limit."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2el_ms: float | None = Field(default=None, gt=0)

    @property
    def is_empty(self) -> bool:
        """True when no objective is set (then goodput is not reported, as in vllm)."""
        return self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None


# TTFT's parts, in the order a request meets them: (column, what it is).
TTFT_PARTS = (
    ("way_in_s", "way in"),
    ("queue_s", "queueing"),
    ("prefill_s", "prefill"),
    ("way_out_s", "way out"),
)


def latency_columns(requests: RequestTable) -> dict[str, FloatArray]:
    """``ttft_s``, ``tpot_s``, ``e2el_s`` and TTFT's parts (module docstring; they sum
    to ``ttft_s``) per request; NaN where an event it needs never happened."""
    arrival = floats(requests["arrival_s"])
    first_token = floats(requests["first_token_s"])
    num_generated = floats(requests["num_generated_tokens"])
    ready = floats(requests["ready_s"])
    first_scheduled = floats(requests["first_scheduled_s"])
    # Without engine times (a measured run) the client's are taken as the engine's.
    engine_first_token = (
        floats(requests["engine_first_token_s"])
        if "engine_first_token_s" in requests
        else first_token
    )
    # NaN where undefined, quietly: unfinished or failed requests (inf - inf, 0 / 0).
    with np.errstate(divide="ignore", invalid="ignore"):
        ttft = first_token - arrival
        e2el = floats(requests["finish_s"]) - arrival
        return {
            "ttft_s": ttft,
            "tpot_s": np.where(num_generated >= 2, (e2el - ttft) / (num_generated - 1), np.nan),
            "e2el_s": e2el,
            "way_in_s": ready - arrival,
            "queue_s": first_scheduled - ready,
            "prefill_s": engine_first_token - first_scheduled,
            "way_out_s": first_token - engine_first_token,
        }


def ttft_parts_summary(requests: RequestTable) -> Summary:
    """``mean_`` and ``median_ttft_<part>_ms`` of TTFT's parts over completed requests.

    The means add up to the mean TTFT (to rounding); medians need not.
    """
    done = completed_mask(requests)
    columns = latency_columns(requests)
    summary: Summary = {}
    for column, _ in TTFT_PARTS:
        part = column.removesuffix("_s")
        stats = latency_stats_ms(f"ttft_{part}", columns[column][done], None, ())
        summary[f"mean_ttft_{part}_ms"] = stats[f"mean_ttft_{part}_ms"]
        summary[f"median_ttft_{part}_ms"] = stats[f"median_ttft_{part}_ms"]
    return summary


def with_request_metrics(requests: pd.DataFrame) -> pd.DataFrame:
    """Copy of ``requests`` (a frame handed out: a result's, a measured run's) with
    the columns of ``latency_columns`` added."""
    latencies = latency_columns(RequestTable.from_frame(requests))
    return requests.assign(**latencies)


def request_columns(table: RequestTable) -> dict[str, npt.NDArray[Any]]:
    """``with_request_metrics(table.frame())``'s columns, without pandas (what
    ``servesim run`` writes to ``requests.parquet``)."""
    # rejection_reason: objects, the reason or None (a text column, written as text).
    return {name: table[name] for name in table.columns} | latency_columns(table)


def good_mask(derived: pd.DataFrame | Mapping[str, FloatArray], slo: Slo) -> BoolArray:
    """Rows of ``latency_columns`` (or ``with_request_metrics``) meeting every SLO (for
    completed requests; a 1-token request meets any TPOT SLO)."""
    good = np.ones(len(derived["ttft_s"]), dtype=bool)  # rows (a mapping's len: its keys)
    if slo.ttft_ms is not None:
        good &= floats(derived["ttft_s"]) * 1000.0 <= slo.ttft_ms
    if slo.tpot_ms is not None:
        tpot_ms = np.nan_to_num(floats(derived["tpot_s"]), nan=0.0) * 1000.0
        good &= tpot_ms <= slo.tpot_ms
    if slo.e2el_ms is not None:
        good &= floats(derived["e2el_s"]) * 1000.0 <= slo.e2el_ms
    return good


def summarize(
    requests: RequestTable,
    steps: StepTable,
    extra_itl_s: npt.ArrayLike,
    slo: Slo | None = None,
    percentiles: Sequence[float] = (90, 99),
) -> Summary:
    """The ``vllm bench serve`` result dict (scalars: ``duration`` s, throughputs per s,
    latencies ms) plus ``num_rejected``; goodput ``None`` without an SLO."""
    check_percentiles(percentiles)
    # First, while nothing else is held: its (gap, weight) pairs may fill GBs.
    itl = itl_distribution(steps, extra_itl_s, percentiles)
    done = completed_mask(requests)
    ok = {name: values[done] for name, values in latency_columns(requests).items()}
    num_completed = int(done.sum())
    total_input = int(floats(requests["num_prompt_tokens"])[done].sum())
    total_output = int(floats(requests["num_generated_tokens"])[done].sum())
    duration: float | None = None
    if num_completed > 0:
        first_arrival = float(np.nanmin(floats(requests["arrival_s"])))
        duration = float(np.max(floats(requests["finish_s"])[done])) - first_arrival

    def per_s(count: float) -> float | None:
        return count / duration if duration is not None and duration > 0 else None

    goodput = None
    if slo is not None and not slo.is_empty:
        goodput = per_s(float(good_mask(ok, slo).sum()))
    summary: Summary = {
        "duration": duration,
        "completed": num_completed,
        "num_rejected": int(requests.rejected.sum()),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": per_s(num_completed),
        "request_goodput": goodput,
        "output_throughput": per_s(total_output),
        "total_token_throughput": per_s(total_input + total_output),
    }
    summary |= latency_stats_ms("ttft", ok["ttft_s"], None, percentiles)
    summary |= latency_stats_ms("tpot", ok["tpot_s"], None, percentiles)
    summary |= itl
    summary |= latency_stats_ms("e2el", ok["e2el_s"], None, percentiles)
    return summary


def sample_notes(requests: RequestTable, percentiles: Sequence[float] = (90, 99)) -> dict[str, Any]:
    """How many samples ``summarize``'s per-request statistics rest on
    (``num_<metric>_samples``) and the ``caveats`` that follow: summary.json's
    keys beside vLLM's, which the printout shows under the result block."""
    done = completed_mask(requests)
    columns = latency_columns(requests)
    counts = {m: int(np.isfinite(columns[f"{m}_s"][done]).sum()) for m in ("ttft", "tpot", "e2el")}
    notes: dict[str, Any] = {f"num_{metric}_samples": n for metric, n in counts.items()}
    notes["caveats"] = percentile_caveats(counts, percentiles)
    return notes


# A percentile q rests on about n (1 - q) samples beyond it: with fewer than this many
# it is noisy, and with fewer than one it is no measured tail at all (a caveat either way).
MIN_TAIL_SAMPLES = 10


def percentile_caveats(counts: Mapping[str, int], percentiles: Sequence[float]) -> list[str]:
    """What each per-request percentile rests on, where that is too little to read
    it as exact (``counts``: finite samples per metric): summary.json's ``caveats``,
    printed under the result block."""
    out = []
    for metric, n in counts.items():
        for p in percentiles:
            # The tail is on the nearer side: p1 rests on the samples below it as
            # p99 on those above (and p0 is the minimum as p100 the maximum).
            beyond = n * min(p, 100.0 - p) / 100.0
            key = percentile_key(p, metric)
            if n == 0 or beyond >= MIN_TAIL_SAMPLES:
                continue
            if beyond < 1.0:
                out.append(f"{key} from {n} sample(s) {_beyond_extreme(n, p)}")
            else:
                out.append(f"{key} rests on {n} samples, about {beyond:.0f} beyond it: noisy")
    return out


def _beyond_extreme(n: int, p: float) -> str:
    """Where the linear method puts the ``p``-th percentile of ``n`` samples when fewer
    than one lies beyond it: at rank ``h = (n - 1) p / 100`` from the nearer end (the
    method is symmetric), which is then beyond ``n - 2``, so between the two most
    extreme samples, ``h - (n - 2)`` of the way to the extreme (at it when ``h = n - 1``)."""
    high = p >= 50.0
    rank = (n - 1) * (p if high else 100.0 - p) / 100.0
    if n == 1 or rank >= n - 1:
        return f"is their {'maximum' if high else 'minimum'}, not a percentile"
    side = "largest" if high else "smallest"
    share = rank - (n - 2)
    return f"lies between their two {side}, {share:.0%} of the way to the {side}: no tail measured"
