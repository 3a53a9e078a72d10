"""A mixed step's decodes in FlashAttention-2's varlen kernel, for pure-kernel tables.

Beside a prefill chunk, FA2's one varlen kernel runs each decode's one-query
row through the prefill path, so a mixed step's decodes cost more than the
pure decode kernel that aiconfigurator's tables time. ``MixedDecodeFactor``
carries the slowdown a profile measured (``REFERENCE``, the RTX 4090's) to
tables whose attention is FA2 (``applies_to``), scaled by the GPUs' machine
balance (datasheet FLOP/s per byte/s)::

    factor_ref(c, p, n, kv) = (mixed(c, p, n, kv) - pre(c, p)) / dec(n, kv)       [1]
    factor = 1 + (factor_ref - 1) * balance_ref / balance                      [1]
    attention = prefill_attention + factor * decode_attention                  [s]

on the profile's lattice (a chunk of ``c`` new tokens after ``p`` cached, ``n``
decodes after ``kv`` cached each); ``factor_ref`` floored at 0, a lookup clamped
to the lattice. Why the balance and how well it transfers: ``docs/kernels.md``,
"The attention term". An estimate, and the label says so.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from sim.cost.kernels import price
from sim.cost.kernels.artifact import KernelArtifact, load_cached, resolve_kernel_artifact
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.tables import MIXED_AXES, mixed_attention_grids
from sim.hardware.specs import HardwareSpec, hardware_preset

REFERENCE = "rtx4090-vllm-0.19.0-llama-3.1-8b-tp1"  # a shipped LLMServingSim profile
REFERENCE_HARDWARE = "rtx-4090"  # the GPU it was measured on (its preset)
FA2 = "vllm_flash_attn_fa2"  # aiconfigurator's name of vLLM's FA2 attention variant


def applies_to(artifact: KernelArtifact) -> bool:
    """Whether ``artifact`` times FA2's pure kernels only (no mixed-batch rows)."""
    attention = artifact.provenance.kernels.get("attention", "")
    return attention.startswith(FA2) and not artifact.has("mixed_attention")


class MixedDecodeFactor:
    """The decodes' slowdown in a mixed FA2 kernel (the module docstring), by lookup."""

    __slots__ = ("_flat", "_layout", "_slots", "grid", "label")

    def __init__(self, grid: Grid, label: str) -> None:
        self.grid = grid  # on the profile's lattice (KernelCost lays it out for price)
        # ``price``'s layout of the grid, for ``price.clamped_point_4d`` (the lookup
        # a kernel cost and the compiled loop make: ``price.mixed_decode_factor``).
        self._flat: list[float] = []
        self._layout = [0] * price.LAYOUT_SIZE
        grid.put(self._flat, self._layout, price.MIXED_GRID)
        self._slots = price.grid_4d(self._layout, price.MIXED_GRID)
        self.label = label

    def __call__(self, chunk: float, cached: float, num_decode_seqs: float, kv: float) -> float:
        """The factor at one point of the lattice's axes, each clamped to its last."""
        return price.clamped_point_4d(
            self._flat, self._layout, self._slots, chunk, cached, num_decode_seqs, kv
        )


def balance_flops_per_byte(hardware: HardwareSpec) -> float:
    """Datasheet dense FLOP/s per byte/s of memory bandwidth."""
    return hardware.peak_flops_per_s / hardware.memory_bandwidth_bytes_per_s


def factor_from_profile(
    artifact: KernelArtifact, source: str, balance_scale: float = 1.0
) -> MixedDecodeFactor:
    """The factor a profile with a mixed_attention table measured, its extra over 1
    scaled by ``balance_scale`` (the profiled GPU's balance over the target's)."""
    grids = mixed_attention_grids(artifact)
    assert grids.mixed is not None, f"{source}: no mixed rows"
    axes = grids.mixed.axes
    mixed = grids.mixed.values[1:, :, 1:, 1:]  # the rows with a chunk and decodes
    prefill = grids.prefill.values[:, :, None, None]
    decode = grids.decode.values[None, None, :, :]
    measured = np.maximum((mixed - prefill) / decode, 0.0)
    factor = 1.0 + (measured - 1.0) * balance_scale
    sub_axes = (axes[0][1:], axes[1], axes[2][1:], axes[3][1:])
    label = f"mixed decodes: FA2 varlen factor of {source}"
    if balance_scale != 1.0:
        label += f", extra x{balance_scale:.2f} (FLOP/B balance; transferred estimate)"
    grid = Grid("mixed decode factor", MIXED_AXES, sub_axes, factor)
    return MixedDecodeFactor(grid, label)


def transferred_factor(hardware: HardwareSpec) -> MixedDecodeFactor:
    """``REFERENCE``'s factor carried to ``hardware`` (the module docstring)."""
    scale = balance_flops_per_byte(hardware_preset(REFERENCE_HARDWARE)) / balance_flops_per_byte(
        hardware
    )
    return _transferred(round(scale, 12))


@lru_cache(maxsize=8)
def _transferred(balance_scale: float) -> MixedDecodeFactor:
    artifact = load_cached(resolve_kernel_artifact(REFERENCE, None))
    return factor_from_profile(artifact, REFERENCE, balance_scale)
