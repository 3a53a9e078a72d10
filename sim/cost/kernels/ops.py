"""The operators one decoder layer runs in vLLM, with their shapes per GPU.

vLLM shards a layer over ``tp`` GPUs Megatron-style (``docs/kernels.md``). A GEMM
here is ``(n, k)``: ``m`` tokens of width ``k`` in, width ``n`` out. A gated MLP
(Llama) runs ``gate_up_proj`` (``2 x intermediate`` wide) then ``down_proj``; a
non-gated one (GPT-2, OPT) ``fc1`` then ``fc2``. Biases are fused into the GEMMs.

``ProfileDense`` is a layer's dense part from a per-layer profile instead: the
sum of every op it lists (vLLM's layerwise profile sums modules of one repr into
one row per call: the two RMSNorms are one ``layernorm`` row, Qwen3's ``q_norm``
and ``k_norm`` one ``qk_norm`` row, each hence counted twice) but the
once-per-step ones; an MoE layer read at the expected distinct experts its tokens
activate under balanced routing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.tables import moe_layer_grid, op_grid
from sim.cost.kernels.terms import total_s
from sim.hardware.parallel import kv_heads_per_gpu
from sim.hardware.specs import MlpKind, ModelSpec

# A dense MLP's two GEMMs, in order, by the architecture's MLP kind.
MLP_OPS: Mapping[MlpKind, tuple[str, str]] = MappingProxyType(
    {"gated": ("gate_up_proj", "down_proj"), "non_gated": ("fc1", "fc2")}
)


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


def layer_shapes(arch: ModelSpec, tp: int = 1) -> LayerShapes:
    """The GEMM and attention shapes of ``arch`` on each of ``tp`` GPUs (an MoE
    layer's experts are one fused kernel, the ``moe`` table: only its router and
    shared expert are GEMMs here)."""
    hidden = arch.hidden_size
    kv_heads = kv_heads_per_gpu(arch, tp)
    heads = _split(arch.num_attention_heads, tp, "num_attention_heads")
    qkv_n = (heads + 2 * kv_heads) * arch.head_dim
    gemms = {
        "qkv_proj": (qkv_n, hidden),
        "o_proj": (hidden, heads * arch.head_dim),
    }
    if arch.moe is None:
        inter = _split(arch.intermediate_size, tp, "intermediate_size")
        up, down = MLP_OPS[arch.mlp]
        gemms[up] = (2 * inter if arch.mlp == "gated" else inter, hidden)
        gemms[down] = (hidden, inter)
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


# Ops a layer runs more than once per profiled row (module docstring).
PROFILE_OP_COUNTS = {"layernorm": 2, "qk_norm": 2}
PROFILE_STEP_OPS = ("embedding", "final_layernorm")
# Ops a profile must have: attention projections, and the MLP of a dense model.
REQUIRED_OPS = ("qkv_proj", "o_proj")


def expected_active_experts(num_tokens: float, num_experts: int, top_k: int) -> float:
    """Mean number of distinct experts ``num_tokens`` tokens activate (uniform routing)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


class ProfileDense:
    """Per-layer and per-step dense time (seconds) from a profile, by tokens."""

    __slots__ = ("_layer_ops", "_moe", "_moe_shape", "_step_names", "_step_ops", "op_names")

    def __init__(self, artifact: KernelArtifact, arch: ModelSpec, with_moe: bool = True) -> None:
        """``with_moe=False`` leaves an MoE model's experts out (expert parallelism
        prices them per GPU of its group: ``expert_parallel``)."""
        required = REQUIRED_OPS + (() if arch.moe is not None else MLP_OPS[arch.mlp])
        for op in required:
            op_grid(artifact, "layer_ops", op)  # ConfigError naming the missing op
        listed = sorted(set(artifact.tables["layer_ops"]["op"]) - set(PROFILE_STEP_OPS))
        self.op_names = tuple(listed)
        self._layer_ops = [
            (op_grid(artifact, "layer_ops", op), PROFILE_OP_COUNTS.get(op, 1)) for op in listed
        ]
        present = set(artifact.tables["layer_ops"]["op"])
        self._step_names = tuple(op for op in PROFILE_STEP_OPS if op in present)
        self._step_ops = [op_grid(artifact, "layer_ops", op) for op in self._step_names]
        self._moe: Grid | None = None
        self._moe_shape = (1, 1)
        if arch.moe is not None and with_moe:
            self._moe = moe_layer_grid(artifact)
            self._moe_shape = (arch.moe.num_experts, arch.moe.top_k)

    def layer_s(self, num_tokens: float) -> float:
        """One layer's profiled ops (MoE included) for ``num_tokens`` tokens."""
        return total_s(self.layer_terms(num_tokens))

    def layer_terms(self, num_tokens: float) -> list[tuple[str, float]]:
        """``layer_s``'s terms by op name (the MoE as ``moe``), for a per-op breakdown."""
        terms = [
            (op, count * grid(num_tokens))
            for op, (grid, count) in zip(self.op_names, self._layer_ops, strict=True)
        ]
        if self._moe is not None:
            experts, top_k = self._moe_shape
            terms.append(
                ("moe", self._moe(num_tokens, expected_active_experts(num_tokens, experts, top_k)))
            )
        return terms

    def step_terms(self, num_tokens: float) -> list[tuple[str, float]]:
        """``step_s``'s terms by op name."""
        return [
            (op, grid(num_tokens))
            for op, grid in zip(self._step_names, self._step_ops, strict=True)
        ]

    def step_s(self, num_tokens: float) -> float:
        """Once-per-step ops (embedding, final norm) for ``num_tokens`` tokens."""
        return total_s(self.step_terms(num_tokens))
