"""What one replica is made of, besides its workload: the executor's configuration.

``Engine`` bundles the cost model, the policy factory, the KV pool's size and
the frontend's CPU times. Every replica of a run is built from one ``Engine``;
``sim.api.engine_for`` builds it from a scenario. Features that wrap the cost
model and the policy together (speculative decoding) return a new ``Engine``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sim.cost.base import CostModel
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import BlockPool
from sim.engine.scheduler import Scheduler
from sim.engine.speculative import SpeculativeConfig, SpeculativeScheduler, speculative_cost
from sim.hardware.specs import HardwareSpec


@dataclass(frozen=True)
class Frontend:
    """CPU time around the engine: tokenizing prompts (before the queue), and
    the output server (``sim.serving.frontend``): each step with output costs
    it ``output_step_s + detokenize_s_per_token * (requests with output)``."""

    tokenize_s_per_token: float = 0.0
    detokenize_s_per_token: float = 0.0
    output_step_s: float = 0.0


@dataclass(frozen=True)
class Engine:
    """Everything a replica needs besides its workload."""

    cost: CostModel
    make_policy: Callable[[], Scheduler]
    num_kv_blocks: int
    block_size_tokens: int
    max_model_len_tokens: int
    frontend: Frontend = field(default_factory=Frontend)
    skip_ahead: bool = True
    enable_prefix_caching: bool = False

    @classmethod
    def from_core(
        cls,
        core: CoreConfig,
        cost: CostModel,
        frontend: Frontend | None = None,
        skip_ahead: bool = True,
    ) -> Engine:
        """An engine whose replicas' cores are built as ``core`` says."""
        return cls(
            cost=cost,
            make_policy=core.make_policy,
            num_kv_blocks=core.num_kv_blocks,
            block_size_tokens=core.block_size_tokens,
            max_model_len_tokens=core.max_model_len_tokens,
            frontend=frontend or Frontend(),
            skip_ahead=skip_ahead,
            enable_prefix_caching=core.enable_prefix_caching,
        )

    @property
    def core_config(self) -> CoreConfig:
        """What each replica's engine core is built from (policy, KV pool, limit)."""
        return CoreConfig(
            self.make_policy,
            self.num_kv_blocks,
            self.block_size_tokens,
            self.max_model_len_tokens,
            self.enable_prefix_caching,
        )

    def new_block_pool(self) -> BlockPool:
        """An empty KV pool for one replica (``CoreConfig.new_block_pool``)."""
        return self.core_config.new_block_pool()


def with_speculation(engine: Engine, config: SpeculativeConfig, hardware: HardwareSpec) -> Engine:
    """``engine`` with its cost model and policies made speculative."""
    make_inner = engine.make_policy

    def make_policy() -> Scheduler:
        return SpeculativeScheduler(make_inner(), config)

    return replace(
        engine, cost=speculative_cost(config, engine.cost, hardware), make_policy=make_policy
    )
