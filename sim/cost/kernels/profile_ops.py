"""The dense part of a layer from a per-layer profile (``layer_ops``, ``moe_layer`` tables).

A profile times every op of one decoder layer by token count, so a layer is
the sum of all the ops it lists (the two RMSNorms of a layer are one
``layernorm`` op timed once, hence counted twice), except the once-per-step
``embedding`` and ``final_layernorm``. Which ops appear depends on the
architecture (Qwen3 adds ``qk_norm``; an MoE layer has no gate/up/down).

MoE layers (``moe_layer``: tokens x distinct experts activated): with ``T``
tokens each routed to ``k`` of ``E`` experts, balanced routing activates on
average ``E * (1 - (1 - k / E) ** T)`` distinct experts; the layer's time is
read at that point.
"""

from __future__ import annotations

from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.tables import moe_layer_grid, op_grid
from sim.hardware.specs import ModelArchitecture

# Ops a layer runs more than once per profiled row.
PROFILE_OP_COUNTS = {"layernorm": 2}
PROFILE_STEP_OPS = ("embedding", "final_layernorm")
# Ops a profile must have: attention projections, and the MLP of a dense model.
REQUIRED_OPS = ("qkv_proj", "o_proj")
REQUIRED_DENSE_OPS = ("gate_up_proj", "down_proj")


def expected_active_experts(num_tokens: float, num_experts: int, top_k: int) -> float:
    """Mean number of distinct experts ``num_tokens`` tokens activate (uniform routing)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


class ProfileDense:
    """Per-layer and per-step dense time (seconds) from a profile, by tokens."""

    __slots__ = ("_layer_ops", "_moe", "_moe_shape", "_step_ops", "op_names")

    def __init__(self, artifact: KernelArtifact, arch: ModelArchitecture) -> None:
        required = REQUIRED_OPS + (() if arch.moe is not None else REQUIRED_DENSE_OPS)
        for op in required:
            op_grid(artifact, "layer_ops", op)  # ConfigError naming the missing op
        listed = sorted(set(artifact.tables["layer_ops"]["op"]) - set(PROFILE_STEP_OPS))
        self.op_names = tuple(listed)
        self._layer_ops = [
            (op_grid(artifact, "layer_ops", op), PROFILE_OP_COUNTS.get(op, 1)) for op in listed
        ]
        self._step_ops = [
            op_grid(artifact, "layer_ops", op)
            for op in PROFILE_STEP_OPS
            if op in set(artifact.tables["layer_ops"]["op"])
        ]
        self._moe: Grid | None = None
        self._moe_shape = (1, 1)
        if arch.moe is not None:
            self._moe = moe_layer_grid(artifact)
            self._moe_shape = (arch.moe.num_experts, arch.moe.top_k)

    def layer_s(self, num_tokens: float) -> float:
        """One layer's profiled ops (MoE included) for ``num_tokens`` tokens."""
        total = 0.0
        for grid, count in self._layer_ops:
            total += count * grid(num_tokens)
        if self._moe is not None:
            experts, top_k = self._moe_shape
            total += self._moe(num_tokens, expected_active_experts(num_tokens, experts, top_k))
        return total

    def step_s(self, num_tokens: float) -> float:
        """Once-per-step ops (embedding, final norm) for ``num_tokens`` tokens."""
        total = 0.0
        for grid in self._step_ops:
            total += grid(num_tokens)
        return total
