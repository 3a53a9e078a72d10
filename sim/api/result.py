"""A finished run (``Result``) and its summary.json keys."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import sim
from sim.api.build import model_for
from sim.cost.config import cost_caveats
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import prefix_cache_summary
from sim.engine.records import RequestTable, completed_mask, floats
from sim.engine.speculative import speculative_summary
from sim.hardware.kv_capacity import SOURCE_ESTIMATE, SOURCE_SCENARIO
from sim.hardware.quantization import dtype_name
from sim.hardware.specs import model_caveat
from sim.metrics.figure_data import NUM_WATERFALL_REQUESTS, figure_caption
from sim.metrics.invariants import check_run
from sim.metrics.lifecycle import SPAN_COLUMNS, SpanRow, reconstructed_spans, recorded_spans
from sim.metrics.out_path import staged, unstaged
from sim.metrics.report import FigureJob, draw_figures, write_outputs
from sim.metrics.stats import (
    request_columns,
    sample_notes,
    summarize,
    ttft_parts_summary,
    with_request_metrics,
)
from sim.metrics.trace import trace_document, write_trace
from sim.scenario import Scenario
from sim.serving.cluster import cluster_summary, request_token_times_s
from sim.serving.frontend import Delivery
from sim.serving.replica_config import ReplicaConfig
from sim.serving.simulation import RawResult
from sim.workload.arrivals import ArrivalConfig, ConstantArrival, GammaArrival
from sim.workload.generate import SyntheticWorkload, TraceWorkload, WorkloadConfig
from sim.workload.trace import HashIds

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

DEFAULT_TRACE_REQUESTS = 100  # requests in trace.json unless told: a few MB at most


@dataclass(repr=False)
class Result:
    """A finished run: per-request table, summary, time series and step log;
    ``activity``: the per-step log of the first ``num_traced_requests`` requests of a
    traced run (``run(..., trace_requests=N)``), else None."""

    scenario: Scenario
    summary: dict[str, Any]
    raw: RawResult
    activity: pd.DataFrame | None = None
    num_traced_requests: int | None = None
    # The shared prefixes of ``run``'s requests as hash ids by request id, and the tokens
    # an id covers (``RequestArrays.hash_ids``): what ``--save-trace`` writes beyond the
    # records. None: none shared, or not from ``run``.
    prefix_hash_ids: tuple[HashIds, int | None] | None = None

    def __repr__(self) -> str:
        summary, cluster = self.summary, self.scenario.cluster
        per_replica = self.scenario.parallelism.num_gpus  # GPUs
        num_replicas = cluster.total_replicas if cluster is not None else 1
        where = f"{num_replicas} replicas of " if num_replicas > 1 else ""
        num_requests = len(self.raw.records)
        completed, rejected = int(summary.get("completed", 0)), int(summary.get("num_rejected", 0))
        unfinished = num_requests - completed - rejected
        counts = f"{completed} completed, {rejected} rejected" + (
            f", {unfinished} unfinished" if unfinished > 0 else ""
        )
        latencies = ", ".join(
            f"{name.upper()} {_short(summary.get(f'median_{name}_ms'))} / "
            f"{_short(summary.get(f'p99_{name}_ms'))}"
            for name in ("ttft", "tpot", "itl", "e2el")
        )
        return (
            f"Result {self.scenario.name!r}: {self.scenario.model.name} on {where}{per_replica}x "
            f"{self.scenario.hardware.name}, {num_requests} requests ({counts}) "
            f"in {_short(summary.get('duration'))} s\n"
            f"  cost model: {summary.get('cost_model', 'n/a')}\n"
            f"  p50 / p99 ms: {latencies}"
        )

    @functools.cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request: its record, client times and ``latency_columns``
        (built on first use: the summary needs no frame)."""
        return with_request_metrics(self.raw.requests)

    @property
    def timeseries(self) -> pd.DataFrame:
        """Each replica's queue state and KV use, sampled at every plan."""
        return self.raw.timeseries

    @property
    def steps(self) -> pd.DataFrame:
        """The step log, one row per step: expanded from the compact log on first use."""
        return self.raw.steps

    def token_times_s(self, request_id: int) -> npt.NDArray[np.float64]:
        """Stream time of every output token of one request, in seconds."""
        if self.scenario.speculative is not None:
            raise NotImplementedError("token times assume one token per step (speculation is on)")
        first, count, replica, prefill = self._token_source(request_id)
        if np.isnan(first):
            return np.empty(0)
        engine_s = request_token_times_s(
            self.raw.step_table, first, count, self.raw.later_runs.get(request_id), replica, prefill
        )
        return self._delivery.client_s(engine_s, np.full(engine_s.shape, replica))

    def _token_source(self, request_id: int) -> tuple[float, int, int, int | None]:
        """(engine first-token time, tokens, replica, prefill replica: None but in a
        disaggregated run) of one request."""
        records = self.raw.records
        rows, found = records.find(request_id)
        if not found:
            raise KeyError(f"no request {request_id}")
        at = int(rows)
        prefill = records["prefill_replica"][at] if "prefill_replica" in records else np.nan
        return (
            float(records["engine_first_token_s"][at]),
            int(records["num_generated_tokens"][at]),
            int(records["replica"][at]),
            None if np.isnan(prefill) else int(prefill),
        )

    @functools.cached_property
    def _delivery(self) -> Delivery:
        """The step log's engine-to-client time map, built once per result."""
        return Delivery.of(self.raw.step_table)

    def spans(self, num_requests: int = NUM_WATERFALL_REQUESTS) -> pd.DataFrame:
        """Phase spans of the first ``num_requests`` requests (``sim.metrics.lifecycle``):
        exact prefill chunks and preemption gaps when the run was traced (and
        ``num_requests`` is within what it traced), else rebuilt from the records."""
        # Imported here: pandas loads with the first frame (docs/dev/speed.md).
        import pandas as pd

        return pd.DataFrame(self._span_rows(num_requests), columns=SPAN_COLUMNS)

    def _span_rows(self, num_requests: int) -> list[SpanRow]:
        raw = self.raw
        traced = self.num_traced_requests
        if self.activity is not None and traced is not None and num_requests <= traced:
            return recorded_spans(raw.records, self.activity, num_requests)
        # The run's columns and compact log: no frame is built, no step expanded.
        return reconstructed_spans(raw.records, raw.step_table, raw.later_runs, num_requests)

    def trace(self, num_requests: int | None = None) -> dict[str, Any]:
        """The run as a Chrome / Perfetto trace-event document (``sim.metrics.trace``)
        of ``num_requests``: by default those the run traced, else ``DEFAULT_TRACE_REQUESTS``."""
        count = num_requests
        if count is None:  # 0 is 0 requests
            count = self.num_traced_requests or DEFAULT_TRACE_REQUESTS
        metadata = {"scenario": self.scenario.name, "num_traced_requests": count}
        # The compact step log and the series columns: only the steps within the
        # traced requests' window are worked out (a long run has millions).
        raw = self.raw
        spans = self.spans(count)
        return trace_document(spans, raw.records, raw.step_table, raw.series, metadata)

    def write(
        self,
        out_dir: str | Path,
        write_steps: bool = False,
        trace: bool = False,
        *,
        plots: bool = True,
    ) -> list[Path]:
        """Write tables, summary.json and plots (``plots=False``: none, a caller draws
        ``figure_job``) into ``out_dir``, all or none; ``trace.json`` if ``trace``. The
        tables go without pandas but for nullable integers (a disaggregated run's
        ``prefill_replica``), which pandas' file stores as such."""
        raw = self.raw
        records = raw.records
        out = Path(out_dir)
        with staged(out) as stage:  # all files or none (an interrupted write removes them)
            written = write_outputs(
                stage,
                self.requests if records.nullable else request_columns(records),
                # Expanded to one row per step only when written (tens of millions of rows).
                raw.step_table.columns() if write_steps else {},
                raw.series,
                self.summary,
                write_steps=write_steps,
                plots=False,
            )
            if plots:
                written += draw_figures(self.figure_job(stage))
            if trace:
                written.append(write_trace(stage / "trace.json", self.trace()))
        return unstaged(written, stage, out)

    def figure_job(self, out_dir: str | Path) -> FigureJob:
        """What ``write`` draws into ``out_dir``, as data to draw elsewhere (``draw_figures``),
        built without pandas (unless the run was traced): ``servesim run`` hands the
        figures over before it imports pandas."""
        raw = self.raw
        waterfall = (self._span_rows(NUM_WATERFALL_REQUESTS), raw.records)
        caption = figure_caption(self.summary)  # scenario, model, GPU, cost model
        return FigureJob(
            Path(out_dir), raw.records, raw.series, self.scenario.slo, waterfall, caption
        )


def _short(value: float | None) -> str:
    """A number for ``Result``'s repr: 4 significant digits (whole from 1000 on), or
    n/a (no samples)."""
    if value is None or value != value:
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _layout_summary(scenario: Scenario) -> dict[str, Any]:
    """summary.json keys for the parallel layout and the storage dtypes."""
    layout, quant, model = scenario.parallelism, scenario.quantization, model_for(scenario)
    return {
        "tensor_parallel_size": layout.tensor_parallel_size,
        "pipeline_parallel_size": layout.pipeline_parallel_size,
        # The deployment's GPUs, every replica's (a sweep's table and capacity's fleet
        # count the same); one replica's are its tensor x pipeline parallel sizes.
        "num_gpus": scenario.num_gpus,
        "link": layout.link.name if not layout.is_single_device else None,
        "weight_dtype": dtype_name(model.weight_dtype_bytes, quant.weights),
        "kv_cache_dtype": dtype_name(model.kv_dtype_bytes, quant.kv_cache),
        "weight_gb_per_gpu": model.weight_bytes / layout.num_gpus / 1e9,
        # What of the model is not modelled (a sliding window), or None.
        "model_caveat": model_caveat(model),
    }


def engine_settings(scenario: Scenario, engine: CoreConfig) -> dict[str, Any]:
    """The engine settings that ran, defaults filled in (summary.json ``engine_settings``;
    a measured run records them too, from its ``CoreConfig``)."""
    policy = scenario.scheduler
    settings: dict[str, Any] = {"scheduler": policy.kind}
    given = policy.model_dump()  # the policy's own fields: each kind has some of these
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_batch_size", "chunked_prefill"):
        value = given.get(name)
        if value is not None:
            settings[name] = value
    settings.update(
        num_kv_blocks=engine.num_kv_blocks,
        num_kv_blocks_source=(
            SOURCE_SCENARIO if scenario.engine.num_kv_blocks is not None else SOURCE_ESTIMATE
        ),
        block_size_tokens=engine.block_size_tokens,
        max_model_len_tokens=engine.max_model_len_tokens,
        enable_prefix_caching=engine.enable_prefix_caching,
        async_scheduling=scenario.async_scheduling,
        usage_context=scenario.engine.usage_context,
        vllm_version=scenario.engine.vllm_version,  # whose defaults and CPU estimate ran
    )
    return settings


def summary_header(scenario: Scenario, engine: CoreConfig, cost_model: str) -> dict[str, Any]:
    """summary.json's first keys, naming what ran: the scenario, its seed, the model,
    the hardware, the cost model, the policy, the KV blocks and ``engine_settings``;
    shared by a simulated run (``build_result``) and a measured one
    (``calibration.measure``)."""
    return {
        "scenario": scenario.name,
        "seed": scenario.seed,
        # What ran, as the scenario names it: servesim validate checks both.
        "model": scenario.model.name,
        "hardware": scenario.hardware.name,
        "cost_model": cost_model,
        "policy": scenario.scheduler.kind,
        "num_kv_blocks": engine.num_kv_blocks,
        "engine_settings": engine_settings(scenario, engine),
    }


def _policy_summary(requests: RequestTable) -> dict[str, Any]:
    """Swaps, and mean / p99 TTFT per priority class when there are several."""
    if "num_swaps" not in requests or "priority" not in requests:
        return {}
    out: dict[str, Any] = {"num_swaps": int(np.asarray(requests["num_swaps"]).sum())}
    priority = np.asarray(requests["priority"])
    # min == max first: np.unique imports numpy.ma (~30 ms, before the summary).
    if len(priority) and priority.min() != priority.max():
        classes = np.unique(priority)
        done = completed_mask(requests)
        ttft_ms = (floats(requests["first_token_s"]) - floats(requests["arrival_s"]))[done] * 1e3
        for value in classes.tolist():
            values = ttft_ms[priority[done] == value]
            out[f"mean_ttft_ms_priority_{value}"] = float(values.mean()) if len(values) else None
            out[f"p99_ttft_ms_priority_{value}"] = (
                float(np.percentile(values, 99)) if len(values) else None
            )
    return out


def bench_settings(
    workload: WorkloadConfig, num_requests: int, num_completed: int
) -> dict[str, Any]:
    """summary.json's traffic keys of ``vllm bench serve``'s result JSON; ``burstiness``
    is gamma's shape (1: Poisson, inf: constant gaps; None without an arrival process)."""
    arrival: ArrivalConfig | None = None
    rate: float | None = None
    if isinstance(workload, SyntheticWorkload):
        arrival = workload.arrival
    elif isinstance(workload, TraceWorkload):
        arrival, rate = workload.arrival, workload.rate_per_s
    burstiness: float | None = None
    if arrival is not None:
        rate = arrival.rate_per_s
        burstiness = 1.0
        if isinstance(arrival, GammaArrival):
            burstiness = arrival.burstiness
        elif isinstance(arrival, ConstantArrival):
            burstiness = math.inf
    return {
        "num_prompts": num_requests,
        "failed": num_requests - num_completed,
        "request_rate": rate,
        "burstiness": burstiness,
        # An open loop's client-side limit on requests in flight (None: none).
        "max_concurrency": None if workload.kind == "closed_loop" else workload.max_concurrency,
    }


def build_result(scenario: Scenario, engine: ReplicaConfig, raw: RawResult) -> Result:
    """A ``Result`` from a finished simulation: its summary (from the run's
    columns: no frame is built until asked for), once the run has kept every
    invariant (``sim.metrics.invariants``; a broken one raises ``InvariantError``)."""
    records, frontend = raw.records, engine.frontend
    check_run(records, raw.series, raw.num_sent, engine.core.num_kv_blocks)
    summary: dict[str, Any] = dict(
        summarize(records, raw.step_table, raw.extra_itl_s, scenario.slo)
    )
    notes = sample_notes(records)
    notes["caveats"] += cost_caveats(  # after the samples'
        scenario.cost, engine.cost, model_for(scenario), scenario.hardware, scenario.parallelism
    )
    summary.update(
        **summary_header(scenario, engine.core, engine.cost.label),
        num_preemptions=int(np.asarray(records["num_preemptions"]).sum()),
        **_policy_summary(records),
        **_layout_summary(scenario),
        **prefix_cache_summary(records),
        **ttft_parts_summary(records),
        # The way in and out as they ran, and which values are the default estimates.
        frontend={**frontend.model_dump(), "estimated": frontend.estimated_fields()},
        servesim_version=sim.__version__,
        mode="simulated",
        **notes,
        **bench_settings(scenario.workload, len(records), int(summary["completed"] or 0)),
    )
    if scenario.cluster is not None:
        summary.update(cluster_summary(records, scenario.cluster))
    if scenario.speculative is not None:
        summary.update(speculative_summary(scenario.speculative, records, raw.step_table))
    return Result(scenario, summary, raw)
