"""The shape of one engine step, and the protocol every cost model follows.

A step's cost depends only on aggregate counts, never on which requests are in
it, so a shape is a handful of integers: this keeps a cost evaluation to a few
microseconds. A cost model is one method, ``step_s(shape)``; everything else
prices through it (the speed paths' table of prices, ``sim.cost.tabulate``, holds
``step_s``'s own bits).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, Protocol, runtime_checkable


class StepShape(NamedTuple):
    """Sufficient statistics of one forward pass over a mixed batch.

    Prefill part: ``num_prefill_seqs`` chunks with ``num_prefill_tokens`` new
    tokens in all. For a chunk of ``c`` new tokens after ``p`` already-cached
    tokens, causal attention touches ``c * p + c * (c + 1) / 2`` query-key
    pairs and reads ``p + c`` tokens of KV; the shape keeps the sums of both.

    Decode part: ``num_decode_seqs`` sequences computing one token each, whose
    contexts (tokens already in the KV cache, including the one being computed)
    sum to ``num_decode_context_tokens``; the longest and shortest of them are
    ``max_decode_context_tokens`` and ``min_decode_context_tokens`` (0 with no
    decodes), the spread a kernel cost's skew term reads. Every shape the
    simulator builds fills them in; a shape built by hand without them (0)
    has its max below its mean and is priced as an even batch.

    A named tuple, not a frozen dataclass: one is built for every step priced,
    and a tuple is built in one call where a frozen dataclass sets each field
    through ``object.__setattr__`` (about three times slower).
    """

    num_prefill_seqs: int = 0
    num_prefill_tokens: int = 0
    prefill_attention_pairs: int = 0
    prefill_kv_read_tokens: int = 0
    num_decode_seqs: int = 0
    num_decode_context_tokens: int = 0
    max_decode_context_tokens: int = 0
    min_decode_context_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens computed in this step (prefill plus one per decode sequence)."""
        return self.num_prefill_tokens + self.num_decode_seqs

    @property
    def is_empty(self) -> bool:
        return self.num_tokens == 0

    @staticmethod
    def build(
        prefill_chunks: list[tuple[int, int]] | None = None,
        decode_context_tokens: list[int] | None = None,
    ) -> StepShape:
        """Shape from explicit lists.

        ``prefill_chunks`` holds ``(num_new_tokens, num_cached_tokens)`` per
        chunk; ``decode_context_tokens`` the context length of each decode
        sequence, counting the token computed in this step.
        """
        chunks = prefill_chunks or []
        contexts = decode_context_tokens or []
        return StepShape(
            num_prefill_seqs=len(chunks),
            num_prefill_tokens=sum(c for c, _ in chunks),
            prefill_attention_pairs=sum(c * p + c * (c + 1) // 2 for c, p in chunks),
            prefill_kv_read_tokens=sum(c + p for c, p in chunks),
            num_decode_seqs=len(contexts),
            num_decode_context_tokens=sum(contexts),
            max_decode_context_tokens=max(contexts, default=0),
            min_decode_context_tokens=min(contexts, default=0),
        )


# StepShape's fields in order: the shape columns of step logs and tables.
SHAPE_FIELDS: tuple[str, ...] = StepShape._fields


@runtime_checkable
class CostModel(Protocol):
    """A pure function from a step's shape to its duration in seconds."""

    @property
    def label(self) -> str:
        """Short description for reports, e.g. ``roofline:llama-3-8b@h100``."""
        ...

    def step_s(self, shape: StepShape) -> float:
        """Wall time of one step of this shape, in seconds (> 0 unless empty)."""
        ...


def decode_run_s(
    cost: CostModel,
    num_seqs: int,
    context_tokens: int,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> Iterator[float]:
    """``cost.step_s`` of consecutive decode-only steps, each priced when taken.

    Step ``j`` (from 0) has ``num_seqs`` sequences whose contexts sum to
    ``context_tokens + j * num_seqs``, the longest ``max_context_tokens + j``
    and the shortest ``min_context_tokens + j`` (every context grows by one a
    step; 0, as in ``StepShape``: not given, an even batch). Endless: the
    caller takes what it needs.
    """
    step_s = cost.step_s
    new = tuple.__new__  # StepShape(...) without its Python-level __new__: one a step
    context, longest, shortest = context_tokens, max_context_tokens, min_context_tokens
    while True:
        # No prefill; the decodes' count, summed, longest and shortest context.
        yield step_s(new(StepShape, (0, 0, 0, 0, num_seqs, context, longest, shortest)))
        context += num_seqs
        longest += 1
        shortest += 1
