"""The Python API: load or build a scenario, run it, get pandas objects back.

    >>> from sim import api
    >>> result = api.run("scenarios/chat.yaml")          # doctest: +SKIP
    >>> result.summary["p99_ttft_ms"], result.requests.head()  # doctest: +SKIP

The CLI is a thin layer over ``run`` and ``Result.write``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import sim
from sim.cost.base import CostModel
from sim.cost.config import build_cost_model
from sim.cost.memory import num_kv_blocks
from sim.errors import ConfigError
from sim.metrics import summarize, with_request_metrics
from sim.policies import ContinuousConfig
from sim.report import write_outputs
from sim.scenario import Scenario, load_scenario
from sim.simulation import Engine, Frontend, RawResult, Simulation
from sim.tokens import token_times_s
from sim.workload import ClosedLoopSource, ClosedLoopWorkload, generate_open_loop


@dataclass
class Result:
    """A finished run: per-request table, summary, time series and step log."""

    scenario: Scenario
    requests: pd.DataFrame
    summary: dict[str, Any]
    timeseries: pd.DataFrame
    steps: pd.DataFrame
    raw: RawResult

    def token_times_s(self, request_id: int) -> npt.NDArray[np.float64]:
        """Stream time of every output token of one request, in seconds."""
        row = self.raw.requests.loc[self.raw.requests["request_id"] == request_id]
        if row.empty:
            raise KeyError(f"no request {request_id}")
        first = float(row["first_token_s"].iloc[0])
        count = int(row["num_generated_tokens"].iloc[0])
        if np.isnan(first):
            return np.empty(0)
        detokenize_s = self.raw.detokenize_s_per_token
        return token_times_s(
            self.steps["end_s"].to_numpy(),
            first - detokenize_s,
            count,
            self.raw.later_runs.get(request_id),
            detokenize_s,
        )

    def write(self, out_dir: str | Path, write_steps: bool = False) -> list[Path]:
        """Write tables, summary.json and plots into ``out_dir``."""
        return write_outputs(
            out_dir,
            self.requests,
            self.steps,
            self.timeseries,
            self.summary,
            write_steps=write_steps,
            slo=self.scenario.slo,
        )


def kv_blocks_for(scenario: Scenario) -> int:
    """The scenario's KV pool size in blocks: given, or from device memory."""
    engine = scenario.engine
    if engine.num_kv_blocks is not None:
        return engine.num_kv_blocks
    policy = scenario.scheduler
    if isinstance(policy, ContinuousConfig):
        batched_tokens = policy.max_num_batched_tokens
    else:
        batched_tokens = min(policy.max_batch_size * engine.max_model_len_tokens, 1 << 16)
    try:
        return num_kv_blocks(
            scenario.model,
            scenario.hardware,
            engine.block_size_tokens,
            engine.gpu_memory_utilization,
            max_num_batched_tokens=batched_tokens,
        )
    except ConfigError as error:
        raise ConfigError(f"model, hardware: {error}") from None


def cost_model_for(scenario: Scenario, base_dir: Path | None = None) -> CostModel:
    """The cost model a scenario names."""
    return build_cost_model(scenario.cost, scenario.model, scenario.hardware, base_dir)


def engine_for(scenario: Scenario, base_dir: Path | None = None) -> Engine:
    """Everything a replica needs, built from the scenario."""
    return Engine(
        cost=cost_model_for(scenario, base_dir),
        make_policy=scenario.scheduler.build,
        num_kv_blocks=kv_blocks_for(scenario),
        block_size_tokens=scenario.engine.block_size_tokens,
        max_model_len_tokens=scenario.engine.max_model_len_tokens,
        frontend=Frontend(
            scenario.frontend.tokenize_s_per_token, scenario.frontend.detokenize_s_per_token
        ),
        skip_ahead=scenario.engine.skip_ahead,
    )


def run(
    scenario: Scenario | str | Path,
    overrides: Sequence[str] = (),
    base_dir: str | Path | None = None,
    progress: bool = False,
) -> Result:
    """Simulate a scenario (object or YAML path) and summarise it.

    ``base_dir`` anchors relative paths in the scenario (trace files,
    artifacts); it defaults to the scenario file's folder, else the cwd.
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
    work: Any
    if isinstance(scenario.workload, ClosedLoopWorkload):
        work = ClosedLoopSource(scenario.workload, rng, base)
    else:
        work = generate_open_loop(scenario.workload, rng, base)
    raw = Simulation(engine).run(work, progress=progress)
    return _result(scenario, engine, raw)


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
        num_preemptions=int(raw.requests["num_preemptions"].sum()),
        servesim_version=sim.__version__,
        mode="simulated",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        requests = with_request_metrics(raw.requests)
    return Result(scenario, requests, summary, raw.timeseries, raw.steps, raw)
