"""The engine's CPU work per step (sim.cost.engine_cpu) and the vLLM versions' defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from decode_runs import by_loop, run_prices
from pydantic import ValidationError
from test_engine_cpu_parts import cpu_only_s

from sim.api.build import cost_model_for
from sim.cost.base import StepShape
from sim.cost.config import (
    CalibratedCostConfig,
    LinearCostConfig,
    RooflineCostConfig,
    build_cost_model,
)
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.linear import LinearCost
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import Scenario, scenario_from_dict
from sim.scenario.vllm_versions import NEWEST, VERSIONS, vllm_version
from sim.validation.fit_runs import scenario_for_run
from sim.validation.llmservingsim import read_llmservingsim

LLAMA, H100 = model_preset("llama-3-8b"), hardware_preset("h100")
TINY, CPU = model_preset("tiny"), hardware_preset("cpu-2core")
CPU_WORK = EngineCpuConfig(
    per_step_s=1e-3,
    scheduler_per_seq_s=1e-4,
    sampling_per_seq_s=0.0,
    per_token_s=1e-6,
    non_overlapped_s=2e-4,
)
# A GPU model with round numbers: 10 ms a step plus 0.1 ms a decode sequence.
GPU = LinearCost(step_overhead_s=1e-2, per_decode_seq_s=1e-4, per_prefill_token_s=1e-5)
EXAMPLES = Path(__file__).parent.parent / "validation/public/llmservingsim/bench/examples"


def wrapped(overlapped: bool, config: EngineCpuConfig = CPU_WORK) -> EngineCpuCost:
    return EngineCpuCost(GPU, EngineCpu(config, overlapped, "test"))


# -- the rule ------------------------------------------------------------------------------


def test_serial_cpu_work_adds_to_the_gpu_step() -> None:
    shape = StepShape.build(prefill_chunks=[(100, 0)], decode_context_tokens=[50] * 9)
    # 10 sequences, 109 tokens: CPU 1 ms + 10 x 0.1 ms + 109 x 1 µs = 2.109 ms.
    gpu_s = 1e-2 + 9 * 1e-4 + 100 * 1e-5
    assert wrapped(False).step_s(shape) == pytest.approx(2e-4 + 2.109e-3 + gpu_s, rel=1e-12)


def test_overlapped_cpu_work_hides_behind_a_longer_gpu_step() -> None:
    shape = StepShape.build(decode_context_tokens=[50] * 9)
    gpu_s = 1e-2 + 9 * 1e-4
    assert wrapped(True).step_s(shape) == pytest.approx(2e-4 + gpu_s, rel=1e-12)


def test_overlapped_cpu_work_longer_than_the_gpu_step_sets_it() -> None:
    slow = EngineCpuConfig(
        per_step_s=0.0,
        scheduler_per_seq_s=5e-3,
        sampling_per_seq_s=0.0,
        per_token_s=0.0,
        non_overlapped_s=0.0,
    )
    shape = StepShape.build(decode_context_tokens=[50] * 9)
    assert wrapped(True, slow).step_s(shape) == pytest.approx(9 * 5e-3, rel=1e-12)
    # ... and never shorter than either side, nor longer than their sum.
    serial = wrapped(False, slow).step_s(shape)
    assert GPU.step_s(shape) < wrapped(True, slow).step_s(shape) < serial


def test_an_empty_step_costs_nothing() -> None:
    assert wrapped(True).step_s(StepShape()) == wrapped(False).step_s(StepShape()) == 0.0


@pytest.mark.parametrize("overlapped", [True, False])
@pytest.mark.parametrize(
    "config", [CPU_WORK, CPU_WORK.model_copy(update={"scheduler_per_seq_s": 2e-3})]
)
def test_decode_runs_give_step_s_bits(overlapped: bool, config: EngineCpuConfig) -> None:
    roofline = EngineCpuCost(RooflineCost(LLAMA, H100), EngineCpu(config, overlapped, "test"))
    for num_seqs, context, steps in ((1, 7, 5), (13, 4000, 40), (256, 100_000, 30)):
        slow = by_loop(roofline, num_seqs, context, steps).tolist()
        assert run_prices(roofline, num_seqs, context, steps).tolist() == slow
        linear = EngineCpuCost(GPU, EngineCpu(config, overlapped, "test"))
        slow = by_loop(linear, num_seqs, context, steps).tolist()
        assert run_prices(linear, num_seqs, context, steps).tolist() == slow
    assert run_prices(roofline, 0, 0, 3).tolist() == [0.0] * 3


def test_the_label_says_where_the_cpu_work_comes_from_and_the_mode() -> None:
    cost = EngineCpuCost(GPU, EngineCpu(CPU_WORK, True, "estimate, vLLM 0.19"))
    assert cost.label == f"{GPU.label} + engine CPU (estimate, vLLM 0.19; overlapped)"
    assert wrapped(False).label.endswith("; serial)")


@pytest.mark.parametrize(
    "bad",
    [
        {"per_step_s": -1e-3},
        {"scheduler_per_seq_s": float("inf")},
        {"non_overlapped_s": "x"},
        {"per_request_s": 1e-3},
    ],
)
def test_the_config_refuses_bad_coefficients(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        EngineCpuConfig.model_validate({**CPU_WORK.model_dump(), **bad})


def test_the_config_is_a_plain_value_that_round_trips() -> None:
    assert EngineCpuConfig.model_validate_json(CPU_WORK.model_dump_json()) == CPU_WORK
    assert cpu_only_s(CPU_WORK, 10, 109) == pytest.approx(2.109e-3, rel=1e-12)


# -- where it is added -------------------------------------------------------------------------


def test_the_factory_wraps_gpu_only_models_and_nothing_else(tmp_path: Path) -> None:
    cpu = EngineCpu(CPU_WORK, True, "test")
    roofline = build_cost_model(RooflineCostConfig(), LLAMA, H100, engine_cpu=cpu)
    assert isinstance(roofline, EngineCpuCost) and isinstance(roofline.gpu, RooflineCost)
    linear = LinearCostConfig(step_overhead_s=1e-3, per_decode_seq_s=1e-4)
    assert isinstance(build_cost_model(linear, LLAMA, H100, engine_cpu=cpu), LinearCost)
    calibrated = CalibratedCostConfig(artifact="cpu-tiny-fp32")
    assert not isinstance(build_cost_model(calibrated, TINY, CPU, engine_cpu=cpu), EngineCpuCost)
    assert isinstance(build_cost_model(RooflineCostConfig(), LLAMA, H100), RooflineCost)


def test_a_scenarios_own_cpu_work_on_a_whole_step_model_is_refused() -> None:
    given = EngineCpu(CPU_WORK, True, "engine.cpu", given=True)
    linear = LinearCostConfig(step_overhead_s=1e-3, per_decode_seq_s=1e-4)
    with pytest.raises(ConfigError, match=r"engine\.cpu: cost linear") as info:
        build_cost_model(linear, LLAMA, H100, engine_cpu=given)
    assert "\n" not in str(info.value)


def scenario(**engine: Any) -> Scenario:
    tokens = {"kind": "uniform", "min_tokens": 10, "max_tokens": 100}
    workload = {
        "kind": "synthetic",
        "num_requests": 5,
        "arrival": {"kind": "poisson", "rate_per_s": 1},
        "prompt_tokens": tokens,
        "output_tokens": tokens,
    }
    return scenario_from_dict(
        {"cost": {"kind": "roofline"}, "engine": engine, "workload": workload}
    )


def test_a_scenario_prices_its_version_estimate_labelled_as_one() -> None:
    cost = cost_model_for(scenario(vllm_version="0.19.0"))
    assert isinstance(cost, EngineCpuCost)
    assert cost.cpu.config == VERSIONS["0.19"].cpu
    assert "engine CPU (estimate, vLLM 0.19.0; overlapped)" in cost.label
    older = cost_model_for(scenario(vllm_version="0.13"))
    assert older.label.endswith("(estimate, vLLM 0.13; serial)")
    own = cost_model_for(scenario(cpu=CPU_WORK.model_dump()))
    assert isinstance(own, EngineCpuCost) and own.cpu.config == CPU_WORK
    assert own.label.endswith("engine CPU (engine.cpu; overlapped)")
    assert not isinstance(cost_model_for(scenario(), engine_cpu=False), EngineCpuCost)


# -- the versions' defaults ------------------------------------------------------------------


def test_async_scheduling_is_on_by_default_from_vllm_0_14() -> None:
    assert scenario().engine.vllm_version == NEWEST
    assert scenario().async_scheduling
    assert not scenario(vllm_version="0.13.0").async_scheduling
    assert scenario(vllm_version="0.14.0").async_scheduling
    assert scenario(vllm_version="0.13", async_scheduling=True).async_scheduling
    assert not scenario(vllm_version="0.19", async_scheduling=False).async_scheduling


def test_the_cuda_graph_memory_estimate_follows_the_version_unless_set() -> None:
    assert scenario().engine.estimate_cudagraph_memory  # the newest (0.24): on, as from 0.21
    assert not scenario(vllm_version="0.20").engine.estimate_cudagraph_memory
    assert scenario(
        vllm_version="0.19", estimate_cudagraph_memory=True
    ).engine.estimate_cudagraph_memory


@pytest.mark.parametrize("name", ["0.19", "0.19.0", "v0.19.1", "0.19.0rc1", "0.19.1+cu129"])
def test_version_spellings_of_a_known_minor(name: str) -> None:
    assert vllm_version(name).name == "0.19"
    assert scenario(vllm_version=name).engine.vllm_version == name  # kept as given


@pytest.mark.parametrize(
    ("value", "words"),
    [("0.9.2", "'0.9.2' is not a version"), ("0.25", "known: 0.10, "), ("latest", "0.24")],
)
def test_an_unknown_version_is_one_line_naming_the_field(value: str, words: str) -> None:
    with pytest.raises(ConfigError, match=r"engine\.vllm_version") as info:
        scenario(vllm_version=value)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_an_unquoted_yaml_number_is_read_when_known_and_explained_when_not() -> None:
    assert scenario(vllm_version=0.19).engine.vllm_version == "0.19"
    with pytest.raises(ConfigError, match="quote it"):
        scenario(vllm_version=0.20)  # YAML's 0.20 is 0.2


def test_a_replayed_llmservingsim_run_takes_its_vllm_version() -> None:
    run = read_llmservingsim(EXAMPLES / "RTX4090" / "Llama-3.1-8B")
    assert run.meta["engine"]["vllm_version"] == "0.19.0"
    replay = scenario_for_run(
        run, "rtx4090", LLAMA, hardware_preset("rtx-4090"), {"kind": "roofline"}
    )
    assert replay.engine.vllm_version == "0.19.0"
    assert not replay.engine.estimate_cudagraph_memory  # 0.19's default


def test_every_version_has_a_cpu_estimate_and_the_newest_is_the_default() -> None:
    assert max(VERSIONS, key=lambda name: tuple(map(int, name.split(".")))) == NEWEST
    assert all(isinstance(v.cpu, EngineCpuConfig) for v in VERSIONS.values())
