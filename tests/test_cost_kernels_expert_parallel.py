"""Expert parallelism in the kernel cost model (``cost.expert_parallel_size``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from decode_runs import run_prices
from pydantic import ValidationError

from sim import api
from sim.cost.base import StepShape
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.config import KernelsCostConfig, build_kernels
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.expert_parallel import ExpertParallelMoE, check_expert_parallel
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.memory_ops import MemoryOps
from sim.cost.kernels.ops import layer_shapes
from sim.cost.kernels.slice import slice_artifact
from sim.errors import ConfigError
from sim.hardware.parallel import ParallelismConfig, link_preset
from sim.hardware.specs import (
    ModelSpec,
    MoeSpec,
    hardware_preset,
    load_architecture,
    model_preset,
)
from sim.metrics.stats import with_request_metrics
from sim.scenario import load_scenario, scenario_from_dict

DATA = Path(__file__).parent / "data" / "kernels"
AIC = from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data")
PROFILE = profile_artifact(DATA / "profile" / "bf16" / "tp1")
PUBLIC = Path(__file__).parents[1] / "scenarios" / "public"
EP_SCENARIO = PUBLIC / "rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml"
TP_SCENARIO = PUBLIC / "rtxpro6000_qwen3_32b_tp2.yaml"
HIDDEN = 2048
# An MoE model whose expert shape is in the committed table (Qwen3-30B-A3B's
# experts) and whose attention / router GEMMs lie on the committed GEMM grid.
MOE = ModelSpec(
    name="moe-test",
    num_layers=3,
    hidden_size=HIDDEN,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=6144,
    vocab_size=65536,
    max_context_tokens=8192,
    moe=MoeSpec(num_experts=128, top_k=8, expert_intermediate_size=768),
)
DENSE = MOE.model_copy(update={"name": "dense-test", "moe": None})
# One layer's norms, rotary and KV write (no activation outside the MoE kernel):
# the same whatever the expert split (tests/test_cost_kernels_cost.py checks them by hand).
MEMORY = MemoryOps.build(MOE, layer_shapes(MOE), hardware_preset("rtx-pro-6000"))


def row(table: pd.DataFrame, **match: float | str) -> float:
    """The single latency of ``table`` at ``match`` (the test's own lookup)."""
    selected = table
    for column, value in match.items():
        selected = selected[selected[column] == value]
    assert len(selected) == 1, match
    return float(selected["latency_s"].iloc[0])


def moe_row(ep: int, num_tokens: int) -> float:
    return row(
        AIC.tables["moe"], hidden_size=HIDDEN, inter_size=768, topk=8, num_experts=128,
        tp_size=1, ep_size=ep, num_tokens=num_tokens,
    )  # fmt: skip


def nccl_row(op: str, message_bytes: int) -> float:
    return row(AIC.tables["collective"], op=op, num_gpus=2, message_bytes=message_bytes)


def without(artifact: KernelArtifact, table: str) -> KernelArtifact:
    tables = {k: v for k, v in artifact.tables.items() if k != table}
    return KernelArtifact(artifact.provenance, tables)


def gemms_s(cost: KernelCost, tokens: float) -> float:
    return sum(cost.gemm_s(tokens, n, k) for n, k in layer_shapes(MOE).gemms.values())


# -- configuration -----------------------------------------------------------------


def test_config_defaults_to_no_expert_parallelism_and_rejects_zero() -> None:
    assert KernelsCostConfig().expert_parallel_size == 1
    with pytest.raises(ValidationError, match="expert_parallel_size"):
        KernelsCostConfig(expert_parallel_size=0)


def test_scenario_errors_name_the_field() -> None:
    doc = yaml.safe_load(EP_SCENARIO.read_text())
    doc["cost"]["expert_parallel_size"] = 0
    with pytest.raises(ConfigError, match=r"x\.yaml: cost\.expert_parallel_size"):
        scenario_from_dict(doc, "x.yaml")
    doc["cost"]["expert_parallel_size"] = 3
    scenario = scenario_from_dict(doc, "x.yaml")
    with pytest.raises(ConfigError, match=r"cost\.expert_parallel_size 3 does not divide") as err:
        api.engine_for(scenario, PUBLIC)
    assert "128 experts" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("arch", "ep", "tp", "message"),
    [
        (DENSE, 2, 1, r"cost\.expert_parallel_size 2: model dense-test has no experts"),
        (MOE, 3, 1, r"cost\.expert_parallel_size 3 does not divide .*128 experts"),
        (MOE, 2, 4, r"cost\.expert_parallel_size 2 is not a multiple of tensor_parallel_size 4"),
    ],
)
def test_expert_parallel_size_must_fit_the_model(
    arch: ModelSpec, ep: int, tp: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        check_expert_parallel(arch, ep, tp)
    with pytest.raises(ConfigError, match=message):
        KernelCost(arch, AIC, tensor_parallel_size=tp, expert_parallel_size=ep)


def test_ep_one_is_always_accepted() -> None:
    check_expert_parallel(DENSE, 1, 1)
    check_expert_parallel(MOE, 1, 8)


def test_build_kernels_passes_the_field_on() -> None:
    config = KernelsCostConfig(
        source="path", artifact="rtx_pro_6000_server-vllm-0.24.0-qwen3-30b-a3b",
        expert_parallel_size=2,
    )  # fmt: skip
    cost = build_kernels(config, model_preset("qwen3-30b-a3b"), hardware_preset("rtx-pro-6000"))
    assert cost.ep == 2 and "(ep2)" in cost.label
    with pytest.raises(ConfigError, match=r"cost\.expert_parallel_size 2: model"):
        build_kernels(
            config.model_copy(update={"artifact": "rtx_pro_6000_server-vllm-0.24.0-qwen3-32b"}),
            model_preset("qwen3-32b"),
            hardware_preset("rtx-pro-6000"),
        )


def test_a_profile_without_moe_rows_cannot_price_expert_parallelism() -> None:
    arch = load_architecture("llama-3.1-8b").model_copy(
        update={"moe": MoeSpec(num_experts=8, top_k=2, expert_intermediate_size=1024)}
    )
    with pytest.raises(ConfigError, match=r"per-layer profile without MoE rows \(moe.csv\)"):
        KernelCost(arch, PROFILE, expert_parallel_size=2)


def test_missing_ep_rows_name_the_table() -> None:
    moe = AIC.tables["moe"]
    bare = KernelArtifact(AIC.provenance, {**AIC.tables, "moe": moe[moe["ep_size"] == 1]})
    with pytest.raises(ConfigError, match=r"moe has no rows for .*ep_size=2"):
        KernelCost(MOE, bare, expert_parallel_size=2)


# -- the loader ----------------------------------------------------------------------


def test_aiconfigurator_reads_nccl_collectives_in_bytes() -> None:
    table = AIC.tables["collective"]
    assert {"all_gather", "reduce_scatter", "alltoall", "all_reduce"} <= set(table["op"])
    assert set(table["num_gpus"]) == {2}
    raw = pd.read_parquet(
        DATA / "aic/systems/data/rtx_pro_6000_server/comm/nccl/2.29.2/nccl_perf.parquet"
    )
    raw = raw[(raw["nccl_dtype"] == "half") & (raw["op_name"] == "all_gather")]
    first = raw.sort_values("message_size").iloc[0]
    # message_size counts 2-byte elements; latency is in ms.
    expected = first["latency"] * 1e-3
    assert nccl_row("all_gather", int(first["message_size"]) * 2) == pytest.approx(expected)
    assert "nccl" in AIC.provenance.kernels["collective"]


# -- pricing -------------------------------------------------------------------------


def test_ep_moe_layer_is_the_hand_sum_of_table_rows() -> None:
    cost = KernelCost(MOE, AIC, expert_parallel_size=2)
    # 32 local tokens: the other DP rank brings as many, so the kernel sees 64,
    # and 64 x 2048 x 2 B = 262144 B are gathered and reduce-scattered (a grid point).
    message = 64 * HIDDEN * 2
    assert message == 262144
    expected = (
        gemms_s(cost, 32.0)
        + nccl_row("all_gather", message)
        + moe_row(2, 64)
        + nccl_row("reduce_scatter", message)
        + MEMORY.layer_s(32.0)
    )
    assert cost.dense_layer_s(32) == pytest.approx(expected, rel=1e-12)


def test_ep_collectives_fall_back_to_nccls_model_over_the_link() -> None:
    link = link_preset("pcie5")
    cost = KernelCost(MOE, without(AIC, "collective"), expert_parallel_size=2, link=link)
    message = 64 * HIDDEN * 2
    # An all-gather (and a reduce-scatter) on 2 GPUs: one ring hop, each GPU moving
    # half the buffer; NCCL's LL (6.6 + 1.0 us, half the bus rate) or Simple
    # (8.4 + 5.7 us, the whole bus rate) over PCIe, whichever is faster.
    bus = link.bandwidth_bytes_per_s * link.efficiency
    ll = (6.6 + 1.0) * 1e-6 + message / 2 / (0.5 * bus)
    simple = (8.4 + 5.7) * 1e-6 + message / 2 / bus
    ring = min(ll, simple)
    expected = gemms_s(cost, 32.0) + moe_row(2, 64) + 2 * ring + MEMORY.layer_s(32.0)
    assert cost.dense_layer_s(32) == pytest.approx(expected, rel=1e-12)


def test_ep_group_tokens_count_every_dp_rank() -> None:
    arch = MOE.model_copy(update={"num_attention_heads": 64, "num_kv_heads": 16})
    ep4_tp2 = ExpertParallelMoE(AIC, arch, ep=4, tp=2, link=link_preset("pcie5"))
    assert ep4_tp2.group_tokens(10.0) == 20.0  # two DP ranks of tp 2
    ep2 = ExpertParallelMoE(AIC, MOE, ep=2, tp=1, link=link_preset("pcie5"))
    assert ep2.group_tokens(10.0) == 20.0 and ep2.ep == 2


def test_ep_one_is_unchanged() -> None:
    default = KernelCost(MOE, AIC)
    ep1 = KernelCost(MOE, AIC, expert_parallel_size=1)
    assert ep1.label == default.label and "ep" not in ep1.label.split("@")[1].split(" ")[0]
    for tokens in (1, 32, 64, 500, 2048):
        assert ep1.dense_layer_s(tokens) == default.dense_layer_s(tokens)
    expected = gemms_s(ep1, 64.0) + moe_row(1, 64) + MEMORY.layer_s(64.0)
    assert ep1.dense_layer_s(64) == pytest.approx(expected)
    shape = StepShape.build(prefill_chunks=[(300, 0)], decode_context_tokens=[100, 900])
    assert ep1.step_s(shape) == default.step_s(shape)


def test_ep_changes_only_the_moe_term() -> None:
    one, two = KernelCost(MOE, AIC), KernelCost(MOE, AIC, expert_parallel_size=2)
    shape = StepShape.build(prefill_chunks=[(64, 0)], decode_context_tokens=[500] * 32)
    tokens = 64 + 32
    assert one.prefill_attention_s(shape) == two.prefill_attention_s(shape)
    assert one.per_step_s(tokens, 33) == two.per_step_s(tokens, 33)
    assert two._moe is not None and one._moe is not None
    moe_delta = two._moe(float(tokens)) - one._moe(float(tokens))
    step_delta = two.step_s(shape) - one.step_s(shape)
    assert step_delta == pytest.approx(MOE.num_layers * moe_delta, rel=1e-9)


def test_ep_decode_runs_match_step_by_step() -> None:
    cost = KernelCost(MOE, AIC, expert_parallel_size=2)
    run = run_prices(cost, 16, 16 * 700, 5)
    for i, value in enumerate(run):
        shape = StepShape.build(decode_context_tokens=[700 + i] * 16)
        assert value == pytest.approx(cost.step_s(shape), rel=1e-12)


# -- slices --------------------------------------------------------------------------


def test_slice_keeps_ep_rows_and_collectives_and_prices_the_same() -> None:
    sliced = slice_artifact(AIC, MOE, (1,), (2,))
    moe = sliced.tables["moe"]
    assert set(moe["ep_size"]) == {1, 2} and set(moe["inter_size"]) == {768}
    assert set(moe.loc[moe["ep_size"] == 2, "tp_size"]) == {1}
    assert set(sliced.tables["collective"]["num_gpus"]) == {2}
    assert "ep 2" in sliced.provenance.notes
    full, small = (KernelCost(MOE, a, expert_parallel_size=2) for a in (AIC, sliced))
    for tokens in (1, 7, 64, 333, 2048):
        assert small.dense_layer_s(tokens) == full.dense_layer_s(tokens)
    # Without expert parallelism asked for, the slice has no ep rows nor other group sizes.
    plain = slice_artifact(AIC, MOE, (1,))
    assert set(plain.tables["moe"]["ep_size"]) == {1}
    assert set(plain.tables["collective"]["num_gpus"]) <= {1}


# -- the public-run scenarios ----------------------------------------------------------


def test_ep_scenario_declares_two_dp_ranks_and_ep2() -> None:
    scenario = load_scenario(EP_SCENARIO)
    assert scenario.cluster is not None and scenario.cluster.num_replicas == 2
    assert scenario.cluster.router == "least_outstanding_requests"
    assert isinstance(scenario.cost, KernelsCostConfig) and scenario.cost.expert_parallel_size == 2
    cost = api.cost_model_for(scenario, engine_cpu=False)  # the tables alone
    assert isinstance(cost, KernelCost) and cost.ep == 2 and cost.tp == 1


def test_tp_scenario_uses_pcie_and_the_tp2_slice() -> None:
    scenario = load_scenario(TP_SCENARIO)
    # PCIe Gen5 at the all-reduce rate NCCL measured on such servers (links.toml).
    assert scenario.parallelism == ParallelismConfig(
        tensor_parallel_size=2, link=link_preset("pcie5-rtxpro6000")
    )
    cost = api.cost_model_for(scenario, engine_cpu=False)  # the tables alone
    assert isinstance(cost, KernelCost) and cost.tp == 2 and cost._allreduce is not None
    assert "qwen3-32b" in cost.label


@pytest.mark.parametrize("path", [TP_SCENARIO, EP_SCENARIO], ids=["qwen3-32b-tp2", "30b-a3b-ep2"])
def test_public_qwen_scenarios_run_end_to_end(path: Path) -> None:
    result = api.run(path)
    requests = with_request_metrics(result.requests)
    assert len(requests) == 300
    assert requests["ttft_s"].notna().all() and (requests["ttft_s"] > 0).all()
    assert (requests["tpot_s"].dropna() > 0).all()
    if path == EP_SCENARIO:
        # Both DP ranks take work.
        assert set(result.requests["replica"]) == {0, 1}
