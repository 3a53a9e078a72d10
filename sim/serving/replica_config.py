"""What one replica is made of, besides its workload (``ReplicaConfig``: its
``CoreConfig``, cost model, frontend and skip-ahead switch, built from a scenario
by ``sim.api.engine_for``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from pydantic import Field

from sim.config import Frozen
from sim.cost.base import CostModel
from sim.engine.core_config import CoreConfig
from sim.engine.scheduler import Scheduler
from sim.engine.speculative import SpeculativeConfig, SpeculativeScheduler, speculative_cost
from sim.hardware.specs import HardwareSpec, ModelSpec


class FrontendConfig(Frozen):
    """The server around the engine (docs/vllm-fidelity.md, "The frontend"): the way
    in, ``way_in_s_per_request + tokenize_s_per_token × prompt tokens`` before a
    request queues at the engine; the way out (``sim.serving.frontend``),
    ``output_step_s + detokenize_s_per_token × n`` per step with ``n`` outputs.

    Every default is an ESTIMATE from public sources (a run's summary lists the
    fields left at them under ``frontend.estimated``).
    """

    # ~10 ms: HTTP parsing and the request's validation and setup in the API
    # server (chat template, sampling parameters, the output collector), then
    # msgpack over ZMQ to the engine core's input thread and its busy loop.
    way_in_s_per_request: float = Field(default=1e-2, ge=0, allow_inf_nan=False)
    # ~1 µs/token is a fast Rust BPE tokenizer on one core (HF tokenizers).
    tokenize_s_per_token: float = Field(default=1e-6, ge=0, allow_inf_nan=False)
    # Per request output in a step (incremental detokenization, the response
    # chunk), and per step (receiving and decoding the engine's output message).
    detokenize_s_per_token: float = Field(default=2e-5, ge=0, allow_inf_nan=False)
    output_step_s: float = Field(default=2e-4, ge=0, allow_inf_nan=False)

    def way_in_s(self, num_prompt_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Each request's way in (s)."""
        per_token = np.asarray(self.tokenize_s_per_token * num_prompt_tokens, dtype=np.float64)
        return self.way_in_s_per_request + per_token

    def way_in_one_s(self, num_prompt_tokens: int) -> float:
        """``way_in_s`` of one request (the same float operations)."""
        return self.way_in_s_per_request + self.tokenize_s_per_token * num_prompt_tokens

    def estimated_fields(self) -> list[str]:
        """The fields left at their default estimates (not set by the scenario)."""
        return [name for name in type(self).model_fields if name not in self.model_fields_set]


# A frontend that costs nothing: engine times are client times.
NO_FRONTEND = FrontendConfig(
    way_in_s_per_request=0, tokenize_s_per_token=0, detokenize_s_per_token=0, output_step_s=0
)


@dataclass(frozen=True)
class ReplicaConfig:
    """Everything a replica needs besides its workload (``skip_ahead``: whether runs
    of identical decode steps may be one event; False: the reference)."""

    core: CoreConfig
    cost: CostModel
    frontend: FrontendConfig = NO_FRONTEND
    skip_ahead: bool = True


def with_speculation(
    config: ReplicaConfig,
    speculative: SpeculativeConfig,
    hardware: HardwareSpec,
    model: ModelSpec,
    rng: np.random.Generator,
) -> ReplicaConfig:
    """``config`` with its cost model and policies made speculative (each policy's
    proposer draws from a generator spawned from ``rng``)."""
    make_inner = config.core.make_policy

    def make_policy() -> Scheduler:
        return SpeculativeScheduler(make_inner(), speculative, rng.spawn(1)[0])

    return replace(
        config,
        cost=speculative_cost(speculative, config.cost, model, hardware),
        core=replace(config.core, make_policy=make_policy),
    )
