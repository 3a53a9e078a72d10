"""What an engine hands ``LlamaModel.forward_step`` and what it gets back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PrefillChunk:
    """``token_ids`` to append to ``slot``'s cached context.

    ``sample`` says whether to compute logits and sample after this chunk
    (true for the last chunk of a prompt, false for earlier chunks).
    """

    slot: int
    token_ids: Sequence[int]
    sample: bool = True


@dataclass(frozen=True)
class DecodeItem:
    """One decoding sequence: its slot and the token it feeds in this step."""

    slot: int
    token_id: int


@dataclass(frozen=True)
class StepOutput:
    """Sampled ids, one per sampling chunk then one per decode item, in order."""

    next_token_ids: list[int]
    logits: torch.Tensor | None = None  # [num_sampled, vocab] float32, if asked
