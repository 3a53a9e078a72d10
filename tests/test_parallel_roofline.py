"""Parallel roofline step time: all-reduces, stages, micro-batches, decode skipping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from decode_runs import by_loop, run_prices
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.base import CostModel, StepShape
from sim.cost.collectives import collective_s
from sim.cost.config import (
    AutoCostConfig,
    CalibratedCostConfig,
    LinearCostConfig,
    RooflineCostConfig,
    build_cost_model,
)
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.parallel import LINK_PRESETS, LinkSpec, ParallelismConfig
from sim.hardware.specs import hardware_preset, model_preset

LLAMA_70B = model_preset("llama-3-70b")
LLAMA_8B = model_preset("llama-3-8b")
H100 = hardware_preset("h100")
# An ideal link: no hop latency, no bandwidth cost (NCCL's base latency remains).
FREE_LINK = LinkSpec(name="free", bandwidth_bytes_per_s=1e30, latency_s=0.0, efficiency=1.0)


def layout(tp: int = 1, pp: int = 1, mb: int = 1, link: Any = "nvlink4") -> ParallelismConfig:
    return ParallelismConfig.model_validate(
        {
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "num_micro_batches": mb,
            "link": link,
        }
    )


def cost(
    tp: int = 1, pp: int = 1, mb: int = 1, link: Any = "nvlink4", model: Any = LLAMA_70B
) -> RooflineCost:
    return RooflineCost(model, H100, layout(tp, pp, mb, link))


def decode(num_seqs: int = 64, context_per_seq: int = 1000) -> StepShape:
    return StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=num_seqs * context_per_seq)


def prefill(tokens: int) -> StepShape:
    return StepShape.build(prefill_chunks=[(tokens, 0)])


# --- step time --------------------------------------------------------------------


def _allreduces_s(shape: StepShape, link: Any, num_layers: int, hidden: int) -> float:
    """A step's all-reduces (one micro-batch): 2 a layer of tokens x hidden x bf16, as
    NCCL prices them (tests/test_collectives.py checks that model by hand)."""
    message = shape.num_tokens * hidden * 2
    return 2 * num_layers * collective_s("all_reduce", message, 4, link)


def test_step_pays_two_allreduces_per_layer() -> None:
    link = LINK_PRESETS["nvlink4"]
    for shape in (decode(64), prefill(4096)):
        extra = cost(4).step_s(shape) - cost(4, link=FREE_LINK).step_s(shape)
        expected = _allreduces_s(shape, link, 80, 8192) - _allreduces_s(shape, FREE_LINK, 80, 8192)
        assert extra == pytest.approx(expected, rel=1e-9)


def test_tp_splits_flops_and_bytes() -> None:
    single = RooflineCost(LLAMA_8B, H100)
    tp4 = cost(4, link=FREE_LINK, model=LLAMA_8B)
    for shape in (decode(32), prefill(8192)):
        # Over a free link an all-reduce costs NCCL's Simple base latency, 8.4 us
        # (LL's 6.6 us base plus 256 kB or more at its 141 GB/s ceiling is slower).
        comm = _allreduces_s(shape, FREE_LINK, 32, 4096)
        assert comm == pytest.approx(2 * 32 * 8.4e-6)
        assert tp4.step_s(shape) - comm == pytest.approx(single.step_s(shape) / 4, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    num_prefill_seqs=st.integers(0, 64),
    num_prefill_tokens=st.integers(0, 10**6),
    pairs=st.integers(0, 10**9),
    kv_read=st.integers(0, 10**6),
    num_decode_seqs=st.integers(0, 512),
    decode_context=st.integers(0, 10**7),
)
def test_one_gpu_layout_equals_the_roofline_bit_for_bit(
    num_prefill_seqs: int,
    num_prefill_tokens: int,
    pairs: int,
    kv_read: int,
    num_decode_seqs: int,
    decode_context: int,
) -> None:
    shape = StepShape(
        num_prefill_seqs, num_prefill_tokens, pairs, kv_read, num_decode_seqs, decode_context
    )
    assert cost(1, model=LLAMA_8B).step_s(shape) == RooflineCost(LLAMA_8B, H100).step_s(shape)


@settings(max_examples=80, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(1, 4),
    mb=st.integers(1, 8),
    link=st.sampled_from(sorted(LINK_PRESETS)),
    num_seqs=st.integers(0, 300),
    context=st.integers(0, 10**6),
    num_steps=st.integers(0, 60),  # both the Python (<= 24) and the numpy path
)
def test_decode_steps_equal_a_loop_of_step_s(
    tp: int, pp: int, mb: int, link: str, num_seqs: int, context: int, num_steps: int
) -> None:
    model = cost(tp, pp, mb if pp > 1 else 1, link)
    fast = run_prices(model, num_seqs, context, num_steps)
    assert np.array_equal(fast, by_loop(model, num_seqs, context, num_steps))
    fast[:] = -1.0  # a new array each call
    assert not np.any(run_prices(model, num_seqs, context, num_steps) < 0)


def test_a_run_of_no_sequence_costs_nothing() -> None:
    assert run_prices(cost(4), 0, 0, 3).tolist() == [0.0, 0.0, 0.0]
    assert cost(4).step_s(StepShape()) == 0.0


@settings(max_examples=40, deadline=None)
@given(
    model_name=st.sampled_from(["llama-3-8b", "llama-3-70b"]),
    tokens=st.integers(4096, 16384),
    cached=st.integers(0, 4096),
)
def test_compute_bound_prefill_gets_faster_with_tp(
    model_name: str, tokens: int, cached: int
) -> None:
    shape = StepShape.build(prefill_chunks=[(tokens, cached)])
    model = model_preset(model_name)
    times = [cost(tp, model=model).step_s(shape) for tp in (1, 2, 4, 8)]
    assert times == sorted(times, reverse=True) and len(set(times)) == 4


def test_tp4_decodes_70b_faster_than_tp2() -> None:
    for num_seqs in (1, 16, 128):
        assert cost(4).step_s(decode(num_seqs)) < cost(2).step_s(decode(num_seqs))


def test_pcie_makes_tp_slower_than_nvlink() -> None:
    for shape in (decode(1), decode(64), prefill(2048)):
        nvlink, pcie5, pcie4 = (
            cost(4, link=name).step_s(shape) for name in ("nvlink4", "pcie5", "pcie4")
        )
        assert nvlink < pcie5 < pcie4


def test_pipeline_without_micro_batches_adds_only_transfers() -> None:
    link = LINK_PRESETS["nvlink4"]
    for shape in (decode(64), prefill(4096)):
        hop_s = collective_s("send_recv", shape.num_tokens * 8192 * 2, 2, link)
        for pp in (2, 4):
            assert cost(2, pp).step_s(shape) == pytest.approx(
                cost(2).step_s(shape) + (pp - 1) * hop_s, rel=1e-12
            )


def test_micro_batches_speed_up_prefill_and_slow_down_decode() -> None:
    batch_prefill = StepShape.build(prefill_chunks=[(2048, 0)] * 8)
    assert cost(2, 4, 8).step_s(batch_prefill) < cost(2, 4, 1).step_s(batch_prefill)
    # Each micro-batch re-reads the stage's weights: memory-bound decode pays.
    assert cost(2, 4, 8).step_s(decode(64)) > cost(2, 4, 1).step_s(decode(64))
    # A single sequence cannot be split.
    assert cost(2, 4, 8).step_s(prefill(4096)) == cost(2, 4, 1).step_s(prefill(4096))


def test_micro_batches_need_a_pipeline() -> None:
    with pytest.raises(ValueError, match="num_micro_batches > 1 needs pipeline_parallel_size"):
        layout(4, 1, 2)


def test_label_shows_the_layout() -> None:
    assert cost(4).label == "roofline:llama-3-70b@h100x4(tp4) (uncalibrated)"
    assert cost(4, 2).label == "roofline:llama-3-70b@h100x8(tp4,pp2) (uncalibrated)"
    assert "tp4" in repr(cost(4))
    assert isinstance(cost(4), CostModel)


# --- choosing the cost model -------------------------------------------------------


def test_cost_kinds_with_a_parallel_layout(tmp_path: Path) -> None:
    tp4 = layout(4)
    # No kernel tables measure an L4: auto is the parallel roofline.
    l4 = hardware_preset("l4")
    auto = build_cost_model(AutoCostConfig(), LLAMA_70B, l4, parallelism=tp4)
    assert auto.label == "roofline:llama-3-70b@l4x4(tp4) (uncalibrated)"
    tuned = build_cost_model(
        RooflineCostConfig(memory_efficiency=0.4), LLAMA_70B, H100, parallelism=tp4
    )
    assert tuned.step_s(decode()) > cost(4).step_s(decode())  # half the bandwidth
    linear_config = LinearCostConfig(per_decode_seq_s=1e-3, per_prefill_token_s=1e-5)
    linear = build_cost_model(linear_config, LLAMA_70B, H100, parallelism=tp4)
    assert linear.step_s(decode(10)) == pytest.approx(1e-2)  # coefficients price the replica
    calibrated = CalibratedCostConfig(artifact="cpu-tiny-fp32")
    with pytest.raises(ConfigError, match="not supported yet") as info:
        build_cost_model(calibrated, LLAMA_70B, H100, tmp_path, tp4)
    assert "\n" not in str(info.value)
    single = build_cost_model(RooflineCostConfig(), LLAMA_8B, H100, parallelism=layout())
    assert type(single) is RooflineCost
