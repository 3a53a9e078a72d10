"""A compact Llama-family decoder whose unit of work is one engine step.

RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP and an LM head,
built from a ``sim.hardware.specs.ModelSpec`` and random-initialised from a seed
(weights are never zeros: timings on zeros can be optimistic).

``LlamaModel.forward_step`` is what a continuous-batching engine calls once per step.
Its tokens are *packed* (every prefill chunk's new tokens, then one per decoding
sequence, in one ``[num_tokens, hidden]`` tensor), so the dense layers run once over
the whole step whatever its mix. A prefill chunk attends to its slot's cached prefix
plus itself (causal); each decoding sequence attends to a view of its own slot (work
proportional to its context, as paged attention). The step also pays what an engine
pays around the forward pass: index tensors, KV writes, the LM head on each
sequence's last position, sampling, and the sampled ids copied to the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from calibration.sampling import GREEDY, SamplingParams, sample
from sim.config import IntArray
from sim.hardware.specs import ModelSpec

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_INIT_STD = 0.02  # like Llama's initializer_range; keeps activations O(1)
_NORM_EPS = 1e-5


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


class KVCache:
    """K and V tensors for every layer, sliced into fixed-size sequence slots.

    Preallocated, per layer ``[num_slots, num_kv_heads, max_len_tokens, head_dim]``:
    a prefill chunk reads its slot's prefix as a view (no copy). One flat buffer per
    K and V, so ``reshape`` re-views it as another ``(num_slots, max_len_tokens)``
    pair without reallocating (a profiler sweeps shapes in one memory budget).
    ``lengths[slot]`` (host-side numpy: no device round trip) counts the tokens
    already written; advancing it is the caller's job once a step has finished.
    """

    def __init__(
        self,
        spec: ModelSpec,
        num_slots: int,
        max_len_tokens: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
        generator: torch.Generator | None = None,
    ) -> None:
        if num_slots <= 0 or max_len_tokens <= 0:
            raise ValueError("num_slots and max_len_tokens must be positive")
        self.num_layers = spec.num_layers
        self.num_kv_heads = spec.num_kv_heads
        self.head_dim = spec.head_dim
        self.capacity_tokens = num_slots * max_len_tokens
        shape = (self.num_layers, self.capacity_tokens * self.num_kv_heads * self.head_dim)
        # Random, never zeros: timings on zero data can be optimistic, and
        # unwritten positions must not look like real keys in tests either.
        self._k_flat = torch.empty(shape, dtype=dtype, device=device)
        self._v_flat = torch.empty(shape, dtype=dtype, device=device)
        self._k_flat.normal_(generator=generator)
        self._v_flat.normal_(generator=generator)
        self.num_slots = 0
        self.max_len_tokens = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.lengths: IntArray = np.zeros(0, dtype=np.int64)
        self.reshape(num_slots, max_len_tokens)

    @property
    def bytes_total(self) -> int:
        """Bytes held by K and V together."""
        return 2 * self._k_flat.numel() * self._k_flat.element_size()

    def reshape(self, num_slots: int, max_len_tokens: int) -> None:
        """Re-view the buffers as ``num_slots`` slots of ``max_len_tokens`` each.

        Contents are not preserved in any meaningful order; lengths reset to 0.
        """
        if num_slots <= 0 or max_len_tokens <= 0:
            raise ValueError("num_slots and max_len_tokens must be positive")
        if num_slots * max_len_tokens > self.capacity_tokens:
            raise ValueError(
                f"{num_slots} slots x {max_len_tokens} tokens exceed the cache "
                f"capacity of {self.capacity_tokens} tokens"
            )
        n = num_slots * self.num_kv_heads * max_len_tokens * self.head_dim
        view = (num_slots, self.num_kv_heads, max_len_tokens, self.head_dim)
        self.k = [self._k_flat[layer, :n].view(view) for layer in range(self.num_layers)]
        self.v = [self._v_flat[layer, :n].view(view) for layer in range(self.num_layers)]
        self.num_slots = num_slots
        self.max_len_tokens = max_len_tokens
        self.lengths = np.zeros(num_slots, dtype=np.int64)

    def check_room(self, slot: int, num_new_tokens: int) -> None:
        """Raise if ``slot`` cannot take ``num_new_tokens`` more tokens."""
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} outside 0..{self.num_slots - 1}")
        if self.lengths[slot] + num_new_tokens > self.max_len_tokens:
            raise ValueError(
                f"slot {slot} holds {self.lengths[slot]} tokens; {num_new_tokens} more "
                f"exceed max_len_tokens={self.max_len_tokens}"
            )


@dataclass(frozen=True)
class _AttentionPlan:
    """Per-step attention metadata, computed once and shared by all layers."""

    chunks: list[tuple[int, int, int, int, torch.Tensor | None]]  # row0, c, slot, p, mask
    decode_row0: int
    decode_items: list[tuple[int, int]]  # (slot, context length incl. this token)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # Normalise in float32 as Llama does, then return to the activation dtype.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + _NORM_EPS)
    return xf.to(x.dtype) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, "rotate half" convention; x is ``[T, heads, head_dim]``."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class DecoderLayer(nn.Module):
    """Weights of one decoder layer (``bqkv`` only for Qwen2-style QKV bias)."""

    attn_norm: nn.Parameter
    wqkv: nn.Parameter
    bqkv: nn.Parameter | None
    wo: nn.Parameter
    mlp_norm: nn.Parameter
    w_gate_up: nn.Parameter
    w_down: nn.Parameter

    def __init__(self, **weights: nn.Parameter | None) -> None:
        super().__init__()
        for name, weight in weights.items():
            setattr(self, name, weight)


class LlamaModel(nn.Module):
    """Llama-style decoder with fused QKV and gate-up projections."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        seed: int = 0,
        rope_theta: float = 10_000.0,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.dtype = dtype
        self.device_ = torch.device(device)
        self.rope_theta = rope_theta
        gen = torch.Generator(device=self.device_).manual_seed(seed)
        h, hd = spec.hidden_size, spec.head_dim
        q_width = spec.num_attention_heads * hd
        kv_width = spec.num_kv_heads * hd

        def matrix(rows: int, cols: int) -> nn.Parameter:
            w = torch.empty(rows, cols, dtype=dtype, device=self.device_)
            return nn.Parameter(w.normal_(0.0, _INIT_STD, generator=gen), requires_grad=False)

        def ones(n: int) -> nn.Parameter:
            return nn.Parameter(
                torch.ones(n, dtype=dtype, device=self.device_), requires_grad=False
            )

        self.embed = matrix(spec.vocab_size, h)
        qkv_width = q_width + 2 * kv_width
        self.layers = nn.ModuleList(
            DecoderLayer(
                attn_norm=ones(h),
                wqkv=matrix(qkv_width, h),
                bqkv=matrix(1, qkv_width) if spec.attention_qkv_bias else None,
                wo=matrix(h, q_width),
                mlp_norm=ones(h),
                w_gate_up=matrix(2 * spec.intermediate_size, h),
                w_down=matrix(h, spec.intermediate_size),
            )
            for _ in range(spec.num_layers)
        )
        self.final_norm = ones(h)
        self.lm_head = self.embed if spec.tied_embeddings else matrix(spec.vocab_size, h)
        self._rope_cos = torch.empty(0)
        self._rope_sin = torch.empty(0)

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        """The layers, typed (``self.layers`` is an ``nn.ModuleList``)."""
        return cast(list[DecoderLayer], list(self.layers))

    def new_cache(self, num_slots: int, max_len_tokens: int, *, seed: int = 1) -> KVCache:
        """A KV cache on this model's device and dtype (random contents)."""
        gen = torch.Generator(device=self.device_).manual_seed(seed)
        return KVCache(
            self.spec,
            num_slots,
            max_len_tokens,
            dtype=self.dtype,
            device=self.device_,
            generator=gen,
        )

    def _rope(self, positions: torch.Tensor, max_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for ``positions`` as ``[T, 1, head_dim/2]`` (tables grow on demand)."""
        if self._rope_cos.shape[0] <= max_pos:
            size = max(2 * max_pos, 256)
            half = self.spec.head_dim // 2
            inv = self.rope_theta ** (
                -torch.arange(half, dtype=torch.float32, device=self.device_) / half
            )
            angles = torch.outer(torch.arange(size, dtype=torch.float32, device=self.device_), inv)
            self._rope_cos = angles.cos().to(self.dtype)
            self._rope_sin = angles.sin().to(self.dtype)
        return self._rope_cos[positions].unsqueeze(1), self._rope_sin[positions].unsqueeze(1)

    def _plan(
        self, cache: KVCache, prefill: Sequence[PrefillChunk], decode: Sequence[DecodeItem]
    ) -> tuple[_AttentionPlan, list[int], list[int], list[int], list[int]]:
        """Host-side bookkeeping: token ids, slot and position per row, sampled rows."""
        used = [c.slot for c in prefill] + [d.slot for d in decode]
        if len(set(used)) != len(used):
            raise ValueError(f"a slot appears twice in one step: {sorted(used)}")
        ids: list[int] = []
        slots: list[int] = []
        positions: list[int] = []
        sample_rows: list[int] = []
        chunks: list[tuple[int, int, int, int, torch.Tensor | None]] = []
        for chunk in prefill:
            c = len(chunk.token_ids)
            cache.check_room(chunk.slot, c)
            p = int(cache.lengths[chunk.slot])
            row0 = len(ids)
            ids.extend(int(t) for t in chunk.token_ids)
            slots.extend([chunk.slot] * c)
            positions.extend(range(p, p + c))
            mask = None
            if p > 0:  # query i (position p + i) sees keys 0..p + i
                q_pos = torch.arange(p, p + c, device=self.device_).unsqueeze(1)
                mask = torch.arange(p + c, device=self.device_).unsqueeze(0) <= q_pos
            chunks.append((row0, c, chunk.slot, p, mask))
            if chunk.sample:
                sample_rows.append(row0 + c - 1)
        decode_row0 = len(ids)
        decode_items: list[tuple[int, int]] = []
        for item in decode:
            cache.check_room(item.slot, 1)
            p = int(cache.lengths[item.slot])
            sample_rows.append(len(ids))
            ids.append(item.token_id)
            slots.append(item.slot)
            positions.append(p)
            decode_items.append((item.slot, p + 1))
        plan = _AttentionPlan(chunks, decode_row0, decode_items)
        return plan, ids, slots, positions, sample_rows

    def _attention(
        self, layer: int, q: torch.Tensor, cache: KVCache, plan: _AttentionPlan
    ) -> torch.Tensor:
        """Attention output ``[T, heads * head_dim]`` for packed queries ``[T, heads, hd]``."""
        spec = self.spec
        outs = []
        for row0, c, slot, p, mask in plan.chunks:
            qc = q[row0 : row0 + c].transpose(0, 1).unsqueeze(0)  # [1, H, c, hd]
            kc = cache.k[layer][slot : slot + 1, :, : p + c]  # a view: no copy
            vc = cache.v[layer][slot : slot + 1, :, : p + c]
            o = F.scaled_dot_product_attention(
                qc, kc, vc, attn_mask=mask, is_causal=mask is None, enable_gqa=True
            )
            outs.append(o[0].transpose(0, 1).reshape(c, -1))
        if plan.decode_items:
            num = len(plan.decode_items)
            group = spec.num_attention_heads // spec.num_kv_heads
            # Query heads of one KV head act as `group` query rows: plain SDPA, no GQA path.
            qd = q[plan.decode_row0 :].view(num, spec.num_kv_heads, group, spec.head_dim)
            # One attention per sequence over a view of its own slot, as paged-attention
            # kernels do: the work is proportional to the sum of the contexts (what the
            # cost model prices), not to batch size x longest context, which gathering
            # and padding the slots would cost (~1.7x at batch 32 with mixed lengths).
            k_cache, v_cache = cache.k[layer], cache.v[layer]
            for i, (slot, length) in enumerate(plan.decode_items):
                o = F.scaled_dot_product_attention(
                    qd[i], k_cache[slot, :, :length], v_cache[slot, :, :length]
                )
                outs.append(o.reshape(1, -1))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)

    @torch.inference_mode()
    def forward_step(
        self,
        cache: KVCache,
        prefill: Sequence[PrefillChunk] = (),
        decode: Sequence[DecodeItem] = (),
        *,
        sampling: SamplingParams = GREEDY,
        generator: torch.Generator | None = None,
        return_logits: bool = False,
    ) -> StepOutput:
        """Run one engine step, write its KV, sample (``calibration.sampling.sample``,
        drawing from ``generator`` on the model's device), and advance cache lengths."""
        if not prefill and not decode:
            return StepOutput([], None)
        spec = self.spec
        plan, ids, slots, positions, sample_rows = self._plan(cache, prefill, decode)
        dev, long = self.device_, torch.long
        ids_t = torch.tensor(ids, dtype=long, device=dev)
        slots_t = torch.tensor(slots, dtype=long, device=dev)
        pos_t = torch.tensor(positions, dtype=long, device=dev)
        cos, sin = self._rope(pos_t, max(positions))
        q_width = spec.num_attention_heads * spec.head_dim
        kv_width = spec.num_kv_heads * spec.head_dim
        x = self.embed[ids_t]
        for i, layer in enumerate(self.decoder_layers):
            qkv = F.linear(_rms_norm(x, layer.attn_norm), layer.wqkv)
            if layer.bqkv is not None:
                qkv = qkv + layer.bqkv
            q, k, v = torch.split(qkv, [q_width, kv_width, kv_width], dim=-1)
            q = _rotate(q.view(-1, spec.num_attention_heads, spec.head_dim), cos, sin)
            k = _rotate(k.view(-1, spec.num_kv_heads, spec.head_dim), cos, sin)
            cache.k[i][slots_t, :, pos_t] = k  # new keys and values at (slot, position)
            cache.v[i][slots_t, :, pos_t] = v.view(-1, spec.num_kv_heads, spec.head_dim)
            x = x + F.linear(self._attention(i, q, cache, plan), layer.wo)
            gate, up = F.linear(_rms_norm(x, layer.mlp_norm), layer.w_gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.w_down)
        for chunk in prefill:  # the step's new tokens now count as cached
            cache.lengths[chunk.slot] += len(chunk.token_ids)
        for item in decode:
            cache.lengths[item.slot] += 1
        if not sample_rows:  # only non-final prefill chunks: nothing to sample
            return StepOutput([], None)
        rows_t = torch.tensor(sample_rows, dtype=long, device=dev)
        logits = F.linear(_rms_norm(x[rows_t], self.final_norm), self.lm_head).float()
        out = sample(logits, sampling, generator)  # ids on the host (the engine's stop checks)
        return StepOutput(out, logits if return_logits else None)
