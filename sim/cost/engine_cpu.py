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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sim.cost.base import CostModel, Durations, FloatArray, StepShape, no_decode_run

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

    ``step_s``, ``decode_steps_s`` and ``decode_durations_s`` do the same float
    operations in the same order, so skip-ahead runs equal step-by-step ones to
    the bit (``sim.fast.compiled.loop.step_s`` mirrors them too).
    """

    __slots__ = (
        "_async_scheduling",
        "_gpu_durations_s",
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
        # Optional: only some cost models price decode runs in bulk (sim.cost.base).
        self._gpu_durations_s: Durations | None = getattr(gpu, "decode_durations_s", None)

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

    def decode_steps_s(
        self,
        num_seqs: int,
        context_tokens: int,
        num_steps: int,
        *,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> FloatArray:
        if (zeros := no_decode_run(num_seqs, context_tokens, num_steps)) is not None:
            return zeros
        gpu = self.gpu.decode_steps_s(
            num_seqs,
            context_tokens,
            num_steps,
            max_context_tokens=max_context_tokens,
            min_context_tokens=min_context_tokens,
        )
        cpu = self._cpu_s(num_seqs, num_seqs)
        out: FloatArray
        if self._async_scheduling:
            out = self._non_overlapped_s + np.maximum(gpu, cpu)
        else:
            out = (self._non_overlapped_s + cpu) + gpu
        return out

    def decode_durations_s(
        self,
        num_seqs: int,
        context_tokens: int,
        num_steps: int,
        *,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> Iterator[float]:
        """``decode_steps_s``'s durations one at a time, each priced when taken
        (``sim.cost.base``: none past a run's cut), from the GPU model's own lazy
        durations when it has them."""
        if not (num_seqs > 0 and context_tokens >= 0 and num_steps >= 0):  # the usual run: no call
            no_decode_run(num_seqs, context_tokens, num_steps)  # raises on a negative argument
            return repeat(0.0)  # steps of no sequence take no time
        lazy = self._gpu_durations_s
        spread = {
            "max_context_tokens": max_context_tokens,
            "min_context_tokens": min_context_tokens,
        }
        gpu: Iterable[float] = (
            lazy(num_seqs, context_tokens, num_steps, **spread)
            if lazy is not None
            else self.gpu.decode_steps_s(num_seqs, context_tokens, num_steps, **spread).tolist()
        )
        return self._durations(gpu, self._cpu_s(num_seqs, num_seqs))

    def _durations(self, gpu_s: Iterable[float], cpu: float) -> Iterator[float]:
        serial_s = self._non_overlapped_s
        if self._async_scheduling:
            for gpu in gpu_s:  # step_s's operations, in its order
                yield serial_s + (gpu if gpu > cpu else cpu)
        else:
            fixed_s = serial_s + cpu
            for gpu in gpu_s:
                yield fixed_s + gpu

    def __repr__(self) -> str:
        return f"EngineCpuCost({self.label!r})"
