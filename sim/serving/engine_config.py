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
from sim.cost.specs import HardwareSpec
from sim.engine.kv_pool import BlockPool
from sim.engine.policies.base import Scheduler
from sim.engine.prefix_cache import PrefixCachingPool
from sim.engine.speculative import SpeculativeConfig, SpeculativeScheduler, speculative_cost


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

    def new_block_pool(self) -> BlockPool:
        """An empty KV pool for one replica: vLLM v1's prefix-caching pool when
        enabled (a scenario's default), else the plain counting pool."""
        pool = PrefixCachingPool if self.enable_prefix_caching else BlockPool
        return pool(self.num_kv_blocks, self.block_size_tokens)


def with_speculation(engine: Engine, config: SpeculativeConfig, hardware: HardwareSpec) -> Engine:
    """``engine`` with its cost model and policies made speculative."""
    make_inner = engine.make_policy

    def make_policy() -> Scheduler:
        return SpeculativeScheduler(make_inner(), config)

    return replace(
        engine, cost=speculative_cost(config, engine.cost, hardware), make_policy=make_policy
    )
