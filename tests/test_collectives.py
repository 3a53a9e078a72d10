"""Collectives priced as NCCL's tuner prices them (``sim.cost.collectives``), where the
kernel tables use them, and an expert-parallel MoE from a per-layer profile.

Expected figures are computed by hand from NCCL's constants (src/graph/tuning.cc):
base latencies (us) ring LL 6.6, LL128 14.0, Simple 8.4 (tree 6.8, 14.0, 8.4); per
hop over PCI ring LL 1.0, LL128 2.5, Simple 5.7 (tree 1.0, 1.9, 4.0), over NVLink
ring 0.6, 1.9, 3.4 (tree 0.6, 1.25, 4.0); LL at half the bus rate (capped at 141
GB/s), LL128 at 0.92 of it; a ring all-reduce moves each byte 2 (n - 1) / n times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from compiled_runs import assert_loop_prices_as
from hypothesis import given
from hypothesis import strategies as st

from sim.api.build import cost_model_for
from sim.cli import main
from sim.cost.base import StepShape
from sim.cost.collectives import COLLECTIVE_KINDS, candidates, collective_price, collective_s
from sim.errors import ConfigError
from sim.hardware.parallel import LinkSpec, link_preset
from sim.scenario import load_scenario

PCIE = link_preset("pcie5-rtxpro6000")  # 39.4 GB/s bus, efficiency 1
NVLINK = link_preset("nvlink4")  # 450 GB/s x 0.8 = 360 GB/s bus
US = 1e-6
PUBLIC = Path(__file__).parents[1] / "scenarios" / "public"
EP_PROFILE = PUBLIC / "rtxpro6000_qwen3_30b_a3b_dp2_ep2_profile.yaml"
MOE_CSV = (
    Path("/work/shared/data/llmservingsim/profiler/perf/RTXPRO6000/Qwen")
    / "Qwen3-30B-A3B-Instruct-2507/bf16/tp1/moe.csv"
)


def _bus(link: LinkSpec) -> float:
    return link.bandwidth_bytes_per_s * link.efficiency


# -- NCCL's model, by hand --------------------------------------------------------


def test_a_small_all_reduce_on_two_pcie_gpus_is_nccls_ll_ring() -> None:
    # 4 kB: LL ring 6.6 + 2 x 1.0 us + 4 kB x 1 / (39.4 GB/s / 2) = 8.81 us; Simple
    # 8.4 + 2 x 5.7 us = 19.8 us before its bytes; a tree LL 6.8 + 2 x 1.0 us at a
    # quarter of LL's rate.
    price = collective_price("all_reduce", 4096, 2, PCIE)
    assert (price.algorithm, price.protocol) == ("ring", "LL")
    assert price.seconds == pytest.approx((6.6 + 2 * 1.0) * US + 4096 / (0.5 * _bus(PCIE)))
    # Tens of microseconds, not the 2 us of a bare per-hop figure.
    assert price.seconds > 8e-6


def test_a_large_all_reduce_is_the_simple_ring_at_the_link_s_rate() -> None:
    # 20 MB on 8 GPUs over PCIe: 8.4 + 14 x 5.7 us + 20 MB x 14 / 8 / 39.4 GB/s.
    message = 20e6
    price = collective_price("all_reduce", message, 8, PCIE)
    assert (price.algorithm, price.protocol) == ("ring", "Simple")
    expected = (8.4 + 14 * 5.7) * US + message * 14 / 8 / _bus(PCIE)
    assert price.seconds == pytest.approx(expected, rel=1e-12)


def test_ll_and_simple_cross_where_their_latency_and_rate_balance() -> None:
    # On 2 PCIe GPUs LL costs 8.6 us + B / (bus / 2), Simple 19.8 us + B / bus:
    # equal at B = 11.2 us x bus = 441.3 kB.
    crossover = 11.2e-6 * _bus(PCIE)
    assert collective_price("all_reduce", 0.9 * crossover, 2, PCIE).protocol == "LL"
    assert collective_price("all_reduce", 1.1 * crossover, 2, PCIE).protocol == "Simple"


def test_ll128_runs_over_nvlink_only() -> None:
    assert {p for _, p in candidates("all_reduce", PCIE)} == {"LL", "Simple"}
    assert {p for _, p in candidates("all_reduce", NVLINK)} == {"LL", "LL128", "Simple"}
    # 20 MB on 8 NVLink GPUs, each byte moved 14 / 8 = 1.75 times: LL128 = 14 +
    # 14 x 1.9 us + 20 MB x 1.75 / (0.92 x 360 GB/s) = 146.3 us; Simple = 8.4 +
    # 14 x 3.4 us + 20 MB x 1.75 / 360 GB/s = 153.2 us; LL at 141 GB/s is slower.
    price = collective_price("all_reduce", 20e6, 8, NVLINK)
    assert price.protocol == "LL128"
    assert price.seconds == pytest.approx(
        (14.0 + 14 * 1.9) * US + 20e6 * 14 / 8 / (0.92 * _bus(NVLINK))
    )


def test_the_ll_protocol_is_capped_at_nccls_ceiling() -> None:
    # NVLink 4's half bus rate (180 GB/s) is above LL's 141 GB/s ceiling.
    one_mb = 1 << 20
    price = collective_price("send_recv", one_mb, 2, NVLINK)
    assert price.protocol == "LL"
    assert price.seconds == pytest.approx((6.6 + 0.6) * US + one_mb / 141e9)


def test_each_kind_pays_its_hops() -> None:
    # Tiny messages: the base latency plus the kind's hops of LL over PCIe (1.0 us).
    hops = {"all_reduce": 2 * 3, "all_gather": 3, "reduce_scatter": 3, "all_to_all": 3}
    for kind, num_hops in hops.items():
        seconds = collective_s(kind, 8, 4, PCIE)  # type: ignore[arg-type]
        assert seconds == pytest.approx((6.6 + num_hops * 1.0) * US, rel=1e-3), kind
    assert collective_s("send_recv", 8, 2, PCIE) == pytest.approx(7.6 * US, rel=1e-3)


def test_an_all_gather_moves_all_but_its_own_share() -> None:
    # 8 MB over 4 GPUs, Simple: each GPU receives 3/4 of the buffer at the bus rate.
    seconds = collective_s("all_gather", 8e6, 4, PCIE)
    assert seconds == pytest.approx((8.4 + 3 * 5.7) * US + 8e6 * 3 / 4 / _bus(PCIE))


def test_within_one_server_the_model_runs_rings() -> None:
    # Intra-node NCCL's tree pays the same hops as the ring, slower per hop or byte.
    for n in (2, 4, 8):
        for exponent in range(3, 31, 3):
            for link in (PCIE, NVLINK):
                assert collective_price("all_reduce", 2.0**exponent, n, link).algorithm == "ring"


def test_nothing_to_move_costs_nothing() -> None:
    for kind in COLLECTIVE_KINDS:
        assert collective_s(kind, 1e6, 1, PCIE) == 0.0
        assert collective_s(kind, 0, 8, PCIE) == 0.0


def test_a_link_s_latency_scales_every_protocol_s_hop() -> None:
    # Doubling the Simple hop doubles LL's too (NCCL's ratio kept); the base stays.
    slow = PCIE.model_copy(update={"latency_s": 2 * PCIE.latency_s})
    base = 6.6 * US
    assert collective_s("all_reduce", 8, 2, slow) - base == pytest.approx(
        2 * (collective_s("all_reduce", 8, 2, PCIE) - base), rel=1e-3
    )


@given(
    kind=st.sampled_from(COLLECTIVE_KINDS),
    small=st.floats(1, 1e9),
    factor=st.floats(1, 100),
    num_ranks=st.integers(2, 8),
)
def test_more_bytes_or_more_ranks_never_take_less_time(
    kind: Any, small: float, factor: float, num_ranks: int
) -> None:
    ranks = 2 if kind == "send_recv" else num_ranks
    assert collective_s(kind, small * factor, ranks, PCIE) >= collective_s(kind, small, ranks, PCIE)
    if kind not in ("send_recv",):
        more = collective_s(kind, small, num_ranks + 1, PCIE)
        assert more >= collective_s(kind, small, num_ranks, PCIE) * (1 - 1e-12)


# -- where the kernel tables use them ----------------------------------------------


def _breakdown(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    import json

    assert main(["cost-breakdown", *args, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_cost_breakdown_gives_the_step_s_communication(capsys: pytest.CaptureFixture[str]) -> None:
    # Qwen3-32B TP 2, 100 decodes: 64 layers x 2 all-reduces of 100 x 5120 x 2 B
    # = 1.024 MB, each the Simple ring: 8.4 + 2 x 5.7 us + 1.024 MB / 39.4 GB/s.
    scenario = PUBLIC / "rtxpro6000_qwen3_32b_tp2_profile.yaml"
    result = _breakdown(capsys, str(scenario), "--step", "100d")
    assert result["op_sources"]["allreduce"] == "link"
    one = (8.4 + 2 * 5.7) * US + 100 * 5120 * 2 / 39.4e9
    assert result["ops_ms"]["allreduce"] == pytest.approx(64 * 2 * one * 1e3, rel=1e-9)
    tp_step_ops = ("embedding_allreduce", "logits_all_gather")  # tests/test_two_gpu_fidelity.py
    assert result["communication_ms"] == pytest.approx(
        sum(result["ops_ms"][name] for name in ("allreduce", *tp_step_ops))
    )


def test_an_expert_parallel_group_at_tp_1_uses_the_scenario_s_link(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # DP 2 x EP 2 at tp 1: both ranks' 100 tokens gathered, 200 x 2048 x 2 B =
    # 819.2 kB each way over pcie5-rtxpro6000 (Simple: 8.4 + 5.7 us + half at 39.4
    # GB/s), not over NVLink (the layout has one GPU per replica).
    result = _breakdown(capsys, str(EP_PROFILE), "--step", "100d")
    one = (8.4 + 5.7) * US + 200 * 2048 * 2 / 2 / 39.4e9
    for name in ("moe_all_gather", "moe_reduce_scatter"):
        assert result["op_sources"][name] == "link"
        assert result["ops_ms"][name] == pytest.approx(48 * one * 1e3, rel=1e-9)
    assert result["communication_ms"] == pytest.approx(2 * 48 * one * 1e3)


@pytest.mark.skipif(not MOE_CSV.is_file(), reason="the shared LLMServingSim data is not here")
def test_a_profiled_moe_layer_is_each_gpu_s_share_of_the_group_s_work() -> None:
    # 100 tokens a rank, 2 ranks: 200 tokens pick 8 of 128 experts each; this GPU
    # runs half the pairs (1,600 = what 100 tokens of the one-GPU profile run) on the
    # distinct experts of its 64 they reach, 64 (1 - (120/128)^200) = 63.9998:
    # moe.csv read bilinearly between tokens 64 and 128, experts 32 and 64.
    rows = pd.read_csv(MOE_CSV).set_index(["tokens", "activated_experts"])["time_us"]
    active = 64 * (1 - (120 / 128) ** 200)

    def at(experts: int) -> float:
        low, high = rows[(64, experts)], rows[(128, experts)]
        return low + (100 - 64) / 64 * (high - low)

    expected_us = at(32) + (active - 32) / 32 * (at(64) - at(32))
    cost = cost_model_for(load_scenario(EP_PROFILE))
    terms = dict(cost.gpu._moe.terms(100.0))  # type: ignore[attr-defined]
    assert terms["moe"] == pytest.approx(expected_us * US, rel=1e-9)
    step = StepShape.build(decode_context_tokens=[1024] * 100)
    # The MoE layers (experts and both collectives) are priced once per layer, not
    # also by the profile's dense part.
    ops = cost.gpu.breakdown_s(step)  # type: ignore[attr-defined]
    assert ops["moe"] == pytest.approx(48 * terms["moe"])
    assert sum(ops.values()) == pytest.approx(cost.gpu.step_s(step))  # type: ignore[attr-defined]


def test_a_profile_without_moe_rows_is_refused_under_expert_parallelism() -> None:
    from sim.cost.kernels.artifact import KernelArtifact
    from sim.cost.kernels.cost import KernelCost

    scenario = load_scenario(EP_PROFILE)
    cost = cost_model_for(scenario)
    artifact = cost.gpu.artifact  # type: ignore[attr-defined]
    tables = {k: v for k, v in artifact.tables.items() if k != "moe_layer"}
    bare = KernelArtifact(artifact.provenance, tables)
    with pytest.raises(ConfigError, match=r"expert_parallel_size 2: .*moe\.csv"):
        KernelCost(cost.gpu.arch, bare, expert_parallel_size=2, link=PCIE)  # type: ignore[attr-defined]


def test_the_compiled_loop_prices_an_expert_parallel_profile_to_the_bit() -> None:
    # The speed path's tables for the DP 2 x EP 2 profile scenario are the reference's
    # own prices: its steps cost what KernelCost.step_s says, bit for bit.
    import numpy as np

    from sim.cost import tabulate
    from sim.cost.kernels.cost import KernelCost

    kernel = cost_model_for(load_scenario(EP_PROFILE)).gpu  # type: ignore[attr-defined]
    assert isinstance(kernel, KernelCost)
    assert tabulate.why_not(kernel, 64, 2048) is None
    assert_loop_prices_as(
        kernel, tabulate.tabulate(kernel, 64, 2048), np.random.default_rng(0), 100
    )
