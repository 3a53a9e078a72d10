"""Sampling the next token from logits: greedy, temperature, top-k and top-p.

The engine's model returns the logits of every sequence that samples in a
step (``[num_rows, vocab]``, float32); ``sample`` draws one id per row. The
order follows vLLM and Hugging Face: scale by ``1 / temperature``, keep the
``top_k`` largest logits, then the smallest set of tokens whose probability
reaches ``top_p`` (the most likely token is always kept), renormalise and
draw from the seeded ``torch.Generator``. ``temperature == 0`` is greedy
(argmax) and ignores ``top_k``/``top_p``, as vLLM does.
"""

from __future__ import annotations

import torch
from pydantic import Field

from sim.config import Frozen


class SamplingParams(Frozen):
    """How to pick the next token; the defaults are greedy decoding."""

    temperature: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    top_k: int | None = Field(default=None, ge=1, description="None: the whole vocabulary")
    top_p: float = Field(default=1.0, gt=0, le=1)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = SamplingParams()


def filtered_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``logits / temperature`` with tokens outside top-k / top-p set to ``-inf``.

    ``logits`` is ``[rows, vocab]``; returns a new tensor of the same shape.
    Requires ``temperature > 0``.
    """
    if params.is_greedy:
        raise ValueError("filtered_logits needs temperature > 0 (0 is greedy)")
    scaled = logits.float() / params.temperature
    vocab = scaled.shape[-1]
    if params.top_k is not None and params.top_k < vocab:
        kth = torch.topk(scaled, params.top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Probability mass strictly before each token: a token is kept while
        # the tokens ranked above it hold less than top_p (so the first always is).
        before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = before >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


def sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None
) -> list[int]:
    """One token id per row of ``logits`` (``[rows, vocab]``)."""
    if logits.shape[0] == 0:
        return []
    if params.is_greedy:
        return [int(i) for i in logits.argmax(dim=-1).tolist()]
    probs = torch.softmax(filtered_logits(logits, params), dim=-1)
    drawn = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return [int(i) for i in drawn.tolist()]
