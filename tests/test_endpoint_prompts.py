"""Prompts of a target token count, counted by a (fake) server tokenizer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.validation.endpoint_prompts import (
    ONE_TOKEN_WORDS,
    Prompt,
    TokenScale,
    approximate_prompt,
    build_prompts,
    exact_prompt,
    word_text,
)

T = TypeVar("T")


class Tokenizer:
    """A fake tokenize endpoint that counts its calls."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self.count = count
        self.num_calls = 0

    async def __call__(self, text: str) -> int:
        self.num_calls += 1
        return int(self.count(text))


def bytes_plus_bos(text: str) -> int:
    return len(text.encode()) + 1  # servesim serve's bytes, plus a BOS as vLLM adds


def words_plus_template(text: str) -> int:
    return len(text.split()) + 5  # a BPE where every word is a token, a 5-token chat template


def pairs(text: str) -> int:
    return (len(text) + 1) // 2 * 2  # a count that jumps by two: odd targets are unreachable


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_word_text_has_the_words_asked_for() -> None:
    rng = np.random.default_rng(0)
    text = word_text(50, rng)
    assert len(text.split()) == 50 and set(text.split()) <= set(ONE_TOKEN_WORDS)
    assert word_text(0, rng) == ""


def test_approximate_prompt_is_one_word_per_token_and_not_exact() -> None:
    prompt = approximate_prompt(37, np.random.default_rng(1))
    assert len(prompt.text.split()) == 37
    assert prompt == Prompt(prompt.text, 37, exact=False)


def test_token_scale_from_two_calls() -> None:
    tokenizer = Tokenizer(bytes_plus_bos)
    scale = run(TokenScale.probe(tokenizer, np.random.default_rng(0)))
    assert scale.num_base_tokens == 1
    assert scale.chars_per_token == pytest.approx(1.0)
    assert tokenizer.num_calls == 2


@pytest.mark.parametrize("count", [bytes_plus_bos, words_plus_template])
@pytest.mark.parametrize("target", [6, 7, 16, 128, 641])
def test_exact_prompt_hits_the_target(count: Callable[[str], int], target: int) -> None:
    tokenizer = Tokenizer(count)
    scale = run(TokenScale.probe(tokenizer, np.random.default_rng(0)))
    tokenizer.num_calls = 0
    prompt = run(exact_prompt(target, np.random.default_rng(target), tokenizer, scale))
    assert prompt.exact and prompt.num_tokens == target
    assert count(prompt.text) == target
    assert tokenizer.num_calls <= 30


def test_bytes_take_two_calls_when_the_scale_is_exact() -> None:
    tokenizer = Tokenizer(bytes_plus_bos)
    scale = TokenScale(1, 1.0)
    prompt = run(exact_prompt(100, np.random.default_rng(0), tokenizer, scale))
    assert len(prompt.text) == 99
    assert tokenizer.num_calls == 2  # the whole text (long enough), then the first guess


@given(st.integers(min_value=3, max_value=400))
@settings(max_examples=30, deadline=None)
def test_an_unreachable_count_gives_the_largest_prefix_below(target: int) -> None:
    tokenizer = Tokenizer(pairs)
    scale = run(TokenScale.probe(tokenizer, np.random.default_rng(0)))
    prompt = run(exact_prompt(target, np.random.default_rng(target), tokenizer, scale))
    assert prompt.exact
    assert prompt.num_tokens == pairs(prompt.text)  # its true count is kept
    assert target - 1 <= prompt.num_tokens <= target


def test_a_target_under_the_special_tokens_is_the_empty_prompt() -> None:
    tokenizer = Tokenizer(words_plus_template)
    prompt = run(exact_prompt(3, np.random.default_rng(0), tokenizer, TokenScale(5, 5.0)))
    assert prompt == Prompt("", 5, exact=True)


def test_build_prompts_distinct_deterministic_and_exact() -> None:
    targets = [20, 20, 33, 5]
    first = run(build_prompts(targets, np.random.default_rng(3), Tokenizer(bytes_plus_bos)))
    again = run(build_prompts(targets, np.random.default_rng(3), Tokenizer(bytes_plus_bos)))
    assert first == again
    assert [p.num_tokens for p in first] == targets
    assert first[0].text != first[1].text  # no shared prompt (prefix caching)
    assert first[0].text[:8] != first[1].text[:8]


def test_build_prompts_without_a_tokenizer_approximates() -> None:
    prompts = run(build_prompts([4, 9], np.random.default_rng(0), None))
    assert [p.num_tokens for p in prompts] == [4, 9]
    assert not any(p.exact for p in prompts)
    assert [len(p.text.split()) for p in prompts] == [4, 9]


def ten_chars(text: str) -> int:
    return len(text) // 10  # a tokenizer far coarser than the scale below says


@given(st.integers(min_value=1, max_value=300), st.floats(min_value=0.5, max_value=12.0))
@settings(max_examples=30, deadline=None)
def test_a_wrong_scale_still_ends_exact(target: int, chars_per_token: float) -> None:
    # The scale claims chars_per_token; the server counts 10 characters a token: the
    # first text may be too short (it is extended) and the first guess off (bisection).
    tokenizer = Tokenizer(ten_chars)
    scale = TokenScale(0, chars_per_token)
    prompt = run(exact_prompt(target, np.random.default_rng(target), tokenizer, scale))
    assert prompt.exact and prompt.num_tokens == target == ten_chars(prompt.text)
    assert set(prompt.text.split()[:-1]) <= set(ONE_TOKEN_WORDS)  # whole words but the last
    assert tokenizer.num_calls <= 2 + 24 + 8  # extensions, the search, its bound


def test_a_too_short_first_text_is_extended_with_more_words() -> None:
    tokenizer = Tokenizer(ten_chars)
    # Scale 1 char/token: 100 tokens -> 49 words (~240 characters, 24 tokens): short.
    prompt = run(exact_prompt(100, np.random.default_rng(5), tokenizer, TokenScale(0, 1.0)))
    assert prompt.num_tokens == 100 and 1000 <= len(prompt.text) < 1010
    assert tokenizer.num_calls >= 4  # several extensions before the search


def test_prompts_do_not_depend_on_how_many_are_counted_at_once() -> None:
    targets = [7, 30, 12, 30, 4, 19]
    one = run(build_prompts(targets, np.random.default_rng(9), Tokenizer(bytes_plus_bos), 1))
    many = run(build_prompts(targets, np.random.default_rng(9), Tokenizer(bytes_plus_bos), 16))
    assert one == many  # one generator per prompt, drawn in order
    assert len({p.text for p in one}) == len(targets)  # equal targets, distinct texts


def test_the_scale_probe_subtracts_the_empty_prompts_count() -> None:
    tokenizer = Tokenizer(words_plus_template)
    scale = run(TokenScale.probe(tokenizer, np.random.default_rng(2)))
    assert scale.num_base_tokens == 5  # the template alone
    # 400 words, 400 tokens: characters per token = the sample's length / 400.
    sample = word_text(400, np.random.default_rng(2))
    assert scale.chars_per_token == pytest.approx(len(sample) / 400)
