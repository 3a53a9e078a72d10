"""Sampling on logits: greedy is argmax, top-k and top-p restrict the support, seeds reproduce."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from calibration.sampling import SamplingParams, filtered_logits, sample


def _logits_from_probs(probs: list[float]) -> torch.Tensor:
    return torch.tensor([[math.log(p) for p in probs]], dtype=torch.float32)


def _draws(logits: torch.Tensor, params: SamplingParams, n: int = 400, seed: int = 0) -> set[int]:
    gen = torch.Generator().manual_seed(seed)
    rows = logits.expand(n, -1).contiguous()
    return set(sample(rows, params, gen))


def test_temperature_zero_is_argmax_per_row() -> None:
    logits = torch.randn(5, 100, generator=torch.Generator().manual_seed(1))
    assert sample(logits, SamplingParams()) == logits.argmax(dim=-1).tolist()


def test_greedy_ignores_top_k_and_top_p() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(2))
    params = SamplingParams(temperature=0.0, top_k=5, top_p=0.1)
    assert sample(logits, params) == logits.argmax(dim=-1).tolist()


def test_top_k_restricts_support_to_the_k_largest() -> None:
    logits = torch.randn(1, 200, generator=torch.Generator().manual_seed(3))
    top = set(torch.topk(logits[0], 7).indices.tolist())
    drawn = _draws(logits, SamplingParams(temperature=5.0, top_k=7))
    assert drawn <= top
    assert len(drawn) > 1  # a high temperature spreads draws over the k tokens


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = _logits_from_probs([0.5, 0.3, 0.15, 0.05])
    assert _draws(logits, SamplingParams(temperature=1.0, top_p=0.7)) == {0, 1}
    assert _draws(logits, SamplingParams(temperature=1.0, top_p=0.85)) == {0, 1, 2}
    assert _draws(logits, SamplingParams(temperature=1.0, top_p=1.0)) == {0, 1, 2, 3}


def test_top_p_always_keeps_the_most_likely_token() -> None:
    logits = _logits_from_probs([0.1, 0.6, 0.3])
    assert _draws(logits, SamplingParams(temperature=1.0, top_p=0.01)) == {1}


def test_top_k_then_top_p_compose() -> None:
    logits = _logits_from_probs([0.4, 0.3, 0.2, 0.1])
    # top-k 3 renormalises to 4/9, 3/9, 2/9: top-p 0.5 then keeps tokens 0 and 1.
    drawn = _draws(logits, SamplingParams(temperature=1.0, top_k=3, top_p=0.5))
    assert drawn == {0, 1}


def test_seeded_generator_reproduces_draws() -> None:
    logits = torch.randn(8, 300, generator=torch.Generator().manual_seed(4))
    params = SamplingParams(temperature=0.8, top_p=0.9)
    a = sample(logits, params, torch.Generator().manual_seed(42))
    b = sample(logits, params, torch.Generator().manual_seed(42))
    c = sample(logits, params, torch.Generator().manual_seed(43))
    assert a == b
    assert len(a) == 8
    assert a != c or len(set(a)) == 1


def test_filtered_logits_rejects_greedy_and_keeps_shape() -> None:
    logits = torch.randn(2, 10)
    with pytest.raises(ValueError, match="temperature"):
        filtered_logits(logits, SamplingParams())
    out = filtered_logits(logits, SamplingParams(temperature=0.5, top_k=3))
    assert out.shape == logits.shape
    assert int(torch.isfinite(out).sum(dim=-1).max()) == 3


def test_empty_logits_sample_nothing() -> None:
    assert sample(torch.empty(0, 10), SamplingParams(temperature=1.0)) == []


@pytest.mark.parametrize(
    "fields", [{"temperature": -1.0}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}, {"x": 1}]
)
def test_bad_params_are_rejected(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SamplingParams(**fields)


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(1, 20),
    p=st.floats(0.05, 1.0),
    temperature=st.floats(0.1, 3.0),
    seed=st.integers(0, 1000),
)
def test_support_is_within_top_k_and_holds_p_mass(
    k: int, p: float, temperature: float, seed: int
) -> None:
    logits = torch.randn(1, 40, generator=torch.Generator().manual_seed(seed))
    params = SamplingParams(temperature=temperature, top_k=k, top_p=p)
    kept = torch.isfinite(filtered_logits(logits, params))[0]
    top = set(torch.topk(logits[0], k).indices.tolist())
    assert set(torch.nonzero(kept).flatten().tolist()) <= top
    assert bool(kept[int(logits.argmax())])
    # The kept tokens hold at least p of the top-k mass (after temperature).
    scaled = torch.softmax(
        torch.where(
            torch.isin(torch.arange(40), torch.tensor(sorted(top))),
            logits[0] / temperature,
            torch.tensor(float("-inf")),
        ),
        dim=-1,
    )
    assert float(scaled[kept].sum()) >= min(p, 1.0) - 1e-5
