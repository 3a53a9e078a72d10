"""What one replica is made of, besides its workload: the executor's configuration.

``ReplicaConfig`` bundles the engine core's config (policy, KV pool, length
limit: ``CoreConfig``), the cost model, the frontend's CPU times and the
skip-ahead switch. Every replica of a run is built from one ``ReplicaConfig``;
``sim.api.engine_for`` builds it from a scenario. Features that wrap the cost
model and the policy together (speculative decoding) return a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sim.cost.base import CostModel
from sim.engine.core_config import CoreConfig
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
class ReplicaConfig:
    """Everything a replica needs besides its workload: how its engine core is
    built, what a step costs, the frontend, and whether runs of identical decode
    steps are one event (``skip_ahead``; False: every step its own, the reference)."""

    core: CoreConfig
    cost: CostModel
    frontend: Frontend = field(default_factory=Frontend)
    skip_ahead: bool = True


def with_speculation(
    config: ReplicaConfig, speculative: SpeculativeConfig, hardware: HardwareSpec
) -> ReplicaConfig:
    """``config`` with its cost model and policies made speculative."""
    make_inner = config.core.make_policy

    def make_policy() -> Scheduler:
        return SpeculativeScheduler(make_inner(), speculative)

    return replace(
        config,
        cost=speculative_cost(speculative, config.cost, hardware),
        core=replace(config.core, make_policy=make_policy),
    )
