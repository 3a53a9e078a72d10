"""The engine's CPU work per step, and how it hides behind the GPU's or adds to it.

A step of ``S`` scheduled sequences and ``T`` tokens costs::

    cpu_s = per_step_s + per_seq_s * S + per_token_s * T                         [s]
    per_seq_s = scheduler_per_seq_s + sampling_per_seq_s                          [s]
    async:  step_s = non_overlapped_s + max(gpu_s, cpu_s)                       [s]
    sync:   step_s = non_overlapped_s + cpu_s + gpu_s                           [s]

``EngineCpuCost`` is that rule around a cost model that prices GPU work only;
``sim.cost.config.build_cost_model`` is the one place that wraps one. What each
term is, which models are not wrapped and each default's source:
docs/vllm-fidelity.md, "The engine's CPU work".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, model_validator

from sim.config import Frozen
from sim.cost.base import CostModel, StepShape

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]

# The coefficients' slots in a price array: ``EngineCpuCost``'s list, and the compiled
# loop's ``cost`` array (``sim.cost.tabulate``: after a roofline's five constants).
CPU_PER_STEP_S, CPU_PER_SEQ_S, CPU_PER_TOKEN_S = 5, 6, 7
CPU_NON_OVERLAPPED_S, CPU_ASYNC_SCHEDULING = 8, 9
NUM_COSTS = 10


def with_cpu_s(cost: Any, gpu_s: float, num_seqs: int, num_tokens: int) -> float:
    """A step of ``gpu_s`` seconds on the GPU, ``num_seqs`` sequences and ``num_tokens``
    tokens, with the engine's CPU work (the module's rule; all CPU slots 0 and
    CPU_ASYNC_SCHEDULING 1 leave ``gpu_s`` unchanged to the bit: 0 + max(gpu, 0)).
    Written once: ``EngineCpuCost`` calls it on a list, the compiled loop compiles it
    with numba and calls it on its ``cost`` array, so the two agree to the bit."""
    cpu_s = (
        cost[CPU_PER_STEP_S] + cost[CPU_PER_SEQ_S] * num_seqs + cost[CPU_PER_TOKEN_S] * num_tokens
    )
    if cost[CPU_ASYNC_SCHEDULING] != 0.0:
        # A conditional expression, not max(): numba compiles it as written.
        return cost[CPU_NON_OVERLAPPED_S] + (gpu_s if gpu_s > cpu_s else cpu_s)
    return cost[CPU_NON_OVERLAPPED_S] + cpu_s + gpu_s


class EngineCpuConfig(Frozen):
    """Coefficients of the engine's CPU work per step, all in seconds, all >= 0."""

    per_step_s: Seconds = Field(
        description="CPU time of every step, whatever its size (scheduler pass, launch set-up)"
    )
    scheduler_per_seq_s: Seconds = Field(
        description=("vLLM's scheduler (schedule() + update_from_output()) per running sequence")
    )
    sampling_per_seq_s: Seconds = Field(
        description=(
            "the rest of a scheduled sequence's engine-core work: sampling set-up, its block"
            " table row, output processing (detokenization is the frontend's)"
        )
    )
    per_token_s: Seconds = Field(
        description="input preparation per token computed (input ids, positions, slot mapping)"
    )
    non_overlapped_s: Seconds = Field(
        description=(
            "CPU time no mode hides: waiting for the step's sampled tokens and applying them"
        )
    )

    @model_validator(mode="before")
    @classmethod
    def _no_whole_per_seq(cls, data: Any) -> Any:
        """The one coefficient per sequence of older scenarios, refused with its two parts."""
        if isinstance(data, dict) and "per_seq_s" in data:
            raise ValueError(
                "per_seq_s is now two parts, scheduler_per_seq_s (vLLM's scheduler, measured)"
                " and sampling_per_seq_s (the rest); scheduler_per_seq_s: <per_seq_s>,"
                " sampling_per_seq_s: 0 prices the same"
            )
        return data

    @property
    def per_seq_s(self) -> float:
        """The CPU time per scheduled sequence, the price's one per-sequence term (s)."""
        return self.scheduler_per_seq_s + self.sampling_per_seq_s


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

    ``costs``: the coefficients in their slots (``with_cpu_s``, which the compiled
    loop runs too; ``sim.cost.tabulate`` copies them into its array).
    """

    __slots__ = ("_gpu_step_s", "costs", "cpu", "gpu")

    def __init__(self, gpu: CostModel, cpu: EngineCpu) -> None:
        self.gpu = gpu
        self.cpu = cpu
        config = cpu.config
        self.costs = [0.0] * NUM_COSTS
        self.costs[CPU_PER_STEP_S] = config.per_step_s
        self.costs[CPU_PER_SEQ_S] = config.per_seq_s  # the two parts' sum, added once
        self.costs[CPU_PER_TOKEN_S] = config.per_token_s
        self.costs[CPU_NON_OVERLAPPED_S] = config.non_overlapped_s
        self.costs[CPU_ASYNC_SCHEDULING] = float(cpu.async_scheduling)
        # Looked up once: step_s runs millions of times a run.
        self._gpu_step_s = gpu.step_s

    @property
    def label(self) -> str:
        mode = "overlapped" if self.cpu.async_scheduling else "serial"
        return f"{self.gpu.label} + engine CPU ({self.cpu.source}; {mode})"

    def step_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        seqs = shape.num_prefill_seqs + shape.num_decode_seqs
        return with_cpu_s(self.costs, self._gpu_step_s(shape), seqs, tokens)

    def __repr__(self) -> str:
        return f"EngineCpuCost({self.label!r})"
