"""Prompts of a given token count for a server whose tokenizer servesim does not have.

docs/validation.md ("Measuring a live server", step 2) tells how: one text of random
common words per request, so that no two prompts share a prefix (a server's prefix
cache must not serve them); exact by the server's ``POST /tokenize``
(``exact_prompt``: secants through the bracketing prefixes' counts, bisecting when
they creep from one side), else ``n`` one-token words (``ONE_TOKEN_WORDS``, each one
token with its leading space in the GPT-2, Llama-3, Mistral and Qwen BPE
vocabularies; approximate: the special tokens a server adds are left out).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

_WORDS = (
    "the of and to in is that for it as with was on be by at this are from or an have "
    "not they which one you were all we her she there would their will when who him been "
    "has more if no out do so can what up said about other into than its time only could "
    "new them man some these then two first may any like now my such make over our even "
    "most me after also made many did must before back see way where get much go well "
    "your know should down work year because come people just"
)
# The one word list: the reference engine's prompts draw from it too
# (calibration.reference_engine.prompt_text; its byte tokenizer makes every character a
# token, so any words would do there, and these are common words).
ONE_TOKEN_WORDS = tuple(_WORDS.split())

TokenCounter = Callable[[str], Awaitable[int]]
_MAX_PROBES = 24  # tokenize calls per prompt: a secant step lands in 1-3 on any sane tokenizer


def word_text(num_words: int, rng: np.random.Generator) -> str:
    """``num_words`` random words of ``ONE_TOKEN_WORDS`` joined by spaces."""
    if num_words <= 0:
        return ""
    picks = rng.integers(0, len(ONE_TOKEN_WORDS), size=num_words)
    return " ".join(ONE_TOKEN_WORDS[int(i)] for i in picks)


@dataclass(frozen=True)
class Prompt:
    """A prompt's text and its token count (``exact``: counted by the server)."""

    text: str
    num_tokens: int
    exact: bool


def approximate_prompt(num_tokens: int, rng: np.random.Generator) -> Prompt:
    """``num_tokens`` one-token words (no tokenize endpoint: an approximation)."""
    return Prompt(word_text(num_tokens, rng), num_tokens, exact=False)


@dataclass(frozen=True)
class TokenScale:
    """How the server counts: tokens of an empty prompt and characters per token."""

    num_base_tokens: int
    chars_per_token: float

    @classmethod
    async def probe(cls, count: TokenCounter, rng: np.random.Generator) -> TokenScale:
        """Two tokenize calls: the empty prompt and 400 random words."""
        base = await count("")
        sample = word_text(400, rng)
        num = await count(sample) - base
        return cls(base, len(sample) / max(1, num))


async def exact_prompt(
    num_tokens: int, rng: np.random.Generator, count: TokenCounter, scale: TokenScale
) -> Prompt:
    """A prefix of random words that the server counts as ``num_tokens`` tokens (or fewer)."""
    if num_tokens <= scale.num_base_tokens:
        return Prompt("", scale.num_base_tokens, exact=True)
    # Enough text for the target with margin: words are ~4.3 characters plus a space.
    words = int((num_tokens * scale.chars_per_token) / 3.0) + 16
    text = word_text(words, rng)
    full = await count(text)
    while full < num_tokens:
        text = f"{text} {word_text(words, rng)}"
        full = await count(text)
    if full == num_tokens:
        return Prompt(text, full, exact=True)
    lo, lo_count = 0, scale.num_base_tokens  # a prefix under the target, and its count
    hi, hi_count = len(text), full  # a prefix over it
    guess = round((num_tokens - scale.num_base_tokens) * scale.chars_per_token)
    streak, last_moved_lo = 0, None  # probes in a row that moved the same end
    for _ in range(_MAX_PROBES):
        if hi - lo <= 1:
            break
        length = min(max(guess, lo + 1), hi - 1)
        counted = await count(text[:length])
        if counted == num_tokens:
            return Prompt(text[:length], counted, exact=True)
        moved_lo = counted < num_tokens
        if moved_lo:
            lo, lo_count = length, counted
        else:
            hi, hi_count = length, counted
        streak, last_moved_lo = (streak + 1 if moved_lo == last_moved_lo else 1), moved_lo
        # The secant through the bracket's ends (their counts, not the first scale,
        # which may be far off); bisection when it creeps from one side.
        guess = lo + round((num_tokens - lo_count) * (hi - lo) / (hi_count - lo_count))
        if streak > 2 or not lo < guess < hi:
            guess, streak = (lo + hi) // 2, 0
    return Prompt(text[:lo], lo_count, exact=True)


async def build_prompts(
    num_tokens: list[int],
    rng: np.random.Generator,
    count: TokenCounter | None,
    max_parallel: int = 16,
) -> list[Prompt]:
    """One prompt per target; exact via ``count`` (a tokenize call) when given."""
    if count is None:
        return [approximate_prompt(n, rng) for n in num_tokens]
    scale = await TokenScale.probe(count, rng)
    # One generator per prompt, drawn in order: the texts do not depend on timing.
    seeds = rng.integers(0, 2**63 - 1, size=len(num_tokens))
    gate = asyncio.Semaphore(max_parallel)

    async def one(n: int, seed: int) -> Prompt:
        async with gate:
            return await exact_prompt(n, np.random.default_rng(seed), count, scale)

    return list(
        await asyncio.gather(*(one(n, int(s)) for n, s in zip(num_tokens, seeds, strict=True)))
    )
