"""Building a scenario's engine: model, KV pool size, cost model, policy and replicas.

The simulator's replicas and ``servesim measure``'s reference engine both take their
engine core from ``core_config_for``; the run's executor is chosen here
(``simulation_for``) and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.cost.base import CostModel
from sim.cost.config import build_cost_model
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import SwapSpace
from sim.engine.policies import Scheduler
from sim.engine.scheduler import ContinuousSettings
from sim.errors import ConfigError
from sim.fast.open_loop import FastSimulation
from sim.hardware.kv_capacity import KvSizing, vllm_num_kv_blocks
from sim.hardware.quantization import QuantizationConfig, quantize
from sim.hardware.specs import ModelSpec
from sim.scenario import Scenario
from sim.serving.cluster import Cluster
from sim.serving.replica_config import ReplicaConfig, with_speculation
from sim.serving.simulation import Simulation


def model_for(scenario: Scenario) -> ModelSpec:
    """The scenario's model spec with its ``quantization:`` dtypes applied."""
    return quantize(scenario.model, scenario.quantization)


def draft_model_for(scenario: Scenario) -> ModelSpec | None:
    """The speculative draft model whose weights and KV share the GPUs, or None (a
    ``draft_cost_fraction`` names none); its KV in the engine's one KV dtype (vLLM's
    ``kv_cache_dtype`` covers every attention layer), its weights in their own."""
    speculative = scenario.speculative
    if speculative is None or speculative.draft_model is None:
        return None
    kv_cache = scenario.quantization.kv_cache
    return quantize(speculative.draft_model, QuantizationConfig(kv_cache=kv_cache))


def kv_blocks_for(scenario: Scenario) -> int:
    """The scenario's KV pool size in blocks: given (vLLM's log), or as vLLM's profile
    sizes it; either checked as vLLM checks it at start (``sim.hardware.kv_capacity``)."""
    engine = scenario.engine
    # Requests the profile run spreads the tokens over (vLLM: max_num_seqs).
    max_num_seqs, max_num_batched_tokens = step_limits(scenario)
    try:
        return vllm_num_kv_blocks(
            model_for(scenario),
            scenario.hardware,
            scenario.parallelism,
            KvSizing(
                block_size_tokens=engine.block_size_tokens,
                gpu_memory_utilization=engine.gpu_memory_utilization,
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_seqs=max_num_seqs,
                estimate_cudagraph_memory=engine.estimate_cudagraph_memory,
            ),
            max_model_len_tokens=engine.max_model_len_tokens,
            draft=draft_model_for(scenario),
            num_kv_blocks_given=engine.num_kv_blocks,
        )
    except ConfigError as error:
        raise ConfigError(f"model, hardware: {error}") from None


def step_limits(scenario: Scenario) -> tuple[int, int]:
    """(most sequences, most tokens) one step of the scenario's policy holds: its
    ``max_num_seqs`` (static and dynamic batching: ``max_batch_size``) and its
    ``step_token_bound`` (continuous batching: ``max_num_batched_tokens``)."""
    policy = scenario.scheduler
    return policy.step_seq_bound(), policy.step_token_bound(scenario.engine.max_model_len_tokens)


def cost_model_for(scenario: Scenario, *, engine_cpu: bool = True) -> CostModel:
    """The cost model a scenario names (its files from ``scenario.base_dir``), with its
    engine's CPU work where the model prices GPU work only (``sim.cost.config``);
    ``engine_cpu=False``: without it (the base a fit adjusts, whose fitted overhead
    stands for that work)."""
    return build_cost_model(
        scenario.cost,
        model_for(scenario),
        scenario.hardware,
        scenario.base_dir,
        scenario.parallelism,
        scenario.engine_cpu if engine_cpu else None,
    )


def policy_factory(scenario: Scenario) -> Callable[[], Scheduler]:
    """Builds the scenario's policy, each with its swap space (``preemption: swap``;
    per GPU, as each copies its 1/num_gpus of the KV over its own host link) and async
    scheduling."""
    config = scenario.scheduler
    if not isinstance(config, ContinuousSettings):
        return config.build  # the other policies have neither feature
    swap_space: tuple[float, float, float] | None = None
    if config.preemption == "swap":
        engine = scenario.engine
        bytes_per_token = model_for(scenario).kv_bytes_per_token / scenario.parallelism.num_gpus
        swap_space = (
            engine.swap_space_bytes,
            engine.block_size_tokens * bytes_per_token,
            engine.swap_bandwidth_bytes_per_s,
        )
    async_scheduling = scenario.async_scheduling

    def build() -> Scheduler:
        swap = None if swap_space is None else SwapSpace(*swap_space)  # one per replica
        return config.build(swap, async_scheduling)

    return build


def reference_engine_problem(scenario: Scenario) -> str | None:
    """Why the PyTorch reference engine (``servesim measure``) cannot run ``scenario``
    as the simulator would, as one line naming the scenario key and the value to set;
    ``None`` when it can."""
    if scenario.cluster is not None:
        return (
            "cluster: the reference engine runs one replica (one model in this process); "
            "remove the cluster section (a cluster: servesim serve --simulate, or measure "
            "its servers with --endpoint)"
        )
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
    policy = scenario.scheduler
    if isinstance(policy, ContinuousSettings) and policy.preemption == "swap":
        return (
            "scheduler.preemption: the reference engine preempts by recompute only; "
            "set scheduler.preemption: recompute to measure"
        )
    return None


def core_config_for(scenario: Scenario, *, reference_engine: bool = False) -> CoreConfig:
    """The engine core ``scenario`` runs: policy, KV pool and length limit
    (``reference_engine=True``: a ``ConfigError`` for what ``servesim measure``'s
    reference engine cannot run, ``reference_engine_problem``)."""
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
        free_unhashed_first=engine.version.free_unhashed_first,
    )


def engine_for(scenario: Scenario, rng: np.random.Generator | None = None) -> ReplicaConfig:
    """Everything a replica needs, built from the scenario (its core: ``core_config_for``);
    speculative proposers draw from generators spawned from ``rng`` (given: the run's;
    otherwise the scenario seed's)."""
    engine = ReplicaConfig(
        core_config_for(scenario),
        cost_model_for(scenario),
        scenario.frontend,
        skip_ahead=scenario.engine.skip_ahead,
    )
    if scenario.speculative is not None:
        engine = with_speculation(
            engine,
            scenario.speculative,
            scenario.hardware,
            model_for(scenario),
            np.random.default_rng(scenario.seed) if rng is None else rng,
        )
    return engine


def cluster_for(scenario: Scenario, rng: np.random.Generator) -> Cluster | None:
    """The scenario's replicas, or None for one replica (the plain path); router draws
    come from a generator spawned from ``rng`` (the scenario seed's)."""
    if scenario.cluster is None:
        return None
    return Cluster(scenario.cluster, rng.spawn(1)[0], model_for(scenario).kv_bytes_per_token)


def simulation_for(
    engine: ReplicaConfig,
    cluster: Cluster | None = None,
    *,
    fast: bool = True,
    workers: int | None = None,
    compiled: bool | None = None,
    progress: bool = False,
) -> Simulation:
    """The executor of one run: the fast one (``sim.fast.open_loop.FastSimulation``), or
    the reference (``Simulation``) when ``fast`` is False or the engine runs step by step
    (``engine.skip_ahead: false``); both give the same result to the bit."""
    if fast and engine.skip_ahead:
        return FastSimulation(engine, cluster, workers, compiled, progress)
    return Simulation(engine, cluster, progress)
