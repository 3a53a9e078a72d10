"""Orca-style iteration-level batching: maximum-length KV reservation, no paging.

As in Orca (Yu et al., OSDI 2022), the batch is re-formed every iteration:
running requests decode (or prefill their whole prompt in the step that admits
them), finished ones leave, and waiting requests join first-come first-served
while there are fewer than ``max_num_seqs`` running. What differs from paged
continuous batching (``continuous``) is memory: at admission a request
reserves KV slots for its maximum length, prompt plus output
(``Request.max_num_tokens``), because without paging its cache must be one
contiguous region sized up front. The pool therefore never runs out while a
request runs, so nothing is ever preempted, but the reservation for tokens not
yet generated holds memory idle and fewer requests run concurrently for the
same pool. (The reservation is still counted in blocks of
``engine.block_size_tokens``, so the comparison with paging isolates the
up-front reservation; use ``block_size_tokens: 1`` for exact slots.)

There is no token budget and no chunking: an admitted prompt is prefilled in
one step, beside the running requests' decodes (Orca's selective batching).
Admission stops at the first waiting request that does not fit (FCFS, no
overtaking).
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
        """Most sequences one step holds (``max_num_seqs``)."""
        return self.max_num_seqs

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        """Most tokens one step can compute (sizes the activation reserve)."""
        return min(self.max_num_seqs * max_model_len_tokens, 1 << 16)


class Orca(PrefillFirst):
    """Prefill-first's admission (whole prompts, first-come first-served) reserving
    the maximum length, in continuous batching's step: the admitted prompts
    prefill beside the running requests' decodes.

    Since a running request's blocks already cover every token it will compute,
    the running loop never allocates and never preempts, and skip-ahead runs
    are bounded only by the first request to finish.
    """

    def __init__(self, config: OrcaConfig) -> None:
        super().__init__(
            PrefillFirstConfig(
                max_num_seqs=config.max_num_seqs, max_num_batched_tokens=UNLIMITED_TOKENS
            )
        )

    _schedule = Continuous._schedule  # decodes, then admission in the same step

    def _reserve_tokens(self, request: Request) -> int:
        return request.max_num_tokens
