"""What one replica is made of, besides its workload: the executor's configuration.

``ReplicaConfig`` bundles the engine core's config (policy, KV pool, length
limit: ``CoreConfig``), the cost model, the frontend's CPU times and the
skip-ahead switch. Every replica of a run is built from one ``ReplicaConfig``;
``sim.api.engine_for`` builds it from a scenario. Features that wrap the cost
model and the policy together (speculative decoding) return a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, Field

from sim.cost.base import CostModel
from sim.engine.core_config import CoreConfig
from sim.engine.scheduler import Scheduler
from sim.engine.speculative import SpeculativeConfig, SpeculativeScheduler, speculative_cost
from sim.hardware.specs import HardwareSpec


class FrontendConfig(BaseModel):
    """CPU work around the engine (docs/vllm-fidelity.md, "The frontend").

    Tokenizing delays a request before it queues; the output server
    (``sim.serving.frontend``, vLLM's API server process) spends
    ``output_step_s + detokenize_s_per_token × n`` on a step with ``n`` outputs
    and streams them when done, merging a request's tokens into one chunk when
    it lags behind the engine.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # ~1 µs/token is a fast Rust BPE tokenizer on one core (HF tokenizers).
    tokenize_s_per_token: float = Field(default=1e-6, ge=0)
    # Estimates, not measurements (docs/vllm-fidelity.md): per request output
    # in a step (incremental detokenization, the response chunk), and per step
    # (receiving and decoding the engine's output message).
    detokenize_s_per_token: float = Field(default=2e-5, ge=0)
    output_step_s: float = Field(default=2e-4, ge=0)


# A frontend that costs nothing: engine times are client times.
NO_FRONTEND = FrontendConfig(tokenize_s_per_token=0, detokenize_s_per_token=0, output_step_s=0)


@dataclass(frozen=True)
class ReplicaConfig:
    """Everything a replica needs besides its workload: how its engine core is
    built, what a step costs, the frontend, and whether runs of identical decode
    steps are one event (``skip_ahead``; False: every step its own, the reference)."""

    core: CoreConfig
    cost: CostModel
    frontend: FrontendConfig = NO_FRONTEND
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
