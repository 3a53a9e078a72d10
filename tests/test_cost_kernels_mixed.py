"""Mixed attention: a profile prices a prefill+decode step as one varlen kernel.

The profile (``tests/data/kernels/profile``) times one layer's attention over
one prefill chunk beside ``n`` decodes on a 4-D lattice; ``KernelCost`` looks a
mixed step up there, at its own shape, instead of adding a pure prefill and a
pure decode kernel.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.cost.base import StepShape
from sim.cost.kernels.artifact import (
    KernelArtifact,
    load_kernel_artifact,
    resolve_kernel_artifact,
)
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.grid import extrapolate_holes, interpolate_holes
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.tables import MIXED_AXES, MixedAttention, mixed_attention_grids
from sim.errors import ConfigError
from sim.hardware.specs import load_architecture

DATA = Path(__file__).parent / "data" / "kernels"
PROFILE = profile_artifact(DATA / "profile" / "bf16" / "tp1")
TABLE = PROFILE.tables["mixed_attention"]
LLAMA = load_architecture("llama-3.1-8b")
SHIPPED = ("rtx4090-vllm-0.19.0-llama-3.1-8b-tp1", "rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1")


def timed(pc: int, kp: int, nd: int, kv: int) -> float:
    """The profile's row at (prefill chunk, cached prefill, decodes, decode KV)."""
    rows = TABLE
    for column, value in zip(MIXED_AXES, (pc, kp, nd, kv), strict=True):
        rows = rows[rows[column] == value]
    assert len(rows) == 1, (pc, kp, nd, kv)
    return float(rows["latency_s"].iloc[0])


def every_row_is_returned(table: pd.DataFrame) -> None:
    grids = mixed_attention_grids_of(table)
    assert grids.mixed is not None
    points = table[list(MIXED_AXES)].to_numpy(np.float64)
    for (pc, kp, nd, kv), latency_s in zip(points, table["latency_s"], strict=True):
        assert grids.mixed(pc, kp, nd, kv) == latency_s
        if nd == 0:
            assert grids.prefill(pc, kp) == latency_s
        if pc == 0:
            assert grids.decode(nd, kv) == latency_s


def mixed_attention_grids_of(table: pd.DataFrame) -> MixedAttention:
    return mixed_attention_grids(KernelArtifact(PROFILE.provenance, {"mixed_attention": table}))


def test_the_grid_returns_every_timed_row_at_its_lattice_point() -> None:
    every_row_is_returned(TABLE)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_profiles_grids_return_every_timed_row(name: str) -> None:
    # The RTX PRO 6000 profile interleaves two lattices (x2 and x1.5 spacing): the
    # union grid has holes, filled without moving any timed point.
    artifact = load_kernel_artifact(resolve_kernel_artifact(name, None))
    every_row_is_returned(artifact.tables["mixed_attention"])


def test_a_mixed_step_costs_the_grids_value_not_the_sum_of_pure_kernels() -> None:
    cost = KernelCost(LLAMA, PROFILE)
    # One 128-token chunk after 16 cached, beside 8 decodes of 1024 cached tokens each
    # (context 1025: the token being computed is not in the profile's KV).
    shape = StepShape.build(prefill_chunks=[(128, 16)], decode_context_tokens=[1025] * 8)
    one_kernel = timed(128, 16, 8, 1024)
    two_kernels = timed(128, 16, 0, 0) + timed(0, 0, 8, 1024)
    assert cost.attention_s(shape) == one_kernel
    assert one_kernel > 1.2 * two_kernels  # the data's point: the sum is short
    expected = 32 * (cost.dense_layer_s(136) + one_kernel) + cost.per_step_s(136, 9)
    assert cost.step_s(shape) == pytest.approx(expected, rel=1e-12)


def test_a_mixed_step_between_lattice_points_is_interpolated_linearly() -> None:
    cost = KernelCost(LLAMA, PROFILE)
    # Decode KV 576 = halfway between 128 and 1024, everything else on the lattice.
    shape = StepShape.build(prefill_chunks=[(128, 16)], decode_context_tokens=[577] * 8)
    expected = (timed(128, 16, 8, 128) + timed(128, 16, 8, 1024)) / 2
    assert cost.attention_s(shape) == pytest.approx(expected, rel=1e-12)
    # Mean decode KV: 8 decodes at 128 and 1024 cached tokens price as 8 at 576.
    uneven = StepShape.build(prefill_chunks=[(128, 16)], decode_context_tokens=[129, 1025] * 4)
    assert cost.mixed_attention_s(uneven) == pytest.approx(expected, rel=1e-12)


def test_each_further_prefill_chunk_adds_its_pure_prefill_time() -> None:
    cost = KernelCost(LLAMA, PROFILE)
    shape = StepShape.build(prefill_chunks=[(128, 16)] * 3, decode_context_tokens=[1025] * 8)
    expected = timed(128, 16, 8, 1024) + 2 * timed(128, 16, 0, 0)
    assert cost.attention_s(shape) == pytest.approx(expected, rel=1e-12)
    # Unequal chunks price as equal ones of their mean (a shape keeps only sums).
    unequal = StepShape.build(prefill_chunks=[(16, 0), (240, 32)], decode_context_tokens=[1025] * 8)
    equal = StepShape.build(prefill_chunks=[(128, 16)] * 2, decode_context_tokens=[1025] * 8)
    assert cost.attention_s(unequal) == cost.attention_s(equal)


def test_pure_steps_use_the_pure_rows() -> None:
    cost = KernelCost(LLAMA, PROFILE)
    prefill = StepShape.build(prefill_chunks=[(2048, 1024)] * 2)
    assert cost.attention_s(prefill) == 2 * timed(2048, 1024, 0, 0)
    decode = StepShape.build(decode_context_tokens=[17] * 64)
    assert cost.attention_s(decode) == timed(0, 0, 64, 16)


def test_an_axis_that_does_not_apply_repeats_the_value_without_it() -> None:
    grids = mixed_attention_grids(PROFILE)
    mixed = grids.mixed
    assert mixed is not None
    # No decode: its KV length does not matter. No prefill: nor does its cache.
    # (Off the lattice, equal corners blend to their value up to rounding.)
    assert mixed(128.0, 1024.0, 0.0, 5000.0) == pytest.approx(timed(128, 1024, 0, 0), rel=1e-12)
    assert mixed(0.0, 5000.0, 8.0, 1024.0) == pytest.approx(timed(0, 0, 8, 1024), rel=1e-12)
    # Fewer prefill tokens than the first timed chunk cost that chunk.
    assert mixed(8.0, 16.0, 0.0, 0.0) == pytest.approx(timed(16, 16, 0, 0), rel=1e-12)
    # A decode with no cached token (never scheduled) costs the first timed KV.
    assert mixed(128.0, 16.0, 8.0, 0.0) == timed(128, 16, 8, 16)


def test_a_prefill_beside_more_decodes_than_timed_continues_the_line() -> None:
    # The profile has mixed rows up to 64 decodes and pure decode rows up to 256
    # (a shot's sequences stay under max_num_seqs): affine in the decode count.
    mixed = mixed_attention_grids(PROFILE).mixed
    assert mixed is not None
    v8, v64 = timed(128, 16, 8, 1024), timed(128, 16, 64, 1024)
    expected = v64 + (v64 - v8) * (256 - 64) / (64 - 8)
    assert mixed(128.0, 16.0, 256.0, 1024.0) == pytest.approx(expected, rel=1e-12)


def test_interpolate_holes_fills_between_timed_points_only() -> None:
    nan = np.nan
    values = np.array([[nan, 1.0, nan, 3.0, nan], [2.0, nan, nan, nan, 6.0]])
    axis = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
    filled = interpolate_holes(values, axis, 1)
    assert filled[0, 2] == pytest.approx(1.0 + 2.0 * (2.0 - 1.0) / (4.0 - 1.0))
    assert np.isnan(filled[0, 0]) and np.isnan(filled[0, 4])  # outside: left alone
    assert filled[1].tolist() == [2.0, 2.5, 3.0, 4.0, 6.0]
    assert np.isnan(values[0, 2])  # the input is not modified


def test_extrapolate_holes_continues_the_last_two_points_never_downwards() -> None:
    nan = np.nan
    values = np.array([[1.0, 3.0, nan, nan], [4.0, 2.0, nan, nan], [nan, 5.0, nan, nan]])
    axis = np.array([1.0, 2.0, 4.0, 8.0])
    filled = extrapolate_holes(values, axis, 1)
    assert filled[0].tolist() == [1.0, 3.0, 7.0, 15.0]
    assert filled[1].tolist() == [4.0, 2.0, 2.0, 2.0]  # a falling line stays flat
    assert filled[2].tolist() == [5.0, 5.0, 10.0, 20.0]  # one point: proportional


def test_a_profile_without_pure_rows_is_refused_in_one_line() -> None:
    mixed_only = TABLE[(TABLE["prefill_chunk_tokens"] > 0) & (TABLE["num_decode_seqs"] > 0)]
    with pytest.raises(ConfigError, match="needs pure prefill rows"):
        mixed_attention_grids_of(mixed_only.reset_index(drop=True))


def test_a_profile_with_only_pure_rows_adds_the_two_kernels() -> None:
    pure = TABLE[(TABLE["prefill_chunk_tokens"] == 0) | (TABLE["num_decode_seqs"] == 0)]
    grids = mixed_attention_grids_of(pure.reset_index(drop=True))
    assert grids.mixed is None
    artifact = KernelArtifact(
        PROFILE.provenance, {**PROFILE.tables, "mixed_attention": pure.reset_index(drop=True)}
    )
    cost = KernelCost(LLAMA, artifact)
    shape = StepShape.build(prefill_chunks=[(128, 16)], decode_context_tokens=[1025] * 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cost.attention_s(shape) == timed(128, 16, 0, 0) + timed(0, 0, 8, 1024)
