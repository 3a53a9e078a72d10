"""The Python API: load or build a scenario, run it, get pandas objects back.

    >>> from sim import api
    >>> result = api.run("scenarios/chat.yaml")          # doctest: +SKIP
    >>> result.summary["p99_ttft_ms"], result.requests.head()  # doctest: +SKIP

The CLI is a thin layer over ``run`` and ``Result.write``. ``__all__`` lists the
public names, those of ``sim.api.build`` (the engine) and ``sim.api.result`` included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sim.api.build import (
    cluster_for,
    core_config_for,
    cost_model_for,
    engine_for,
    kv_blocks_for,
    model_for,
    policy_factory,
    reference_engine_problem,
    simulation_for,
)
from sim.api.result import (
    DEFAULT_TRACE_REQUESTS,
    Result,
    build_result,
    engine_settings,
    summary_header,
)
from sim.cost.base import CostModel
from sim.engine.lifecycle import ActivityRecorder
from sim.errors import ConfigError
from sim.scenario import Overrides, Scenario, load_scenario, overridden
from sim.serving.simulation import ClosedLoop, OpenLoop
from sim.workload.generate import ClosedLoopSource, ClosedLoopWorkload, generate_open_loop
from sim.workload.size import check_run_size

__all__ = [
    "DEFAULT_TRACE_REQUESTS",
    "Overrides",
    "Result",
    "build_result",
    "cluster_for",
    "core_config_for",
    "cost_model_for",
    "engine_for",
    "engine_settings",
    "kv_blocks_for",
    "model_for",
    "policy_factory",
    "reference_engine_problem",
    "replay",
    "run",
    "simulation_for",
    "summary_header",
]


def run(
    scenario: Scenario | str | Path,
    overrides: Overrides = (),
    base_dir: str | Path | None = None,
    progress: bool = False,
    wrap_cost: Callable[[CostModel], CostModel] | None = None,
    trace_requests: int | None = None,
    *,
    source: str = "<scenario>",
    workers: int | None = None,
    compiled: bool | None = None,
    fast: bool = True,
) -> Result:
    """Simulate a scenario (object or YAML path) and summarise it.

    ``overrides`` change the scenario before it is validated (``sim.scenario.overrides``:
    ``--set`` strings or a mapping); a scenario object is validated again with them.
    ``trace_requests=N`` records each step of the first N requests (``Result.activity``,
    for ``trace.json``). ``base_dir`` anchors all the scenario's relative paths (default:
    its file's folder; a scenario object's ``base_dir``, where it was read). ``wrap_cost``
    replaces the cost model by a function of it (what-if studies). ``source`` names a
    scenario object in errors.
    ``workers`` (``sim.fast.workers``), ``compiled`` (``sim.fast.compiled``; None: from
    20,000 requests, where numba's ~0.4 s start-up pays) and ``fast`` (False: the
    reference executor) choose how it runs, never what it gives (``simulation_for``).
    """
    base = None if base_dir is None else Path(base_dir)
    if not isinstance(scenario, Scenario):
        path = Path(scenario)
        scenario = load_scenario(path, overrides, base_dir=base)
        source = str(path)
    else:  # validated again where base_dir moves its paths, or overrides change it
        scenario = overridden(scenario, overrides, source, base or scenario.base_dir)
    rng = np.random.default_rng(scenario.seed)
    try:
        engine = engine_for(scenario, rng)
    except ConfigError as error:  # e.g. a bad artifact, or the model does not fit
        raise ConfigError(f"{source}: {error}") from None
    if wrap_cost is not None:
        engine = dataclasses.replace(engine, cost=wrap_cost(engine.cost))
    # Before generating or building: a billion requests, or 10,000 replicas, fill memory.
    check_run_size(
        scenario.workload,
        num_replicas=1 if scenario.cluster is None else scenario.cluster.total_replicas,
        num_kv_blocks=engine.core.num_kv_blocks,
        prefix_caching=engine.core.enable_prefix_caching,
    )
    work: Any
    if isinstance(scenario.workload, ClosedLoopWorkload):
        work = ClosedLoopSource(scenario.workload, rng, scenario.base_dir)
    else:
        work = generate_open_loop(scenario.workload, rng, scenario.base_dir)
    cluster = cluster_for(scenario, rng)
    simulation = simulation_for(
        engine, cluster, fast=fast, workers=workers, compiled=compiled, progress=progress
    )
    recorder = None
    if trace_requests is not None:
        recorder = ActivityRecorder(trace_requests)
        recorder.attach(simulation.cores)
    result = build_result(scenario, engine, simulation.run(work, progress=progress))
    result.prefix_hash_ids = work.hash_ids()  # (a closed loop's: as its users drew them)
    if recorder is not None:
        recorder.detach()
        result.activity, result.num_traced_requests = recorder.frame(), trace_requests
    return result


def replay(
    scenario: Scenario,
    work: OpenLoop | ClosedLoop,
    cost: CostModel | None = None,
    fast: bool = True,
) -> Result:
    """Simulate exactly the requests of ``work`` on the scenario's engine and cluster,
    built as ``run`` builds them; ``cost`` replaces the scenario's cost model (validation
    compares several); ``fast=False``: the reference executor."""
    rng = np.random.default_rng(scenario.seed)
    engine = engine_for(scenario, rng)
    if cost is not None:
        engine = dataclasses.replace(engine, cost=cost)
    simulation = simulation_for(engine, cluster_for(scenario, rng), fast=fast)
    return build_result(scenario, engine, simulation.run(work))
