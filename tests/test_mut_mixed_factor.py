"""The mixed-decode factor's floor at 0 (``sim.cost.kernels.mixed_factor``), issue 39's
mutation check (``benchmarks/mutants.py``: ``mixed-factor-unfloored``).

At some points of the RTX 4090 profile's lattice the one varlen kernel timed
*faster* than its prefill chunk alone: a few decodes hide in the chunk's tail and
the difference is noise around 0. The factor there is floored at 0 (the decodes
cost nothing), never negative (they would make the prefill cheaper).
"""

from __future__ import annotations

import pytest

from sim.cost.kernels.artifact import load_cached, resolve_kernel_artifact
from sim.cost.kernels.mixed_factor import (
    REFERENCE,
    REFERENCE_HARDWARE,
    balance_flops_per_byte,
    factor_from_profile,
    transferred_factor,
)
from sim.cost.kernels.tables import mixed_attention_grids
from sim.hardware.specs import hardware_preset


def _hidden_points() -> list[tuple[float, float, float, float]]:
    """Lattice points (chunk, cached, decodes, kv) where the mixed kernel timed below
    its prefill alone, read from the profile's own grids."""
    grids = mixed_attention_grids(load_cached(resolve_kernel_artifact(REFERENCE, None)))
    assert grids.mixed is not None
    chunks, cached_axis, decodes, kvs = grids.mixed.axes
    return [
        (c, p, n, kv)
        for c in chunks[1:]
        for p in cached_axis
        for n in decodes[1:]
        for kv in kvs[1:]
        if grids.mixed(c, p, n, kv) < grids.prefill(c, p)
    ]


def test_the_profile_has_points_where_the_decodes_hide() -> None:
    assert len(_hidden_points()) > 10  # the premise: 367 of 9,504 today


def test_where_decodes_hide_in_the_chunk_they_cost_nothing_not_less() -> None:
    factor = factor_from_profile(load_cached(resolve_kernel_artifact(REFERENCE, None)), REFERENCE)
    for point in _hidden_points():
        assert factor(*point) == 0.0, point


def test_carried_to_another_gpu_a_hidden_point_keeps_one_minus_the_balance_ratio() -> None:
    # factor = 1 + (0 - 1) * scale with scale = the 4090's FLOP/B balance over the target's.
    pro = hardware_preset("rtx-pro-6000")
    scale = balance_flops_per_byte(hardware_preset(REFERENCE_HARDWARE)) / balance_flops_per_byte(
        pro
    )
    assert 0.0 < scale < 1.0  # (0.59: the PRO 6000 is the lower-balance GPU)
    factor = transferred_factor(pro)
    for point in _hidden_points()[:50]:
        assert factor(*point) == pytest.approx(1.0 - scale, rel=1e-9), point
