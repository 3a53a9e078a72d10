"""Orca-style iteration-level batching: maximum-length KV reservation, no paging.

As in Orca (Yu et al., OSDI 2022) the batch is re-formed every iteration, and
waiting requests join FCFS while fewer than ``max_num_seqs`` run. Unlike paged
continuous batching, a request reserves KV for its maximum length at admission
(one contiguous region without paging): nothing is ever preempted, but memory
sits idle and fewer requests run (still counted in blocks: use
``block_size_tokens: 1`` for exact slots). No token budget, no chunking: an
admitted prompt is prefilled whole beside the running decodes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.config import Frozen
from sim.engine.policies.prefill_first import PrefillFirst, PrefillFirstConfig
from sim.engine.request import Request
from sim.engine.scheduler import Continuous

# No token budget: one step prefills every admitted prompt whole.
UNLIMITED_TOKENS = 1 << 40


class OrcaConfig(Frozen):
    """Settings of Orca-style batching (iteration-level, maximum-length reservation)."""

    kind: Literal["orca"] = "orca"
    max_num_seqs: int = Field(default=256, ge=1, description="running requests at most")

    def build(self) -> Orca:
        return Orca(self)

    def step_seq_bound(self) -> int:
        return self.max_num_seqs

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        return min(self.max_num_seqs * max_model_len_tokens, 1 << 16)


class Orca(PrefillFirst):
    """Prefill-first's admission reserving the maximum length, in continuous
    batching's step (the running loop never allocates, so never preempts)."""

    def __init__(self, config: OrcaConfig) -> None:
        super().__init__(
            PrefillFirstConfig(
                max_num_seqs=config.max_num_seqs, max_num_batched_tokens=UNLIMITED_TOKENS
            )
        )

    _schedule = Continuous._schedule  # decodes, then admission in the same step

    def _reserve_tokens(self, request: Request) -> int:
        return request.max_num_tokens
