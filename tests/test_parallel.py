"""Tensor and pipeline parallelism: config, KV capacity, step time, scenario wiring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim import api
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.kv_capacity import KvSizing, vllm_num_kv_blocks
from sim.hardware.parallel import (
    LINK_PRESETS,
    ParallelismConfig,
    kv_bytes_per_token_per_gpu,
    layout_problem,
    link_preset,
)
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import load_scenario, scenario_from_dict

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
LLAMA_70B = model_preset("llama-3-70b")
LLAMA_8B = model_preset("llama-3-8b")
H100 = hardware_preset("h100")
GB = 1e9


def layout(tp: int = 1, pp: int = 1, mb: int = 1, link: Any = "nvlink4") -> ParallelismConfig:
    return ParallelismConfig.model_validate(
        {
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "num_micro_batches": mb,
            "link": link,
        }
    )


# --- config -------------------------------------------------------------------


def test_defaults_are_one_gpu_over_nvlink4() -> None:
    p = ParallelismConfig()
    assert (p.tensor_parallel_size, p.pipeline_parallel_size, p.num_gpus) == (1, 1, 1)
    assert p.is_single_device and p.link == LINK_PRESETS["nvlink4"]


def test_link_presets_are_ordered_by_bandwidth_and_documented_ballparks() -> None:
    bw = {name: link.bandwidth_bytes_per_s for name, link in LINK_PRESETS.items()}
    assert bw["nvlink5"] > bw["nvlink4"] > bw["nvlink3"] > bw["pcie5"] > bw["pcie4"]
    assert bw["nvlink4"] == pytest.approx(450e9)
    assert all(link.latency_s < 20e-6 for link in LINK_PRESETS.values())
    assert LINK_PRESETS["pcie4"].latency_s >= LINK_PRESETS["nvlink4"].latency_s


def test_link_accepts_preset_with_overrides_and_inline() -> None:
    assert layout(link={"preset": "pcie5", "latency_s": 1e-5}).link.latency_s == 1e-5
    inline = {"name": "ib", "bandwidth_bytes_per_s": 50e9, "latency_s": 3e-6}
    assert layout(link=inline).link.bandwidth_bytes_per_s == 50e9


def test_layout_tag_and_gpu_count() -> None:
    assert layout(4).layout == "tp4" and layout(4).num_gpus == 4
    assert layout(2, 2, 4).layout == "tp2,pp2,mb4" and layout(2, 2, 4).num_gpus == 4


def test_unknown_link_preset_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown link preset 'nvlink9'; known: nvlink3"):
        link_preset("nvlink9")


def test_layout_problems_name_the_field() -> None:
    qwen = model_preset("qwen2.5-7b")  # 28 heads, 4 KV heads
    problem = layout_problem(qwen, layout(8))
    assert problem is not None and problem.startswith("parallelism.tensor_parallel_size")
    problem = layout_problem(LLAMA_8B, layout(1, 33))
    assert problem is not None and problem.startswith("parallelism.pipeline_parallel_size")
    assert layout_problem(LLAMA_70B, layout(8, 2)) is None
    with pytest.raises(ConfigError, match="attention heads"):
        RooflineCost(qwen, H100, layout(8))


# --- KV capacity ----------------------------------------------------------------


def test_70b_does_not_fit_on_one_h100_and_fits_on_four() -> None:
    """The budget itself is tested in tests/test_kv_capacity.py; here, the layout's effect."""

    def blocks(tp: int) -> int:
        return vllm_num_kv_blocks(
            LLAMA_70B,
            H100,
            layout(tp),
            KvSizing(
                block_size_tokens=16,
                gpu_memory_utilization=0.9,
                max_num_batched_tokens=2048,
                max_num_seqs=256,
            ),
            max_model_len_tokens=8192,
        )

    with pytest.raises(ConfigError, match=r"131\.42 GiB per GPU"):
        blocks(1)
    assert blocks(4) * 16 > 400_000  # ~ half a million tokens of KV cache
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, layout()) == LLAMA_8B.kv_bytes_per_token


def test_kv_heads_are_replicated_past_their_count() -> None:
    tiny = model_preset("tiny")  # 4 KV heads
    assert kv_bytes_per_token_per_gpu(tiny, layout(8)) == kv_bytes_per_token_per_gpu(
        tiny, layout(4)
    )
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, layout(8)) * 8 == LLAMA_8B.kv_bytes_per_token


# --- scenario wiring ----------------------------------------------------------------


def scenario_doc(**parallelism: Any) -> dict[str, Any]:
    return {
        "model": "llama-3-70b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "parallelism": parallelism,
        "workload": {
            "kind": "synthetic",
            "num_requests": 40,
            "arrival": {"kind": "poisson", "rate_per_s": 20},
            "prompt_tokens": {"kind": "fixed", "tokens": 500},
            "output_tokens": {"kind": "fixed", "tokens": 20},
        },
    }


@pytest.mark.parametrize(
    ("parallelism", "field"),
    [
        ({"tensor_parallel_size": 3}, "parallelism.tensor_parallel_size"),
        ({"tensor_parallel_size": 16}, "parallelism.tensor_parallel_size"),
        ({"pipeline_parallel_size": 0}, "parallelism.pipeline_parallel_size"),
        ({"pipeline_parallel_size": 81}, "parallelism.pipeline_parallel_size"),
        ({"link": "infiniband"}, "parallelism.link"),
        ({"link": {"preset": "nvlink4", "bandwidth_bytes_per_s": -1}}, "parallelism.link"),
        ({"tensor_parallel_size": 4, "bogus": 1}, "parallelism.bogus"),
    ],
)
def test_bad_parallelism_is_a_one_line_config_error(
    parallelism: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(scenario_doc(**parallelism), "s.yaml")
    message = str(info.value)
    assert message.startswith("s.yaml: ") and field in message and "\n" not in message


def test_70b_scenario_on_one_gpu_is_a_one_line_error() -> None:
    scenario = scenario_from_dict(scenario_doc())
    with pytest.raises(ConfigError, match=r"weights of model llama-3-70b \(131\.42 GiB per GPU\)"):
        api.run(scenario)


def test_summary_reports_the_layout() -> None:
    result = api.run(scenario_from_dict(scenario_doc(tensor_parallel_size=4)))
    summary = result.summary
    assert summary["tensor_parallel_size"] == 4 and summary["pipeline_parallel_size"] == 1
    assert summary["num_gpus"] == 4 and summary["link"] == "nvlink4"
    assert summary["cost_model"].startswith("roofline:llama-3-70b@h100x4(tp4) (uncalibrated) + ")
    assert summary["num_kv_blocks"] == api.kv_blocks_for(result.scenario)
    assert summary["weight_gb_per_gpu"] == pytest.approx(LLAMA_70B.weight_bytes / 4 / GB)
    assert summary["completed"] == 40


def test_single_gpu_scenarios_are_unchanged() -> None:
    doc = scenario_doc()
    doc["model"] = "llama-3-8b"
    scenario = scenario_from_dict(doc)
    assert api.kv_blocks_for(scenario) == vllm_num_kv_blocks(
        LLAMA_8B,
        H100,
        layout(),
        KvSizing(
            block_size_tokens=16,
            gpu_memory_utilization=0.9,
            max_num_batched_tokens=8192,  # vLLM's H100 defaults
            max_num_seqs=1024,
        ),
        max_model_len_tokens=scenario.engine.max_model_len_tokens,
    )
    assert type(api.cost_model_for(scenario, engine_cpu=False)) is RooflineCost
    summary = api.run(scenario).summary
    assert (summary["num_gpus"], summary["link"]) == (1, None)


def test_tp8_lowers_tpot_and_pcie_raises_it_in_a_run() -> None:
    def tpot(**parallelism: Any) -> float:
        return float(
            api.run(scenario_from_dict(scenario_doc(**parallelism))).summary["mean_tpot_ms"]
        )

    tp4 = tpot(tensor_parallel_size=4)
    assert tpot(tensor_parallel_size=8) < tp4 < tpot(tensor_parallel_size=4, link="pcie4")


def test_capacity_planning_counts_every_gpu_of_a_replica() -> None:
    assert scenario_from_dict(scenario_doc(tensor_parallel_size=4)).parallelism.num_gpus == 4
    layout_doc = scenario_doc(tensor_parallel_size=4, pipeline_parallel_size=2)
    assert scenario_from_dict(layout_doc).parallelism.num_gpus == 8


def test_shipped_tp_scenario_loads_and_runs_quickly() -> None:
    scenario = load_scenario(SCENARIOS / "llama70b_tp.yaml", ["workload.num_requests=50"])
    assert scenario.parallelism.tensor_parallel_size in (4, 8)
    assert scenario.parallelism.link.name == "nvlink4"
    summary = api.run(scenario).summary
    assert summary["num_gpus"] == scenario.parallelism.num_gpus
    assert "(tp" in summary["cost_model"]


def test_layout_round_trips_through_a_dump() -> None:
    # Capacity search and sweeps re-validate dumped scenarios.
    doc = scenario_doc(tensor_parallel_size=8, link={"preset": "pcie5", "latency_s": 1e-5})
    scenario = scenario_from_dict(doc)
    assert scenario_from_dict(scenario.model_dump(mode="json")) == scenario


def _tp2(hardware: Any, **parallelism: Any) -> dict[str, Any]:
    """``scenario_doc`` at tensor parallel 2 on ``hardware``."""
    return scenario_doc(tensor_parallel_size=2, **parallelism) | {"hardware": hardware}


@pytest.mark.parametrize(
    ("hardware", "link"),
    [("h100", "nvlink4"), ("b200", "nvlink5"), ("a100-80gb", "nvlink3"),
     ("rtx-4090", "pcie4"), ("l40s", "pcie4"), ("rtx-pro-6000", "pcie5-rtxpro6000"),
     ({"preset": "rtx-4090", "memory_bytes": 48e9}, "pcie4")],
)  # fmt: skip
def test_the_link_defaults_to_the_gpus_own(hardware: Any, link: str) -> None:
    """An RTX 4090 at tp 2 kept the NVLink default, which it does not have (issue 30)."""
    assert scenario_from_dict(_tp2(hardware)).parallelism.link.name == link


def test_an_nvlink_for_a_gpu_without_one_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"nvlink4, but rtx-4090 GPUs have no NVLink \(their link: pcie4\)"
    ):
        scenario_from_dict(_tp2("rtx-4090", link="nvlink4"))
    # A slower link than the GPU's own is a what-if, and allowed; so is one GPU.
    assert scenario_from_dict(_tp2("h100", link="pcie4")).parallelism.link.name == "pcie4"
    one = _tp2("rtx-4090", link="nvlink4")
    one["parallelism"]["tensor_parallel_size"] = 1
    assert scenario_from_dict(one).parallelism.link.name == "nvlink4"


def test_an_unknown_gpu_link_is_refused_not_ignored() -> None:
    with pytest.raises(
        ConfigError, match=r"hardware.gpu_link: unknown link preset 'nvlink9'; known: nvlink3"
    ):
        scenario_from_dict(_tp2({"preset": "h100", "gpu_link": "nvlink9"}))
    override = scenario_from_dict(_tp2({"preset": "h100", "gpu_link": "pcie5"}))
    assert override.parallelism.link.name == "pcie5"


def test_the_rtx_pro_6000_link_matches_nccl_measured_on_those_cards() -> None:
    """``pcie5-rtxpro6000``'s bandwidth stands for what aiconfigurator-core measured on two
    RTX PRO 6000 Server cards, not a datasheet nor a fit to the runs: an all-reduce as
    NCCL's model prices it over that link is within 10 % of aiconfigurator's NCCL table
    for every message of 1 MB and more (smaller ones pay NCCL's own latencies,
    ``sim.cost.collectives``; the table, timed under CUDA graphs, is faster there), and
    of its vLLM table above 8 MB, where vLLM hands the reduce to NCCL (below, vLLM's
    custom all-reduce ran on that P2P server: not what NCCL's model prices)."""
    import gzip
    import json

    from sim.cost.collectives import collective_s
    from sim.hardware.parallel import link_preset

    artifacts = SCENARIOS.parent / "sim" / "cost" / "kernels" / "artifacts"
    path = artifacts / "rtx_pro_6000_server-vllm-0.24.0-qwen3-32b.json.gz"
    tables = json.loads(gzip.decompress(path.read_bytes()))["tables"]
    nccl, vllm = tables["collective"], tables["allreduce"]
    rows = [
        (m, t)
        for op, n, m, t in zip(
            nccl["op"], nccl["num_gpus"], nccl["message_bytes"], nccl["latency_s"], strict=True
        )
        if op == "all_reduce" and n == 2 and m >= 1 << 20
    ] + [
        (m, t)
        for n, m, t in zip(vllm["num_gpus"], vllm["message_bytes"], vllm["latency_s"], strict=True)
        if n == 2 and m > 8 << 20
    ]
    link = link_preset("pcie5-rtxpro6000")
    assert len(rows) >= 14
    for message_bytes, measured_s in rows:
        priced_s = collective_s("all_reduce", message_bytes, 2, link)
        assert abs(priced_s / measured_s - 1) < 0.10, (message_bytes, priced_s, measured_s)


def test_the_no_p2p_link_is_the_host_staged_hop_it_cites() -> None:
    """``pcie5-no-p2p`` is the rate its source measured, recomputed as nccl-tests
    computes it (``sim/hardware/links.toml``): all_reduce_perf on four RTX PRO 6000
    Server cards, 33,554,432 bytes in 1.66 ms (algorithm bandwidth 20.2 GB/s), i.e.
    bus bandwidth algbw x 2(n-1)/n = 30.3 GB/s by NCCL's default transport (SHM on
    the ring's NODE hops), where forcing P2P on every hop gave 39.3 GB/s, the
    P2P preset's rate. Two GPUs priced over it move a large message at that rate
    (a ring over two moves each byte once), and slower than over the P2P preset."""
    from sim.cost.collectives import collective_s
    from sim.hardware.parallel import link_preset

    message_bytes, num_gpus, time_s = 33_554_432, 4, 1.66e-3  # as the comment gives them
    bus_bytes_per_s = message_bytes / time_s * 2 * (num_gpus - 1) / num_gpus
    no_p2p, p2p = link_preset("pcie5-no-p2p"), link_preset("pcie5-rtxpro6000")
    no_p2p_rate = no_p2p.bandwidth_bytes_per_s * no_p2p.efficiency
    p2p_rate = p2p.bandwidth_bytes_per_s * p2p.efficiency
    assert no_p2p_rate == pytest.approx(bus_bytes_per_s, rel=0.005)
    assert p2p_rate == pytest.approx(39.3e9, rel=0.005)  # the same run with P2P
    large_bytes = 256 << 20
    priced_s = collective_s("all_reduce", large_bytes, 2, no_p2p)
    assert large_bytes / priced_s == pytest.approx(no_p2p_rate, rel=0.01)
    assert priced_s > collective_s("all_reduce", large_bytes, 2, p2p)
