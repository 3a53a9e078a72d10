"""The shape of one engine step, the protocol every cost model follows, and pricing a run.

A step's cost depends only on aggregate counts, never on which requests are in
it, so a shape is a handful of integers: this keeps a cost evaluation to a few
microseconds and lets the simulator price many identical decode steps at once.

The end times of a skip-ahead run (``run_ends_for``): the replica
(``sim.serving.replica``) turns a plan promising ``num_steps``
steps into one SimPy timeout, and needs each step's end time: the first
step's, then ``end[j] = end[j - 1] + d[j]`` with the cost model's decode-step
durations ``d`` (the run's first decode step given by its sequences and their
summed, longest and shortest context; each context grows by one a step),
summed in the same order as step-by-step execution so both modes agree to
the bit. An open-loop run stops early, ``num_after`` steps
after the first that ends at or after the next arrival (``stop_s``).

``ends_until_cut`` is the one loop that sums and cuts, whatever the cost
model. The durations come lazily from the model's ``decode_durations_s``
when it has one (the roofline, kernel tables: a step past the cut is never
priced, and an open-loop run usually stops long before its first finish),
else from its ``decode_steps_s``, all priced at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from functools import partial
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class StepShape:
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
SHAPE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(StepShape))


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

    def decode_steps_s(
        self,
        num_seqs: int,
        context_tokens: int,
        num_steps: int,
        *,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> FloatArray:
        """Durations of ``num_steps`` consecutive decode-only steps.

        Step ``j`` (from 0) has ``num_seqs`` sequences whose contexts sum to
        ``context_tokens + j * num_seqs``, the longest ``max_context_tokens +
        j`` and the shortest ``min_context_tokens + j`` (every context grows by
        one a step; 0, as in ``StepShape``: not given, an even batch). Must
        equal ``step_s`` called step by step, bit for bit; cost models
        vectorise it with numpy. Returns a new array, which the caller may
        modify in place.
        """
        ...


def no_decode_run(num_seqs: int, context_tokens: int, num_steps: int) -> FloatArray | None:
    """Shared argument handling of ``decode_steps_s``.

    Raises on a negative argument; returns the zero durations of a run with no
    sequence, or None when the cost model has real steps to price.
    """
    if num_seqs < 0 or context_tokens < 0 or num_steps < 0:
        raise ValueError(
            f"negative decode_steps_s argument: {num_seqs=}, {context_tokens=}, {num_steps=}"
        )
    return np.zeros(num_steps, dtype=np.float64) if num_seqs == 0 else None


def decode_steps_by_loop(
    model: CostModel,
    num_seqs: int,
    context_tokens: int,
    num_steps: int,
    *,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> FloatArray:
    """Reference implementation of ``decode_steps_s`` by calling ``step_s``."""
    out = np.empty(num_steps, dtype=np.float64)
    for j in range(num_steps):
        out[j] = model.step_s(
            StepShape(
                num_decode_seqs=num_seqs,
                num_decode_context_tokens=context_tokens + j * num_seqs,
                max_decode_context_tokens=max_context_tokens + j,
                min_decode_context_tokens=min_context_tokens + j,
            )
        )
    return out


# (first_end_s, num_seqs, context_tokens, max_context_tokens, min_context_tokens,
#  num_decode_steps, stop_s, num_after) -> ends
RunEnds = Callable[[float, int, int, int, int, int, float, int], list[float]]
# (num_seqs, context_tokens, num_decode_steps, *, max_context_tokens=, min_context_tokens=)
# -> decode-step durations (s), in order
Durations = Callable[..., Iterable[float]]


def ends_until_cut(
    durations_s: Iterable[float],
    first_end_s: float,
    num_decode_steps: int,
    stop_s: float,
    num_after: int,
) -> list[float]:
    """End times (s) of a run's first step and of up to ``num_decode_steps`` decode
    steps after it, lasting ``durations_s`` in order; cut ``num_after`` steps after
    the first to end at or after ``stop_s`` (``num_after`` >= 1: that step itself
    is the first kept). Takes no duration past the cut from ``durations_s``."""
    # Decode steps still to sum: all, unless one ends at or after stop_s.
    left = num_decode_steps if first_end_s < stop_s else min(num_decode_steps, num_after - 1)
    end = first_end_s
    ends = [end]
    if left <= 0:
        return ends
    for step_s in durations_s:
        end += step_s
        ends.append(end)
        left -= 1
        if end >= stop_s:  # the cut: num_after - 1 more steps at most
            left = min(left, num_after - 1)
            stop_s = float("inf")
        if left <= 0:
            break
    return ends


def run_ends_for(cost: CostModel) -> RunEnds:
    """End times (s) of ``cost``'s skip-ahead runs (module docstring). The durations'
    source is looked up once, here: an executor prices a run per plan."""
    # Optional: only some cost models price decode runs in bulk (run_ends_for's docstring).
    lazy: Durations | None = getattr(cost, "decode_durations_s", None)
    durations: Durations = lazy or partial(_all_priced, cost)

    def run_ends(
        first_end_s: float,
        num_seqs: int,
        context_tokens: int,
        max_context_tokens: int,
        min_context_tokens: int,
        num_decode_steps: int,
        stop_s: float,
        num_after: int,
    ) -> list[float]:
        steps = durations(
            num_seqs,
            context_tokens,
            num_decode_steps,
            max_context_tokens=max_context_tokens,
            min_context_tokens=min_context_tokens,
        )
        return ends_until_cut(steps, first_end_s, num_decode_steps, stop_s, num_after)

    return run_ends


def _all_priced(
    cost: CostModel,
    num_seqs: int,
    context_tokens: int,
    num_steps: int,
    *,
    max_context_tokens: int = 0,
    min_context_tokens: int = 0,
) -> Iterator[float]:
    """Every decode step priced at once by ``decode_steps_s`` (the generic source)."""
    steps = cost.decode_steps_s(
        num_seqs,
        context_tokens,
        num_steps,
        max_context_tokens=max_context_tokens,
        min_context_tokens=min_context_tokens,
    )
    return iter(steps.tolist())
