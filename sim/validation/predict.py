"""Predicting a measured run, and comparing latency distributions (torch-free).

``predict`` simulates exactly the request set a measured run served (same
arrivals, lengths, priorities and shared-prefix groups, same scheduler, KV pool
and replicas) with a given cost model, under the load the run's tool drove
(``replay_work``). ``compare`` puts a measured and a predicted run side by side
for TTFT, TPOT, ITL and E2E latency. The same comparison between two measured
runs of one scenario is the noise floor: how far a perfect prediction could be
expected to land from a measurement.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.api import Result, replay
from sim.config import FloatArray
from sim.cost.base import CostModel
from sim.metrics.itl import step_itl_gaps_s
from sim.metrics.quantiles import Summary, latency_stats_ms
from sim.metrics.stats import (
    RequestTable,
    StepTable,
    completed_mask,
    latency_columns,
    sample_notes,
    summarize,
)
from sim.scenario import Scenario, Slo
from sim.validation.intake import counted_from_intake
from sim.workload.generate import RequestArrays, WorkloadConfig
from sim.workload.listed_loop import ListedClosedLoop

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p90", "p99")
_PAIRED = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2el_s"}


# Per-request spec columns a measured table keeps beyond arrival and lengths: the
# scheduler reads them (priority) or the KV pool does (the shared prefix).
PREFIX_COLUMNS = ("prefix_group", "num_shared_prefix_tokens")


def with_request_spec(requests: pd.DataFrame, work: RequestArrays) -> pd.DataFrame:
    """``requests`` (ids 0..n-1 of ``work``) with ``work``'s shared-prefix columns added,
    when it has them, so that ``requests_as_work`` gives the same requests back."""
    if work.prefix_group is None or work.num_shared_prefix_tokens is None:
        return requests
    ids = requests["request_id"].to_numpy(dtype=np.int64)
    return requests.assign(
        prefix_group=work.prefix_group[ids],
        num_shared_prefix_tokens=work.num_shared_prefix_tokens[ids],
    )


def _int_column(table: pd.DataFrame, name: str) -> npt.NDArray[np.int64] | None:
    return table[name].to_numpy(dtype=np.int64) if name in table.columns else None


def requests_as_work(requests: pd.DataFrame) -> RequestArrays:
    """The open-loop request set of a measured table: same arrivals and lengths, and
    the priorities and shared prefixes the table records (columns ``priority``,
    ``prefix_group`` with ``num_shared_prefix_tokens``)."""
    ordered = requests.sort_values("request_id")
    ids = ordered["request_id"].to_numpy()
    if not np.array_equal(ids, np.arange(len(ids))):
        raise ValueError("measured request ids must be 0..n-1 (a whole measured run)")
    groups, shared = (_int_column(ordered, name) for name in PREFIX_COLUMNS)
    if (groups is None) != (shared is None):
        raise ValueError(f"measured requests: give both {' and '.join(PREFIX_COLUMNS)} or neither")
    return RequestArrays(
        ordered["arrival_s"].to_numpy(dtype=np.float64),
        ordered["num_prompt_tokens"].to_numpy(dtype=np.int64),
        ordered["num_output_tokens"].to_numpy(dtype=np.int64),
        prefix_group=groups,
        num_shared_prefix_tokens=shared,
        priority=_int_column(ordered, "priority"),
    )


SCHEDULE_COLUMNS = ("scheduled_s", "scheduled_arrival_s")
"""Where a measured table keeps when its tool meant to send each request (GuideLLM
import, ``servesim measure --endpoint``), seconds."""


def load_of(workload: WorkloadConfig) -> dict[str, Any] | None:
    """The load a run of ``workload`` was driven by (``summary.json`` ``load``, read back
    by ``replay_work``); None where the send times tell it all."""
    if workload.kind == "closed_loop":
        think = workload.think_time_s
        if think.kind != "fixed" or think.value_s != 0:
            return None
        streams = int(workload.num_users)
        return (
            {"profile": "synchronous"}
            if streams == 1
            else {"profile": "concurrent", "streams": streams}
        )
    limit = workload.max_concurrency
    cap = {} if limit is None else {"max_concurrency": int(limit)}
    if workload.kind == "synthetic" and workload.arrival.rate_per_s == float("inf"):
        return {"profile": "throughput"} | cap
    return cap or None


def replay_work(
    requests: pd.DataFrame, load: Mapping[str, Any] | None = None
) -> RequestArrays | ListedClosedLoop:
    """The measured requests as the load that drove them (``load``: ``run.json``'s, a
    profile of ``sim.workload.profiles``; None: the open loop at the measured send times),
    as docs/validation.md's load -> replay table tells ("GuideLLM: commands, phases,
    loads, prefixes"): a closed loop keeps the run's concurrency whatever the simulated
    server's pace."""
    work = requests_as_work(requests)
    profile = None if load is None else load.get("profile")
    limit = None if load is None else load.get("max_concurrency")
    if profile in ("synchronous", "concurrent"):
        assert load is not None
        streams = 1 if profile == "synchronous" else int(load["streams"])
        return ListedClosedLoop(
            streams,
            work.num_prompt_tokens,
            work.num_output_tokens,
            work.prefix_group,
            work.num_shared_prefix_tokens,
        )
    if profile == "throughput":
        at_once = np.zeros(len(work), dtype=np.float64)
        return dataclasses.replace(work, arrival_s=at_once, max_concurrency=limit)
    if limit is not None:  # a capped rate: the tool's schedule, under the cap
        ordered = requests.sort_values("request_id")
        for column in SCHEDULE_COLUMNS:
            if column in ordered.columns:
                scheduled = ordered[column].to_numpy(dtype=np.float64)
                if np.all(np.diff(scheduled) >= 0) and np.all(scheduled >= 0):
                    return dataclasses.replace(work, arrival_s=scheduled, max_concurrency=limit)
        return dataclasses.replace(work, max_concurrency=limit)
    return work


def predict(
    scenario: Scenario,
    measured_requests: pd.DataFrame,
    cost: CostModel | None = None,
    load: Mapping[str, Any] | None = None,
) -> Result:
    """Simulate the measured request set with ``cost`` (default: the scenario's)
    under the run's ``load`` (``replay_work``; None: at the measured send times)."""
    return replay(scenario, replay_work(measured_requests, load), cost)


@dataclasses.dataclass
class Latencies:
    """Per-request latencies (seconds, indexed by request id) and every ITL gap."""

    per_request: pd.DataFrame  # ttft_s, tpot_s, e2el_s of completed requests
    itl_s: FloatArray

    def values(self, metric: str) -> FloatArray:
        """All finite values of ``metric`` in seconds."""
        if metric == "itl":
            return self.itl_s
        v = self.per_request[_PAIRED[metric]].to_numpy(dtype=np.float64)
        return v[np.isfinite(v)]


def per_request_latencies(requests: pd.DataFrame) -> pd.DataFrame:
    """``ttft_s``, ``tpot_s``, ``e2el_s`` of the completed requests, indexed by request id."""
    table = RequestTable.from_frame(requests)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        columns = latency_columns(table)
    done = completed_mask(table)
    index = pd.Index(table["request_id"][done], name="request_id")
    return pd.DataFrame({name: columns[name][done] for name in _PAIRED.values()}, index=index)


def token_gaps_s(tokens: pd.DataFrame) -> FloatArray:
    """Every gap between consecutive tokens (chunks) of one request, in seconds."""
    ordered = tokens.sort_values(["request_id", "token_index"])
    ids = ordered["request_id"].to_numpy()
    return np.diff(ordered["time_s"].to_numpy(dtype=np.float64))[ids[1:] == ids[:-1]]


def measured_summary(requests: RequestTable, tokens: pd.DataFrame, slo: Slo | None) -> Summary:
    """``summarize``'s result dict and ``sample_notes`` of a measured run (a live server's
    or the reference engine's), ITL from the real gaps between a request's tokens:
    what a client sees, not a step log's gaps."""
    no_steps = StepTable(())  # ITL comes from ``tokens``
    summary = summarize(requests, no_steps, np.empty(0), slo)
    summary |= latency_stats_ms("itl", token_gaps_s(tokens))
    return summary | sample_notes(requests)


def measured_latencies(requests: pd.DataFrame, tokens: pd.DataFrame | None) -> Latencies:
    """Latencies of a measured run; ITL from the real gaps between a request's tokens
    (none where the run kept no token times)."""
    gaps = np.empty(0, dtype=np.float64) if tokens is None else token_gaps_s(tokens)
    return Latencies(per_request_latencies(requests), gaps)


def simulated_latencies(result: Result, from_intake: bool = False) -> Latencies:
    """Latencies of a simulated run; ITL gaps expanded from the step log's weights.
    ``from_intake``: TTFT and E2EL counted from the engine's intake, as a run whose
    arrivals are vLLM's ``queued_ts`` counts them (``sim.validation.intake``)."""
    durations, weights = step_itl_gaps_s(result.raw.step_table)
    gaps = np.concatenate([np.repeat(durations, weights.astype(np.int64)), result.raw.extra_itl_s])
    requests = counted_from_intake(result) if from_intake else result.raw.requests
    return Latencies(per_request_latencies(requests), gaps)


def ks_distance(a: FloatArray, b: FloatArray) -> float | None:
    """Largest vertical gap between the empirical CDFs of ``a`` and ``b`` (the two-sample
    Kolmogorov–Smirnov statistic); None when either is empty."""
    if a.size == 0 or b.size == 0:
        return None
    from scipy.stats import ks_2samp  # imported when a comparison runs: start-up stays fast

    # The statistic only: "asymp" skips the exact p-value's cost on large samples.
    return float(ks_2samp(a, b, method="asymp").statistic)


def stats_ms(values_s: FloatArray) -> dict[str, float | None]:
    """mean, p50, p90, p99 in milliseconds (None without values)."""
    if values_s.size == 0:
        return dict.fromkeys(STATS)
    values = [values_s.mean(), *np.percentile(values_s, [50, 90, 99])]
    return {stat: 1e3 * float(value) for stat, value in zip(STATS, values, strict=True)}


def _error_pct(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return 100.0 * (predicted - measured) / measured


def paired_error(a: pd.DataFrame, b: pd.DataFrame, column: str) -> dict[str, float | None]:
    """Median and p90 of ``|b - a| / a`` over requests present (and finite) in both."""
    joined = a[[column]].add_suffix("_a").join(b[[column]].add_suffix("_b"), how="inner")
    x = joined[f"{column}_a"].to_numpy(dtype=np.float64)
    y = joined[f"{column}_b"].to_numpy(dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0)
    if not keep.any():
        return {"median": None, "p90": None, "count": 0}
    rel = np.abs(y[keep] - x[keep]) / x[keep]
    return {
        "median": float(np.median(rel)),
        "p90": float(np.percentile(rel, 90)),
        "count": int(keep.sum()),
    }


def compare(measured: Latencies, predicted: Latencies) -> dict[str, dict[str, Any]]:
    """Per metric: measured and predicted mean/p50/p90/p99 (ms) with the predicted's %
    error, the paired per-request error (``paired_error``; not for ITL, which is per
    token) and the KS distance."""
    out: dict[str, dict[str, Any]] = {}
    for metric in METRICS:
        m, p = measured.values(metric), predicted.values(metric)
        ms, ps = stats_ms(m), stats_ms(p)
        out[metric] = {
            "measured_ms": ms,
            "predicted_ms": ps,
            "error_pct": {s: _error_pct(ps[s], ms[s]) for s in STATS},
            "paired": (
                paired_error(measured.per_request, predicted.per_request, _PAIRED[metric])
                if metric in _PAIRED
                else None
            ),
            "ks": ks_distance(m, p),
            "count": {"measured": int(m.size), "predicted": int(p.size)},
        }
    return out


def within_targets(
    comparison: dict[str, dict[str, Any]],
    metrics: tuple[str, ...] = ("ttft", "tpot"),
    p50_p90_pct: float = 10.0,
    p99_pct: float = 15.0,
) -> dict[str, bool]:
    """Per metric: p50 and p90 errors within ``p50_p90_pct`` and p99 within ``p99_pct``?"""
    limits = (("p50", p50_p90_pct), ("p90", p50_p90_pct), ("p99", p99_pct))
    errors = {metric: comparison[metric]["error_pct"] for metric in metrics}
    return {
        metric: all(e[s] is not None and abs(e[s]) <= limit for s, limit in limits)
        for metric, e in errors.items()
    }
