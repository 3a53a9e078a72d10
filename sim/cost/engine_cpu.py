"""The engine's CPU work per step, and how it hides behind the GPU's or adds to it.

Besides the forward pass the GPU runs, every vLLM engine step costs the CPU
time: the scheduler's pass over the queues and the KV pool, the preparation of
the step's inputs (token ids, positions, block tables, slot mappings), the
sampling set-up, and the processing of the step's outputs. ``EngineCpuConfig``
prices it from a step's counts::

    cpu_s = per_step_s + per_seq_s * scheduled sequences + per_token_s * tokens   [s]

Under async scheduling (vLLM's ``--async-scheduling``, on by default from
0.14) the engine plans step N+1 and prepares its inputs while the GPU runs
step N, so the CPU work hides behind the GPU step unless it is the longer of
the two; what cannot overlap (``non_overlapped_s``: the wait for the step's
sampled tokens and the update that the next launch needs) is paid in full::

    async:  step_s = non_overlapped_s + max(gpu_s, cpu_s)                       [s]
    sync:   step_s = non_overlapped_s + cpu_s + gpu_s                           [s]

``EngineCpuCost`` is that rule around a cost model that prices GPU work only
(the roofline, kernel tables); ``sim.cost.config.build_cost_model`` is the one
place that wraps one. Cost models that time whole steps (calibrated artifacts
from the reference engine, fitted models, linear coefficients) already hold the
engine's CPU work and are not wrapped. The coefficients of each vLLM version
are estimates from public sources (``sim.scenario.vllm_versions``,
docs/vllm-fidelity.md); a scenario may set its own (``engine.cpu``), and the
config is a plain value a fit can write to and read from an artifact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from sim.cost.base import CostModel, StepShape

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class EngineCpuConfig(BaseModel):
    """Coefficients of the engine's CPU work per step, all in seconds, all >= 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_step_s: Seconds = Field(
        description="CPU time of every step, whatever its size (scheduler pass, launch set-up)"
    )
    per_seq_s: Seconds = Field(
        description="CPU time per scheduled sequence (its queue entry, block table, sampling row)"
    )
    per_token_s: Seconds = Field(
        description="CPU time per token computed in the step (input ids, positions, slot mapping)"
    )
    non_overlapped_s: Seconds = Field(
        description=(
            "CPU time no mode hides: waiting for the step's sampled tokens and applying them"
        )
    )

    def cpu_s(self, num_seqs: int, num_tokens: int) -> float:
        """The overlappable CPU time of a step of ``num_seqs`` sequences and ``num_tokens``
        tokens, in seconds (``EngineCpuCost`` computes it with the same operations)."""
        return self.per_step_s + self.per_seq_s * num_seqs + self.per_token_s * num_tokens


@dataclass(frozen=True)
class EngineCpu:
    """The CPU work a run's engine does per step, and whether it overlaps the GPU.

    ``source`` says where the coefficients come from, for the cost model's label
    (e.g. ``estimate, vLLM 0.19``); ``given`` is True when the scenario set them
    (``engine.cpu``), so that a cost model that cannot take them refuses instead of
    dropping them.
    """

    config: EngineCpuConfig
    async_scheduling: bool  # the CPU work overlaps the GPU step (vLLM's async scheduling)
    source: str
    given: bool = False


class EngineCpuCost:
    """A GPU-only cost model plus the engine's CPU work (the module's rule).

    ``sim.fast.compiled.loop.step_s`` mirrors ``step_s``'s float operations in
    their order, so a compiled run equals the Python path's to the bit.
    """

    __slots__ = (
        "_async_scheduling",
        "_gpu_step_s",
        "_non_overlapped_s",
        "_per_seq_s",
        "_per_step_s",
        "_per_token_s",
        "cpu",
        "gpu",
    )

    def __init__(self, gpu: CostModel, cpu: EngineCpu) -> None:
        self.gpu = gpu
        self.cpu = cpu
        config = cpu.config
        self._per_step_s = config.per_step_s
        self._per_seq_s = config.per_seq_s
        self._per_token_s = config.per_token_s
        self._non_overlapped_s = config.non_overlapped_s
        self._async_scheduling = cpu.async_scheduling
        # Looked up once: step_s runs millions of times a run.
        self._gpu_step_s = gpu.step_s

    @property
    def async_scheduling(self) -> bool:
        return self.cpu.async_scheduling

    @property
    def label(self) -> str:
        mode = "overlapped" if self.cpu.async_scheduling else "serial"
        return f"{self.gpu.label} + engine CPU ({self.cpu.source}; {mode})"

    def _cpu_s(self, num_seqs: int, num_tokens: int) -> float:
        return self._per_step_s + self._per_seq_s * num_seqs + self._per_token_s * num_tokens

    def step_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        gpu = self._gpu_step_s(shape)
        # _cpu_s inlined (the same operations): a call costs more than the sum.
        cpu = (
            self._per_step_s
            + self._per_seq_s * (shape.num_prefill_seqs + shape.num_decode_seqs)
            + self._per_token_s * tokens
        )
        if self._async_scheduling:
            # A conditional expression, not max(): the compiled loop's operations.
            return self._non_overlapped_s + (gpu if gpu > cpu else cpu)
        return self._non_overlapped_s + cpu + gpu

    def __repr__(self) -> str:
        return f"EngineCpuCost({self.label!r})"
