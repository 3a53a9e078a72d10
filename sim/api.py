"""The Python API: load or build a scenario, run it, get pandas objects back.

    >>> from sim import api
    >>> result = api.run("scenarios/chat.yaml")          # doctest: +SKIP
    >>> result.summary["p99_ttft_ms"], result.requests.head()  # doctest: +SKIP

The CLI is a thin layer over ``run`` and ``Result.write``.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import sim
from sim.cost.base import CostModel
from sim.cost.kv_capacity import SOURCE_ESTIMATE, SOURCE_SCENARIO, KvSizing, vllm_num_kv_blocks
from sim.cost.parallel_roofline import parallel_cost_model
from sim.cost.quantization import dtype_name, quantize
from sim.cost.specs import ModelSpec
from sim.engine.core_config import CoreConfig
from sim.engine.lifecycle import ActivityRecorder
from sim.engine.policies import Scheduler, StaticConfig
from sim.engine.policies.continuous import with_async_scheduling, with_swap_space
from sim.engine.prefix_cache import prefix_cache_summary
from sim.engine.speculative import speculative_summary
from sim.errors import ConfigError
from sim.metrics.lifecycle import reconstructed_spans, recorded_spans
from sim.metrics.report import write_outputs
from sim.metrics.stats import summarize, with_request_metrics
from sim.metrics.trace import trace_document, write_trace
from sim.metrics.waterfall import NUM_WATERFALL_REQUESTS
from sim.scenario import Scenario, load_scenario
from sim.serving.cluster import Cluster, cluster_summary, request_token_times_s
from sim.serving.engine_config import Engine, Frontend, with_speculation
from sim.serving.frontend import Delivery
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import ClosedLoopSource, ClosedLoopWorkload, generate_open_loop
from sim.workload.size import check_run_size

DEFAULT_TRACE_REQUESTS = 100  # requests in trace.json unless told: a few MB at most


@dataclass
class Result:
    """A finished run: per-request table, summary, time series and step log.

    ``activity`` is the per-step log of the first ``num_traced_requests``
    requests when the run was traced (``run(..., trace_requests=N)``), else None.
    """

    scenario: Scenario
    requests: pd.DataFrame
    summary: dict[str, Any]
    timeseries: pd.DataFrame
    steps: pd.DataFrame
    raw: RawResult
    activity: pd.DataFrame | None = None
    num_traced_requests: int | None = None

    def token_times_s(self, request_id: int) -> npt.NDArray[np.float64]:
        """Stream time of every output token of one request, in seconds."""
        if self.scenario.speculative is not None:
            raise NotImplementedError("token times assume one token per step (speculation is on)")
        row = self.raw.requests.loc[self.raw.requests["request_id"] == request_id]
        if row.empty:
            raise KeyError(f"no request {request_id}")
        first = float(row["engine_first_token_s"].iloc[0])
        count = int(row["num_generated_tokens"].iloc[0])
        if np.isnan(first):
            return np.empty(0)
        prefill = row["prefill_replica"].iloc[0] if "prefill_replica" in row else None
        replica = int(row["replica"].iloc[0])
        engine_s = request_token_times_s(
            self.steps,
            first,
            count,
            self.raw.later_runs.get(request_id),
            replica,
            None if prefill is None or pd.isna(prefill) else int(prefill),
        )
        return self._delivery.client_s(engine_s, np.full(engine_s.shape, replica))

    @functools.cached_property
    def _delivery(self) -> Delivery:
        """The step log's engine-to-client time map, built once per result."""
        return Delivery(self.steps)

    def spans(self, num_requests: int = NUM_WATERFALL_REQUESTS) -> pd.DataFrame:
        """Phase spans of the first ``num_requests`` requests (``sim.metrics.lifecycle``).

        Exact prefill chunks and preemption gaps when the run was traced (and
        ``num_requests`` is within what it traced), else rebuilt from the records.
        """
        raw = self.raw
        traced = self.num_traced_requests
        if self.activity is not None and traced is not None and num_requests <= traced:
            return recorded_spans(raw.requests, self.activity, num_requests)
        return reconstructed_spans(raw.requests, raw.steps, raw.later_runs, num_requests)

    def trace(self, num_requests: int | None = None) -> dict[str, Any]:
        """The run as a Chrome / Perfetto trace-event document (``sim.metrics.trace``).

        Defaults to the requests the run traced, else ``DEFAULT_TRACE_REQUESTS``.
        """
        count = num_requests or self.num_traced_requests or DEFAULT_TRACE_REQUESTS
        metadata = {"scenario": self.scenario.name, "num_traced_requests": count}
        return trace_document(
            self.spans(count), self.raw.requests, self.steps, self.timeseries, metadata
        )

    def write(
        self, out_dir: str | Path, write_steps: bool = False, trace: bool = False
    ) -> list[Path]:
        """Write tables, summary.json and plots into ``out_dir``; ``trace.json`` if ``trace``."""
        written = write_outputs(
            out_dir,
            self.requests,
            self.steps,
            self.timeseries,
            self.summary,
            write_steps=write_steps,
            slo=self.scenario.slo,
            waterfall=(self.spans(), self.raw.requests),
        )
        if trace:
            written.append(write_trace(Path(out_dir) / "trace.json", self.trace()))
        return written


def model_for(scenario: Scenario) -> ModelSpec:
    """The scenario's model spec with its ``quantization:`` dtypes applied."""
    return quantize(scenario.model, scenario.quantization)


def kv_blocks_for(scenario: Scenario) -> int:
    """The scenario's KV pool size in blocks: given (vLLM's log), or as vLLM's profile sizes it."""
    engine = scenario.engine
    if engine.num_kv_blocks is not None:
        return engine.num_kv_blocks
    policy = scenario.scheduler
    if isinstance(policy, StaticConfig):
        batched_tokens = min(policy.max_batch_size * engine.max_model_len_tokens, 1 << 16)
    else:
        batched_tokens = policy.step_token_bound(engine.max_model_len_tokens)
    # Requests the profile run spreads the tokens over (vLLM: max_num_seqs).
    seqs = next(
        getattr(policy, name)
        for name in ("num_seqs_limit", "max_num_seqs", "max_batch_size")
        if getattr(policy, name, None) is not None
    )
    try:
        return vllm_num_kv_blocks(
            model_for(scenario),
            scenario.hardware,
            scenario.parallelism,
            KvSizing(
                block_size_tokens=engine.block_size_tokens,
                gpu_memory_utilization=engine.gpu_memory_utilization,
                max_num_batched_tokens=batched_tokens,
                max_num_seqs=seqs,
                estimate_cudagraph_memory=engine.estimate_cudagraph_memory,
            ),
            max_model_len_tokens=engine.max_model_len_tokens,
        )
    except ConfigError as error:
        raise ConfigError(f"model, hardware: {error}") from None


def cost_model_for(scenario: Scenario, base_dir: Path | None = None) -> CostModel:
    """The cost model a scenario names."""
    return parallel_cost_model(
        scenario.cost, model_for(scenario), scenario.hardware, scenario.parallelism, base_dir
    )


def policy_factory(scenario: Scenario) -> Callable[[], Scheduler]:
    """Builds the scenario's policy; with ``preemption: swap``, each with its swap space;
    with async scheduling, each planning one step ahead.

    Swap bytes are per GPU: each holds 1/num_gpus of the KV cache and copies it
    over its own host link, in parallel with the others.
    """
    config = scenario.scheduler
    build: Callable[[], Scheduler] = config.build
    if getattr(config, "preemption", "recompute") == "swap":
        engine = scenario.engine
        bytes_per_token = model_for(scenario).kv_bytes_per_token / scenario.parallelism.num_gpus
        build = with_swap_space(
            build,
            engine.swap_space_bytes,
            engine.block_size_tokens * bytes_per_token,
            engine.swap_bandwidth_bytes_per_s,
        )
    if scenario.async_scheduling:
        build = with_async_scheduling(build)
    return build


def reference_engine_problem(scenario: Scenario) -> str | None:
    """Why the PyTorch reference engine (``servesim measure``) cannot run ``scenario``
    as the simulator would, as one line naming the scenario key and the value to set;
    ``None`` when it can."""
    if scenario.engine.enable_prefix_caching:
        # Its KV cache is one contiguous slot per request: no block is shared or reused.
        return (
            "engine.enable_prefix_caching: the reference engine reuses no cached KV block; "
            "set engine.enable_prefix_caching: false to measure"
        )
    if scenario.speculative is not None:
        return (
            "speculative: the reference engine has no draft model; "
            "remove the speculative section to measure"
        )
    if getattr(scenario.scheduler, "preemption", "recompute") == "swap":
        return (
            "scheduler.preemption: the reference engine preempts by recompute only; "
            "set scheduler.preemption: recompute to measure"
        )
    return None


def core_config_for(scenario: Scenario, *, reference_engine: bool = False) -> CoreConfig:
    """The engine core ``scenario`` runs: policy (swap space, async scheduling), KV pool
    (plain or prefix-caching, its size) and length limit.

    The one place both executors get them from: the simulator's replicas
    (``engine_for``) and the reference engine of ``servesim measure``
    (``reference_engine=True``, which raises a one-line ``ConfigError`` for what that
    engine cannot run, ``reference_engine_problem``).
    """
    if reference_engine:
        problem = reference_engine_problem(scenario)
        if problem is not None:
            raise ConfigError(problem)
    engine = scenario.engine
    return CoreConfig(
        make_policy=policy_factory(scenario),
        num_kv_blocks=kv_blocks_for(scenario),
        block_size_tokens=engine.block_size_tokens,
        max_model_len_tokens=engine.max_model_len_tokens,
        enable_prefix_caching=engine.enable_prefix_caching,
    )


def engine_for(scenario: Scenario, base_dir: Path | None = None) -> Engine:
    """Everything a replica needs, built from the scenario (its core: ``core_config_for``)."""
    frontend = scenario.frontend
    engine = Engine.from_core(
        core_config_for(scenario),
        cost_model_for(scenario, base_dir),
        Frontend(
            frontend.tokenize_s_per_token, frontend.detokenize_s_per_token, frontend.output_step_s
        ),
        skip_ahead=scenario.engine.skip_ahead,
    )
    if scenario.speculative is not None:
        engine = with_speculation(engine, scenario.speculative, scenario.hardware)
    return engine


def run(
    scenario: Scenario | str | Path,
    overrides: Sequence[str] = (),
    base_dir: str | Path | None = None,
    progress: bool = False,
    wrap_cost: Callable[[CostModel], CostModel] | None = None,
    trace_requests: int | None = None,
) -> Result:
    """Simulate a scenario (object or YAML path) and summarise it.

    ``trace_requests=N`` records what each of the first N requests did in each
    step (``Result.activity``, for ``Result.trace`` and ``trace.json``); it costs
    nothing once those N requests have finished.

    ``base_dir`` anchors relative paths in the scenario (trace files,
    artifacts); it defaults to the scenario file's folder, else the cwd.
    ``wrap_cost`` replaces the scenario's cost model by a function of it
    (what-if studies: every step 5 % slower, say).
    """
    source = "<scenario>"
    if not isinstance(scenario, Scenario):
        path = Path(scenario)
        scenario = load_scenario(path, overrides)
        source = str(path)
        base = Path(base_dir) if base_dir is not None else path.parent
    else:
        base = Path(base_dir) if base_dir is not None else Path.cwd()
    rng = np.random.default_rng(scenario.seed)
    try:
        engine = engine_for(scenario, base)
    except ConfigError as error:  # e.g. a bad artifact, or the model does not fit
        raise ConfigError(f"{source}: {error}") from None
    if wrap_cost is not None:
        engine = dataclasses.replace(engine, cost=wrap_cost(engine.cost))
    check_run_size(scenario.workload)  # before generating: a billion requests fill memory
    work: Any
    if isinstance(scenario.workload, ClosedLoopWorkload):
        work = ClosedLoopSource(scenario.workload, rng, base)
    else:
        work = generate_open_loop(scenario.workload, rng, base)
    simulation = Simulation(engine, cluster_for(scenario, rng))
    recorder = None
    if trace_requests is not None:
        recorder = ActivityRecorder(trace_requests)
        recorder.attach(simulation.cores)
    result = _result(scenario, engine, simulation.run(work, progress=progress))
    if recorder is not None:
        recorder.detach()
        result.activity, result.num_traced_requests = recorder.frame(), trace_requests
    return result


def replay(
    scenario: Scenario,
    work: OpenLoop,
    cost: CostModel | None = None,
    base_dir: Path | None = None,
) -> Result:
    """Simulate exactly the requests of ``work`` on one replica of the scenario's engine.

    ``cost`` replaces the scenario's cost model (validation compares several).
    """
    engine = engine_for(scenario, base_dir)
    if cost is not None:
        engine = dataclasses.replace(engine, cost=cost)
    return _result(scenario, engine, Simulation(engine).run(work))


def cluster_for(scenario: Scenario, rng: np.random.Generator) -> Cluster | None:
    """The scenario's replicas, or None for one replica (the plain path).

    Router draws come from a generator spawned from ``rng`` (the scenario seed's).
    """
    if scenario.cluster is None:
        return None
    return Cluster(scenario.cluster, rng.spawn(1)[0], model_for(scenario).kv_bytes_per_token)


def _layout_summary(scenario: Scenario) -> dict[str, Any]:
    """summary.json keys for the parallel layout and the storage dtypes."""
    layout, quant, model = scenario.parallelism, scenario.quantization, model_for(scenario)
    return {
        "tensor_parallel_size": layout.tensor_parallel_size,
        "pipeline_parallel_size": layout.pipeline_parallel_size,
        "num_gpus": layout.num_gpus,
        "link": layout.link.name if not layout.is_single_device else None,
        "weight_dtype": dtype_name(model.weight_dtype_bytes, quant.weights),
        "kv_cache_dtype": dtype_name(model.kv_dtype_bytes, quant.kv_cache),
        "weight_gb_per_gpu": model.weight_bytes / layout.num_gpus / 1e9,
    }


def engine_settings(scenario: Scenario, engine: Engine | CoreConfig) -> dict[str, Any]:
    """The engine settings that ran, defaults filled in (summary.json ``engine_settings``;
    a measured run records them too, from its ``CoreConfig``)."""
    policy = scenario.scheduler
    settings: dict[str, Any] = {"scheduler": policy.kind}
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_batch_size", "chunked_prefill"):
        value = getattr(policy, name, None)
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
    )
    return settings


def _policy_summary(requests: pd.DataFrame) -> dict[str, Any]:
    """Swaps, and mean / p99 TTFT per priority class when there are several."""
    if "num_swaps" not in requests or "priority" not in requests:
        return {}
    out: dict[str, Any] = {"num_swaps": int(requests["num_swaps"].sum())}
    classes = requests["priority"].unique()
    if len(classes) > 1:
        done = requests[requests["rejection_reason"].isna() & requests["finish_s"].notna()]
        ttft_ms = (done["first_token_s"] - done["arrival_s"]) * 1e3
        for priority in sorted(classes.tolist()):
            values = ttft_ms[done["priority"] == priority].to_numpy()
            out[f"mean_ttft_ms_priority_{priority}"] = float(values.mean()) if len(values) else None
            out[f"p99_ttft_ms_priority_{priority}"] = (
                float(np.percentile(values, 99)) if len(values) else None
            )
    return out


def _result(scenario: Scenario, engine: Engine, raw: RawResult) -> Result:
    summary: dict[str, Any] = dict(
        summarize(raw.requests, raw.steps, raw.extra_itl_s, scenario.slo)
    )
    summary.update(
        scenario=scenario.name,
        seed=scenario.seed,
        cost_model=engine.cost.label,
        policy=scenario.scheduler.kind,
        num_kv_blocks=engine.num_kv_blocks,
        engine_settings=engine_settings(scenario, engine),
        num_preemptions=int(raw.requests["num_preemptions"].sum()),
        **_policy_summary(raw.requests),
        **_layout_summary(scenario),
        **prefix_cache_summary(raw.requests),
        servesim_version=sim.__version__,
        mode="simulated",
    )
    if scenario.cluster is not None:
        summary.update(cluster_summary(raw.requests, scenario.cluster))
    if scenario.speculative is not None:
        summary.update(speculative_summary(scenario.speculative, raw.requests, raw.steps))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        requests = with_request_metrics(raw.requests)
    return Result(scenario, requests, summary, raw.timeseries, raw.steps, raw)
