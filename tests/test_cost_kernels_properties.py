"""Property tests of the kernel cost model: composition, slicing, round trips, random grids."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from decode_runs import run_prices
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cost.base import StepShape
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.artifact import (
    TABLE_COLUMNS,
    KernelArtifact,
    KernelProvenance,
    load_kernel_artifact,
    save_artifact,
)
from sim.cost.kernels.config import KernelsCostConfig, architecture_for, build_kernels
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.slice import slice_artifact
from sim.errors import ConfigError
from sim.hardware.parallel import link_preset
from sim.hardware.specs import hardware_preset, load_architecture, model_preset

DATA = Path(__file__).parent / "data" / "kernels"
AIC = from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data")
PROFILE = profile_artifact(DATA / "profile" / "bf16" / "tp1")
LLAMA = load_architecture("llama-3.1-8b")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

chunks = st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 16000)), min_size=0, max_size=4)
contexts = st.lists(st.integers(1, 16000), min_size=0, max_size=64)


def quiet(fn, *args):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize(
    "make",
    [
        lambda: KernelCost(LLAMA, AIC),
        lambda: KernelCost(LLAMA, AIC, tensor_parallel_size=2, pipeline_parallel_size=2),
        lambda: KernelCost(LLAMA, PROFILE),
    ],
    ids=["aic", "aic-tp2-pp2", "profile"],
)
@SETTINGS
@given(prefill=chunks, decode=contexts)
def test_a_step_is_overhead_plus_layers_times_layer_plus_per_step(
    make: Callable[[], KernelCost], prefill: list[tuple[int, int]], decode: list[int]
) -> None:
    cost = make()
    shape = StepShape.build(prefill_chunks=prefill, decode_context_tokens=decode)
    if shape.is_empty:
        assert cost.step_s(shape) == 0.0
        return
    layer = quiet(cost.dense_layer_s, shape.num_tokens) + quiet(cost.attention_s, shape)
    # FA2 tables: decodes beside a chunk slowed by the carried factor (1.0 elsewhere).
    parts = quiet(cost.prefill_attention_s, shape) + quiet(
        cost.decode_attention_s, shape.num_decode_seqs, shape.num_decode_context_tokens
    ) * quiet(cost.mixed_decode_factor, shape)
    if cost._mixed_attn is not None and shape.num_prefill_tokens and shape.num_decode_seqs:
        # A profile prices a mixed step as one varlen kernel, not as the two parts.
        assert quiet(cost.attention_s, shape) == quiet(cost.mixed_attention_s, shape)
    else:
        assert quiet(cost.attention_s, shape) == parts
    seqs = shape.num_prefill_seqs + shape.num_decode_seqs
    expected = cost.arch.num_layers * layer + quiet(cost.per_step_s, shape.num_tokens, seqs)
    assert quiet(cost.step_s, shape) == pytest.approx(expected, rel=1e-12)
    assert quiet(cost.step_s, shape) > 0.0


@SETTINGS
@given(prefill=chunks, decode=contexts, tp=st.sampled_from([1, 2]))
def test_a_slice_prices_its_model_exactly_as_the_full_tables(
    prefill: list[tuple[int, int]], decode: list[int], tp: int
) -> None:
    sliced = SLICED
    shape = StepShape.build(prefill_chunks=prefill, decode_context_tokens=decode)
    full_cost = KernelCost(LLAMA, AIC, tensor_parallel_size=tp)
    slice_cost = KernelCost(LLAMA, sliced, tensor_parallel_size=tp)
    assert quiet(slice_cost.step_s, shape) == quiet(full_cost.step_s, shape)


SLICED = slice_artifact(AIC, LLAMA, (1, 2))


def test_a_slice_refuses_other_models() -> None:
    qwen = load_architecture("qwen3-8b")
    with pytest.raises(ConfigError, match=r"profiled on llama-3\.1-8b, not qwen3-8b"):
        KernelCost(qwen, SLICED)


@SETTINGS
@given(num_seqs=st.integers(1, 256), context=st.integers(1, 100_000))
def test_more_gpus_never_slow_down_the_dense_gemms_of_a_decode_step(
    num_seqs: int, context: int
) -> None:
    one, two = KernelCost(LLAMA, AIC), KernelCost(LLAMA, AIC, tensor_parallel_size=2)
    gemms_one = sum(one.gemm_s(num_seqs, n, k) for n, k in one.shapes.gemms.values())
    gemms_two = sum(two.gemm_s(num_seqs, n, k) for n, k in two.shapes.gemms.values())
    assert gemms_two < gemms_one


@SETTINGS
@given(tokens=st.integers(1, 8192), pp=st.integers(2, 8))
def test_pipeline_transfers_grow_with_stages(tokens: int, pp: int) -> None:
    link = link_preset("pcie5")
    base = KernelCost(LLAMA, AIC, link=link).per_step_s(tokens, 1)
    more = KernelCost(LLAMA, AIC, pipeline_parallel_size=pp, link=link).per_step_s(tokens, 1)
    # One NCCL send/recv a boundary over PCIe: LL (6.6 + 1.0 us, half the bus rate)
    # or Simple (8.4 + 5.7 us, the whole bus rate), whichever is faster.
    bus, message = link.bandwidth_bytes_per_s * link.efficiency, tokens * 4096 * 2
    hop = min(7.6e-6 + message / (0.5 * bus), 14.1e-6 + message / bus)
    assert more - base == pytest.approx((pp - 1) * hop, rel=1e-9)


@SETTINGS
@given(
    num_seqs=st.integers(0, 64),
    context=st.integers(0, 50_000),
    num_steps=st.integers(0, 40),
)
def test_decode_runs_are_nondecreasing_up_to_table_noise(
    num_seqs: int, context: int, num_steps: int
) -> None:
    cost = KernelCost(LLAMA, AIC)
    steps = quiet(run_prices, cost, num_seqs, max(context, num_seqs), num_steps)
    assert steps.shape == (num_steps,)
    if num_seqs == 0:
        assert not steps.any()
    elif num_steps > 1:
        assert np.all(np.diff(steps) > -32 * 2e-6)


# -- random grids ----------------------------------------------------------------------


@st.composite
def monotone_grids(draw: st.DrawFn) -> tuple[Grid, list[list[int]], list[list[float]]]:
    """A 2-D grid whose values increase along both axes, and its axes."""
    axes = [sorted(draw(st.sets(st.integers(1, 10_000), min_size=2, max_size=6))) for _ in range(2)]
    steps = draw(
        st.lists(
            st.floats(0.0, 1.0), min_size=len(axes[0]) * len(axes[1]),
            max_size=len(axes[0]) * len(axes[1]),
        )
    )  # fmt: skip
    raw = np.array(steps).reshape(len(axes[0]), len(axes[1])) + 1e-3
    values = np.cumsum(np.cumsum(raw, axis=0), axis=1)
    return Grid("random", ("a", "b"), axes, values), axes, values.tolist()


@SETTINGS
@given(data=monotone_grids(), u=st.floats(0, 1), v=st.floats(0, 1), w=st.floats(0, 1))
def test_random_monotone_grids_interpolate_monotonically(
    data: tuple[Grid, list[list[float]], list[list[float]]], u: float, v: float, w: float
) -> None:
    grid, axes, values = data
    a_lo, a_hi = axes[0][0], axes[0][-1]
    b_lo, b_hi = axes[1][0], axes[1][-1]
    a1 = a_lo + u * (a_hi - a_lo)
    a2 = a1 + w * (a_hi - a1)
    b = b_lo + v * (b_hi - b_lo)
    assert grid(a1, b) <= grid(a2, b) * (1 + 1e-12)
    assert values[0][0] * (1 - 1e-12) <= grid(a1, b) <= values[-1][-1] * (1 + 1e-12)


@SETTINGS
@given(data=monotone_grids())
def test_random_grids_return_their_values_at_grid_points(
    data: tuple[Grid, list[list[float]], list[list[float]]],
) -> None:
    grid, axes, values = data
    for i, a in enumerate(axes[0]):
        for j, b in enumerate(axes[1]):
            assert grid(a, b) == pytest.approx(values[i][j], rel=1e-12)
    points = np.array(axes[0], dtype=float)
    assert grid.many(points, axes[1][0]).tolist() == [grid(p, axes[1][0]) for p in points]


# -- artifact round trip ---------------------------------------------------------------


latencies = st.floats(1e-7, 1.0, allow_nan=False, allow_infinity=False)


@SETTINGS
@given(
    rows=st.lists(
        st.tuples(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 10**6), latencies),
        min_size=1, max_size=30,
    ),
    gz=st.booleans(),
)  # fmt: skip
def test_any_gemm_table_round_trips(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple], gz: bool
) -> None:
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS["gemm"]))
    artifact = KernelArtifact(
        KernelProvenance(source="s", licence="l", gpu="g", framework="f", framework_version="1"),
        {"gemm": table},
    )
    path = tmp_path_factory.mktemp("rt") / ("a.json.gz" if gz else "a.json")
    loaded = load_kernel_artifact(save_artifact(artifact, path))
    pd.testing.assert_frame_equal(loaded.tables["gemm"], table)


def test_shipped_aiconfigurator_slice_keeps_the_filtered_kernel_variant() -> None:
    from sim.cost.kernels.artifact import load_cached, resolve_kernel_artifact

    shipped = load_cached(
        resolve_kernel_artifact("rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b", None)
    )
    assert shipped.provenance.kernels["attention"].startswith("vllm_flash_attn_fa2")
    # The committed test slice and the shipped slice agree where both have rows.
    both = shipped.tables["gemm"].merge(AIC.tables["gemm"], on=["m", "n", "k"])
    assert len(both) > 50
    np.testing.assert_allclose(both["latency_s_x"], both["latency_s_y"], rtol=1e-12)


def test_architecture_path_in_the_config_is_anchored_at_the_scenario(tmp_path: Path) -> None:
    from sim.hardware.specs import HF_CONFIGS

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(dict(HF_CONFIGS["llama-3.1-8b"])))
    spec = model_preset("llama-3-8b")
    arch = architecture_for(spec, "cfg/config.json", tmp_path)
    assert arch.name == "cfg" and arch.hidden_size == 4096
    config = KernelsCostConfig(
        source="path",
        artifact="rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b",
        architecture="llama-3.1-8b",
    )
    cost = build_kernels(config, spec, hardware_preset("rtx-pro-6000"), None, tmp_path)
    assert cost.arch.name == "llama-3.1-8b"
