"""The PyTorch Llama model: KV-cached steps agree with full recomputation."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from torch import Tensor

torch = pytest.importorskip("torch")


from calibration.model import DecodeItem, KVCache, LlamaModel, PrefillChunk  # noqa: E402
from calibration.sampling import SamplingParams  # noqa: E402
from sim.hardware.specs import ModelSpec, model_preset  # noqa: E402

# Small enough to run in milliseconds, GQA (4 query heads per KV head), untied head.
SMALL = ModelSpec(
    name="test-small",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=8,
    num_kv_heads=2,
    intermediate_size=96,
    vocab_size=300,
    weight_dtype_bytes=4.0,
    kv_dtype_bytes=4.0,
)
ATOL = 1e-4  # fp32 sums over a few hundred terms, logits of O(1)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _tokens(n: int, seed: int, vocab: int = SMALL.vocab_size) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def _reference_logits(model: LlamaModel, tokens: list[int]) -> Tensor:
    """Logits at every position by a plain, cache-free implementation."""
    spec = model.spec
    n, hd = len(tokens), spec.head_dim
    group = spec.num_attention_heads // spec.num_kv_heads

    def norm(x: Tensor, w: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    pos = torch.arange(n, dtype=torch.float32)
    inv = model.rope_theta ** (-torch.arange(hd // 2, dtype=torch.float32) / (hd // 2))
    ang = torch.outer(pos, inv)
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

    def rope(x: Tensor) -> Tensor:
        a, b = x[..., : hd // 2], x[..., hd // 2 :]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    x = model.embed[torch.tensor(tokens)]
    causal = torch.ones(n, n).tril().bool()
    for layer in model.decoder_layers:
        qkv = norm(x, layer.attn_norm) @ layer.wqkv.T
        if layer.bqkv is not None:
            qkv = qkv + layer.bqkv
        qw, kw = spec.num_attention_heads * hd, spec.num_kv_heads * hd
        q = rope(qkv[:, :qw].view(n, -1, hd))
        k = rope(qkv[:, qw : qw + kw].view(n, -1, hd)).repeat_interleave(group, dim=1)
        v = qkv[:, qw + kw :].view(n, -1, hd).repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + torch.einsum("hqk,khd->qhd", attn, v).reshape(n, -1) @ layer.wo.T
        gate, up = (norm(x, layer.mlp_norm) @ layer.w_gate_up.T).chunk(2, -1)
        x = x + (torch.nn.functional.silu(gate) * up) @ layer.w_down.T
    return norm(x, model.final_norm) @ model.lm_head.T


def test_prefill_matches_the_plain_reference() -> None:
    model = LlamaModel(SMALL, seed=0)
    tokens = _tokens(11, seed=1)
    out = model.forward_step(model.new_cache(1, 32), [PrefillChunk(0, tokens)], return_logits=True)
    assert out.logits is not None
    torch.testing.assert_close(
        out.logits[0], _reference_logits(model, tokens)[-1], atol=ATOL, rtol=0
    )


def test_batched_decode_of_different_lengths_matches_full_recompute() -> None:
    """Three sequences (5, 9 and 14 prompt tokens) prefilled together, then 3 decode steps."""
    model = LlamaModel(SMALL, seed=0)
    prompts = [_tokens(n, seed=n) for n in (5, 9, 14)]
    cache = model.new_cache(3, 32)
    out = model.forward_step(cache, [PrefillChunk(i, p) for i, p in enumerate(prompts)])
    seqs = [[*p, t] for p, t in zip(prompts, out.next_token_ids, strict=True)]
    for _ in range(3):
        step = model.forward_step(
            cache, decode=[DecodeItem(i, s[-1]) for i, s in enumerate(seqs)], return_logits=True
        )
        assert step.logits is not None
        for i, seq in enumerate(seqs):
            full = _reference_logits(model, seq)[-1]
            torch.testing.assert_close(step.logits[i], full, atol=ATOL, rtol=0)
        seqs = [[*s, t] for s, t in zip(seqs, step.next_token_ids, strict=True)]
    assert cache.lengths.tolist() == [len(s) - 1 for s in seqs]


def test_chunked_prefill_matches_one_shot_prefill() -> None:
    model = LlamaModel(SMALL, seed=0)
    tokens = _tokens(20, seed=3)
    cache = model.new_cache(2, 32)
    first = model.forward_step(cache, [PrefillChunk(0, tokens[:7], sample=False)])
    assert first.next_token_ids == []  # a non-final chunk samples nothing
    second = model.forward_step(cache, [PrefillChunk(0, tokens[7:])], return_logits=True)
    whole = model.forward_step(cache, [PrefillChunk(1, tokens)], return_logits=True)
    assert second.logits is not None and whole.logits is not None
    torch.testing.assert_close(second.logits, whole.logits, atol=ATOL, rtol=0)


def test_mixed_step_matches_separate_computation() -> None:
    """A prefill chunk (after a cached prefix) and two decodes in one step."""
    model = LlamaModel(SMALL, seed=4)
    a, b, c = _tokens(6, 10), _tokens(13, 11), _tokens(17, 12)
    cache = model.new_cache(3, 40)
    model.forward_step(cache, [PrefillChunk(0, a), PrefillChunk(1, b), PrefillChunk(2, c[:8])])
    mixed = model.forward_step(
        cache,
        [PrefillChunk(2, c[8:])],
        [DecodeItem(0, 7), DecodeItem(1, 8)],
        return_logits=True,
    )
    assert mixed.logits is not None
    expected = [
        _reference_logits(model, c)[-1],
        _reference_logits(model, [*a, 7])[-1],
        _reference_logits(model, [*b, 8])[-1],
    ]
    for row, want in zip(mixed.logits, expected, strict=True):
        torch.testing.assert_close(row, want, atol=ATOL, rtol=0)
    assert cache.lengths.tolist() == [7, 14, 17]


def test_qkv_bias_and_tied_embeddings() -> None:
    spec = SMALL.model_copy(update={"attention_qkv_bias": True, "tied_embeddings": True})
    model = LlamaModel(spec, seed=0)
    assert model.lm_head is model.embed
    assert sum(p.numel() for p in model.parameters()) == spec.num_params
    tokens = _tokens(9, seed=2)
    out = model.forward_step(model.new_cache(1, 16), [PrefillChunk(0, tokens)], return_logits=True)
    assert out.logits is not None
    torch.testing.assert_close(
        out.logits[0], _reference_logits(model, tokens)[-1], atol=ATOL, rtol=0
    )


def test_parameter_count_matches_the_spec() -> None:
    for spec in (SMALL, model_preset("tiny")):
        model = LlamaModel(spec, seed=0)
        assert sum(p.numel() for p in model.parameters()) == spec.num_params


def test_weights_are_seeded_random_never_zero() -> None:
    a, b, c = LlamaModel(SMALL, seed=0), LlamaModel(SMALL, seed=0), LlamaModel(SMALL, seed=1)
    assert torch.equal(a.decoder_layers[0].wqkv, b.decoder_layers[0].wqkv)
    assert not torch.equal(a.decoder_layers[0].wqkv, c.decoder_layers[0].wqkv)
    for p in a.parameters():
        assert p.abs().sum() > 0
        assert not p.requires_grad


def test_greedy_is_argmax_and_sampling_follows_its_generator() -> None:
    model = LlamaModel(SMALL, seed=0)
    tokens = _tokens(5, seed=9)
    greedy = model.forward_step(
        model.new_cache(1, 8), [PrefillChunk(0, tokens)], return_logits=True
    )
    assert greedy.logits is not None
    assert greedy.next_token_ids == [int(greedy.logits[0].argmax())]
    draws = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(123)
        out = model.forward_step(
            model.new_cache(4, 8),
            [PrefillChunk(i, tokens) for i in range(4)],
            sampling=SamplingParams(temperature=1.0),
            generator=gen,
        )
        draws.append(out.next_token_ids)
    assert draws[0] == draws[1]
    assert all(0 <= t < SMALL.vocab_size for t in draws[0])


def test_empty_step_does_nothing() -> None:
    model = LlamaModel(SMALL, seed=0)
    cache = model.new_cache(1, 8)
    assert model.forward_step(cache).next_token_ids == []
    assert cache.lengths.tolist() == [0]


def test_cache_overflow_and_bad_slot_are_rejected() -> None:
    model = LlamaModel(SMALL, seed=0)
    cache = model.new_cache(2, 8)
    with pytest.raises(ValueError, match="max_len_tokens"):
        model.forward_step(cache, [PrefillChunk(0, _tokens(9, seed=0))])
    with pytest.raises(IndexError):
        model.forward_step(cache, decode=[DecodeItem(5, 1)])
    with pytest.raises(ValueError, match="twice"):
        model.forward_step(cache, [PrefillChunk(0, [1, 2])], [DecodeItem(0, 3)])
    assert cache.lengths.tolist() == [0, 0]


def test_cache_reshape_reuses_storage_within_capacity() -> None:
    cache = KVCache(SMALL, 4, 16, dtype=torch.float32, device="cpu")
    assert cache.capacity_tokens == 64
    storage = cache.k[0].untyped_storage().data_ptr()
    cache.reshape(2, 32)
    assert cache.k[0].shape == (2, SMALL.num_kv_heads, 32, SMALL.head_dim)
    assert cache.k[0].untyped_storage().data_ptr() == storage
    assert cache.lengths.tolist() == [0, 0]
    with pytest.raises(ValueError, match="capacity"):
        cache.reshape(8, 16)
    assert cache.bytes_total == 64 * SMALL.kv_bytes_per_token
    assert float(cache.k[0].abs().sum()) > 0  # random, never zeros
