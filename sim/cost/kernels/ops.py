"""The operators one decoder layer runs in vLLM, with their shapes per GPU.

vLLM shards a layer over ``tp`` GPUs Megatron-style: the fused QKV and the
fused gate+up projections are column-parallel (output width / tp), the output
and down projections row-parallel (input width / tp) and followed by an
all-reduce of the activations; attention runs ``heads / tp`` query heads and
``max(kv_heads / tp, 1)`` KV heads per GPU (KV heads are replicated past
``tp = kv_heads``); the LM head is vocab-parallel (``vocab / tp`` columns).
A GEMM here is ``(n, k)``: ``m`` tokens of width ``k`` in, width ``n`` out.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.hardware.specs import ModelArchitecture


@dataclass(frozen=True, slots=True)
class LayerShapes:
    """Per-GPU shapes of one layer and of the LM head."""

    # name -> (n, k) of each dense GEMM in one layer, in execution order.
    gemms: dict[str, tuple[int, int]]
    lm_head: tuple[int, int]
    num_heads: int
    num_kv_heads: int
    head_dim: int


def _split(width: int, tp: int, what: str) -> int:
    if width % tp:
        raise ValueError(f"{what} {width} is not divisible by tensor_parallel_size {tp}")
    return width // tp


def layer_shapes(arch: ModelArchitecture, tp: int = 1) -> LayerShapes:
    """The GEMM and attention shapes of ``arch`` on each of ``tp`` GPUs.

    MoE layers list only the router here (``router``: n = experts); the
    experts are one fused MoE kernel (``moe`` table), plus the shared
    expert's gate+up and down GEMMs when the model has one.
    """
    hidden = arch.hidden_size
    kv_heads = max(arch.num_kv_heads // tp, 1)
    heads = _split(arch.num_attention_heads, tp, "num_attention_heads")
    qkv_n = (heads + 2 * kv_heads) * arch.head_dim
    gemms = {
        "qkv_proj": (qkv_n, hidden),
        "o_proj": (hidden, heads * arch.head_dim),
    }
    if arch.moe is None:
        inter = _split(arch.intermediate_size, tp, "intermediate_size")
        gemms["gate_up_proj"] = (2 * inter, hidden)
        gemms["down_proj"] = (hidden, inter)
    else:
        # The router is replicated: every GPU scores every expert.
        gemms["router"] = (arch.moe.num_experts, hidden)
        shared = arch.moe.shared_expert_intermediate_size
        if shared is not None:
            shared_tp = _split(shared, tp, "shared_expert_intermediate_size")
            gemms["shared_gate_up_proj"] = (2 * shared_tp, hidden)
            gemms["shared_down_proj"] = (hidden, shared_tp)
    vocab = -(-arch.vocab_size // tp)  # vLLM pads the vocabulary to a multiple of tp
    return LayerShapes(
        gemms=gemms,
        lm_head=(vocab, hidden),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=arch.head_dim,
    )


def prefill_chunk(num_seqs: int, num_tokens: int, kv_read_tokens: int) -> tuple[float, float]:
    """(chunk, cached) tokens of one of ``num_seqs`` equal chunks.

    A step shape keeps only sums, so its prefill is priced as ``num_seqs``
    equal chunks of ``num_tokens / num_seqs`` new tokens after
    ``kv_read_tokens / num_seqs - chunk`` cached ones.
    """
    chunk = num_tokens / num_seqs
    return chunk, max(kv_read_tokens / num_seqs - chunk, 0.0)
