"""The memory-bound ops of a forward pass, priced from the bytes they move.

GEMM and attention tables leave out the kernels that only stream tensors
through memory: per layer the two fused residual add + RMSNorm, the MLP's
activation, rotary embedding and the KV-cache write; per step the embedding
lookup, the final norm and (when no table times it) the sampler. As
aiconfigurator prices them, each is

    op_s = bytes moved / (memory bandwidth x efficiency) + MEMORY_OP_LATENCY_S

with the ``HardwareSpec``'s datasheet bandwidth and efficiency. The bytes each
op moves per token, and how these estimates compare with the per-layer
profiles that time the same ops: ``docs/kernels.md``, "Memory-bound ops".
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.kernels.ops import MLP_OPS, LayerShapes
from sim.cost.kernels.terms import total_s
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    SOURCE_GPU_NAMES,
    HardwareSpec,
    ModelSpec,
)

# aiconfigurator-core 0.12.0's constant per memory-bound kernel
# (systems/<gpu>.yaml mem_empirical_constant_latency: 3 µs on every GPU).
MEMORY_OP_LATENCY_S = 3e-6
# The sampler: bf16 logits read (2 B), cast to fp32 and written (4 B), read again
# (4 B); the LLMServingSim profiles' sampler tables (RTX PRO 6000, RTX 4090) show 9
# to 10 B per logit at 0.8 of the datasheet bandwidth, and 25 µs for one sequence
# (several small kernels). Estimates.
SAMPLER_BYTES_PER_LOGIT = 10.0
SAMPLER_FIXED_S = 25e-6

# Names of the terms, as KernelCost.breakdown_s reports them.
LAYER_OPS = ("add_norm", "activation", "rotary_emb", "kv_cache_write")
STEP_OPS = ("embedding", "final_norm", "sampler")


def activation_bytes_per_token(width: int, gated: bool, dtype_bytes: float) -> float:
    """Bytes one token's MLP activation moves: gated (SiLU·mul) reads gate and
    up (``2 width``) and writes ``width``; plain (GELU, ReLU) reads and writes ``width``."""
    return (3.0 if gated else 2.0) * width * dtype_bytes


def mlp_activation(shapes: LayerShapes) -> tuple[int, bool] | None:
    """(width per GPU, gated) of the activation a layer runs outside the fused MoE
    kernel (the dense MLP's or a shared expert's), or None (it is inside the kernel)."""
    gemms = shapes.gemms
    for up, down in (("gate_up_proj", "down_proj"), ("shared_gate_up_proj", "shared_down_proj")):
        if up in gemms:
            return gemms[down][1], True
    up = MLP_OPS["non_gated"][0]  # fc1, as layer_shapes names a plain MLP's first GEMM
    if up in gemms:
        return gemms[up][0], False
    return None


def hardware_for_gpu(gpu: str) -> HardwareSpec | None:
    """The first hardware preset (in preset order) whose kernel-table names include ``gpu``."""
    for name, spec in HARDWARE_PRESETS.items():
        if gpu in SOURCE_GPU_NAMES.get(name, frozenset()):
            return spec
    return None


@dataclass(frozen=True, slots=True)
class MemoryOps:
    """Per-layer and per-step memory-bound ops of one model on one GPU (seconds)."""

    bytes_per_s: float  # effective: datasheet bandwidth x efficiency
    hidden_size: int
    qk_width: int  # query plus key width per GPU (heads x head_dim)
    kv_width: int  # key width per GPU (= value width)
    activation: tuple[int, bool] | None  # (MLP width per GPU, gated), see mlp_activation
    vocab_size: int
    activation_dtype_bytes: float = 2.0
    kv_dtype_bytes: float = 2.0

    @staticmethod
    def build(
        arch: ModelSpec,
        shapes: LayerShapes,
        hardware: HardwareSpec,
        activation_dtype_bytes: float = 2.0,
        kv_dtype_bytes: float = 2.0,
    ) -> MemoryOps:
        """``arch``'s ops at the per-GPU ``shapes``, on ``hardware``'s effective bandwidth."""
        return MemoryOps(
            bytes_per_s=hardware.effective_bytes_per_s,
            hidden_size=arch.hidden_size,
            qk_width=(shapes.num_heads + shapes.num_kv_heads) * shapes.head_dim,
            kv_width=shapes.num_kv_heads * shapes.head_dim,
            activation=mlp_activation(shapes),
            vocab_size=arch.vocab_size,
            activation_dtype_bytes=activation_dtype_bytes,
            kv_dtype_bytes=kv_dtype_bytes,
        )

    def op_s(self, num_bytes: float) -> float:
        """One memory-bound kernel moving ``num_bytes``."""
        return num_bytes / self.bytes_per_s + MEMORY_OP_LATENCY_S

    def layer_terms(self, num_tokens: float) -> tuple[tuple[str, float], ...]:
        """One layer's memory-bound ops for ``num_tokens`` tokens, named as ``LAYER_OPS``."""
        a, t = self.activation_dtype_bytes, num_tokens
        add_norm = 2.0 * self.op_s(t * 4.0 * self.hidden_size * a)
        if self.activation is None:
            activation = 0.0
        else:
            width, gated = self.activation
            activation = self.op_s(t * activation_bytes_per_token(width, gated, a))
        rotary = self.op_s(t * 2.0 * self.qk_width * a)
        kv_write = self.op_s(t * 2.0 * self.kv_width * (a + self.kv_dtype_bytes))
        return (
            ("add_norm", add_norm),
            ("activation", activation),
            ("rotary_emb", rotary),
            ("kv_cache_write", kv_write),
        )

    def layer_s(self, num_tokens: float) -> float:
        """Sum of ``layer_terms``."""
        return total_s(self.layer_terms(num_tokens))

    def step_terms(
        self, num_tokens: float, num_seqs: float, with_sampler: bool
    ) -> tuple[tuple[str, float], ...]:
        """Once-per-step ops, named as ``STEP_OPS``; the sampler only ``with_sampler``
        (no table times it) and when some sequence gets logits."""
        a = self.activation_dtype_bytes
        embedding = self.op_s(num_tokens * 2.0 * self.hidden_size * a)
        final_norm = self.op_s(num_tokens * 4.0 * self.hidden_size * a)
        sampler = 0.0
        if with_sampler and num_seqs > 0:
            logits_bytes = num_seqs * self.vocab_size * SAMPLER_BYTES_PER_LOGIT
            sampler = SAMPLER_FIXED_S + logits_bytes / self.bytes_per_s
        return (("embedding", embedding), ("final_norm", final_norm), ("sampler", sampler))

    def step_s(self, num_tokens: float, num_seqs: float, with_sampler: bool) -> float:
        """Sum of ``step_terms``."""
        return total_s(self.step_terms(num_tokens, num_seqs, with_sampler))
