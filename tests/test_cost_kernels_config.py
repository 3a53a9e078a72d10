"""`cost: {kind: kernels}`, `kind: auto` with kernel tables, shipped artifacts, a scenario run."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from sim import api
from sim.cost.base import StepShape
from sim.cost.config import (
    AutoCostConfig,
    CostConfig,
    auto_choice,
    build_cost_model,
)
from sim.cost.engine_cpu import EngineCpuCost
from sim.cost.kernels import aiconfigurator
from sim.cost.kernels import config as kernels_config
from sim.cost.kernels.artifact import (
    load_cached,
    resolve_kernel_artifact,
    shipped_kernel_artifacts,
    shipped_name,
)
from sim.cost.kernels.config import (
    KernelsCostConfig,
    architecture_for,
    auto_candidates,
    build_kernels,
    kernel_auto_choice,
)
from sim.cost.kernels.cost import KernelCost
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.parallel import ParallelismConfig, link_preset
from sim.hardware.specs import HARDWARE_PRESETS, hardware_preset, model_preset
from sim.scenario import load_scenario, scenario_from_dict

AIC_DATA = Path(__file__).parent / "data" / "kernels" / "aic" / "systems" / "data"
PRO = HARDWARE_PRESETS["rtx-pro-6000"]
RTX4090 = HARDWARE_PRESETS["rtx-4090"]
CPU = HARDWARE_PRESETS["cpu-2core"]
LLAMA = model_preset("llama-3-8b")
PRO_SLICE = "rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b"
PROFILE_4090 = "rtx4090-vllm-0.19.0-llama-3.1-8b-tp1"
PROFILE_PRO = "rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1"
ADAPTER: TypeAdapter[CostConfig] = TypeAdapter(CostConfig)


@pytest.fixture(autouse=True)
def no_installed_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests see aiconfigurator as absent unless they install the test slice."""
    monkeypatch.setattr(kernels_config, "installed_data_dir", lambda: None)
    monkeypatch.setattr(aiconfigurator, "installed_data_dir", lambda: None)
    kernel_auto_choice.cache_clear()
    yield
    kernel_auto_choice.cache_clear()


def install_test_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels_config, "installed_data_dir", lambda: AIC_DATA)
    monkeypatch.setattr(aiconfigurator, "installed_data_dir", lambda: AIC_DATA)
    kernel_auto_choice.cache_clear()


# -- configuration ------------------------------------------------------------------


def test_kernels_block_parses_from_yaml() -> None:
    doc = yaml.safe_load(
        """
        kind: kernels
        source: aiconfigurator
        gpu: rtx_pro_6000_server
        version: 0.24.0
        """
    )
    config = ADAPTER.validate_python(doc)
    assert isinstance(config, KernelsCostConfig)
    assert config.gpu == "rtx_pro_6000_server"
    assert config.version == "0.24.0" and config.framework == "vllm"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"kind": "kernels", "source": "path"}, "source 'path' needs artifact"),
        ({"kind": "kernels", "artifact": "x.json"}, "artifact is only read with source 'path'"),
        ({"kind": "kernels", "step_overhead_s": 0.002}, "Extra inputs are not permitted"),
        ({"kind": "kernels", "sauce": "x"}, "Extra inputs are not permitted"),
        ({"kind": "kernels", "source": "web"}, "'aiconfigurator' or 'path'"),
    ],
)
def test_bad_kernels_blocks_are_rejected(doc: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ADAPTER.validate_python(doc)


def test_config_is_frozen() -> None:
    config = KernelsCostConfig()
    with pytest.raises(ValidationError):
        config.gpu = "x"


def test_build_cost_model_with_a_shipped_artifact_name() -> None:
    config = KernelsCostConfig(source="path", artifact=PRO_SLICE)
    cost = build_cost_model(config, LLAMA, PRO)
    assert isinstance(cost, KernelCost)
    assert cost.arch.name == "llama-3.1-8b"
    assert cost.label.startswith("kernels:llama-3.1-8b@rtx_pro_6000_server (aiconfigurator-core")


def test_build_cost_model_from_the_aiconfigurator_database(monkeypatch: pytest.MonkeyPatch) -> None:
    config = KernelsCostConfig(data_dir=str(AIC_DATA))
    cost = build_cost_model(config, LLAMA, PRO)
    assert isinstance(cost, KernelCost) and "vllm 0.24.0" in cost.label
    # A relative data_dir is anchored at the scenario's folder.
    relative = KernelsCostConfig(data_dir="aic/systems/data")
    assert isinstance(build_cost_model(relative, LLAMA, PRO, AIC_DATA.parents[2]), KernelCost)
    with pytest.raises(ConfigError, match="aiconfigurator-core is not installed"):
        build_cost_model(KernelsCostConfig(), LLAMA, PRO)
    install_test_database(monkeypatch)
    assert isinstance(build_cost_model(KernelsCostConfig(), LLAMA, PRO), KernelCost)


def test_hardware_without_a_database_name_needs_cost_gpu() -> None:
    with pytest.raises(ConfigError, match=r"cost\.gpu: hardware 'rtx-4090' has no aiconfigurator"):
        build_cost_model(KernelsCostConfig(data_dir=str(AIC_DATA)), LLAMA, RTX4090)
    explicit = KernelsCostConfig(data_dir=str(AIC_DATA), gpu="rtx_pro_6000_server")
    with pytest.raises(ConfigError, match="measured on rtx_pro_6000_server"):
        build_cost_model(explicit, LLAMA, RTX4090)
    what_if = explicit.model_copy(update={"allow_other_gpu": True})
    with pytest.warns(UserWarning, match="measured on rtx_pro_6000_server"):
        assert isinstance(build_cost_model(what_if, LLAMA, RTX4090), KernelCost)


def test_models_of_another_dtype_than_the_tables_are_refused() -> None:
    fp8 = LLAMA.model_copy(update={"kv_dtype_bytes": 1.0})
    config = KernelsCostConfig(source="path", artifact=PRO_SLICE)
    with pytest.raises(ConfigError, match="tables are bfloat16 weights / bfloat16 KV; model"):
        build_cost_model(config, fp8, PRO)


def test_unknown_shipped_artifact_lists_the_shipped_ones() -> None:
    with pytest.raises(
        ConfigError, match=rf"no shipped kernel artifact 'nope'; shipped: .*{PRO_SLICE}"
    ):
        resolve_kernel_artifact("nope", None)
    assert resolve_kernel_artifact("x/y.json", Path("/base")) == Path("/base/x/y.json")
    assert resolve_kernel_artifact("/abs/y.json.gz", Path("/base")) == Path("/abs/y.json.gz")
    with pytest.raises(ConfigError, match="no such kernel artifact"):
        load_cached(Path("/nowhere/y.json.gz"))


def test_shipped_artifacts_are_small_and_carry_provenance() -> None:
    paths = shipped_kernel_artifacts()
    assert {shipped_name(p) for p in paths} >= {PRO_SLICE, PROFILE_4090, PROFILE_PRO}
    assert sum(p.stat().st_size for p in paths) < 2_000_000
    for path in paths:
        p = load_cached(path).provenance
        assert p.licence and p.source and p.framework == "vllm" and p.model


def test_architecture_for_a_model_spec() -> None:
    assert architecture_for(LLAMA).name == "llama-3.1-8b"  # same shapes as the preset
    assert architecture_for(LLAMA, "qwen3-8b").name == "qwen3-8b"
    other = LLAMA.model_copy(update={"num_layers": 2})
    arch = architecture_for(other)
    assert arch.name == "llama-3-8b" and arch.num_layers == 2  # shapes differ: the spec itself
    assert architecture_for(model_preset("qwen2.5-7b")).attention_qkv_bias


# -- auto ---------------------------------------------------------------------------


# The presets that existed before kernel tables; auto prices the shipped
# aiconfigurator slices' GPUs and models from them, the rest as before.
OLD_HARDWARE = ["a100-80gb", "cpu-2core", "h100", "h200", "l4"]
OLD_MODELS = ["llama-3-70b", "llama-3-8b", "qwen2.5-7b", "smollm2-135m", "tiny"]
SLICE_GPUS = {"a100-80gb": "a100_sxm-vllm-0.14.0", "h100": "h100_sxm-vllm-0.24.0",
              "h200": "h200_sxm-vllm-0.24.0", "b200": "b200_sxm-vllm-0.24.0",
              "l40s": "l40s-vllm-0.24.0"}  # fmt: skip
SLICE_MODELS = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b"}


@pytest.mark.parametrize("hardware", OLD_HARDWARE)
@pytest.mark.parametrize("model", OLD_MODELS)
def test_auto_picks_a_shipped_slice_only_for_its_gpu_and_model(model: str, hardware: str) -> None:
    spec, hw = model_preset(model), hardware_preset(hardware)
    candidates = [c.artifact for c in auto_candidates(spec, hw)[0]]
    if hardware in SLICE_GPUS and model in SLICE_MODELS:
        name = f"{SLICE_GPUS[hardware]}-{SLICE_MODELS[model]}"
        assert candidates == [str(resolve_kernel_artifact(name, None))]
    else:
        assert candidates == []
        assert not isinstance(build_cost_model(AutoCostConfig(), spec, hw), KernelCost)


@pytest.mark.parametrize("hardware", sorted(SLICE_GPUS))
@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-8b", "qwen3-32b", "llama-3.1-70b"])
def test_every_shipped_slice_prices_its_model_at_each_tp_it_names(
    model: str, hardware: str
) -> None:
    spec, hw = model_preset(model), hardware_preset(hardware)
    path = resolve_kernel_artifact(f"{SLICE_GPUS[hardware]}-{model}", None)
    provenance = load_cached(path).provenance
    assert provenance.model == model and provenance.source == "aiconfigurator-core 0.12.0"
    assert provenance.date and provenance.framework_version in provenance.notes
    tps = [int(tp) for tp in provenance.notes.split("at tp ")[1].split(";")[0].split(",")]
    assert tps and set(tps) <= {1, 2, 4, 8}
    shape = StepShape.build(prefill_chunks=[(512, 0)], decode_context_tokens=[1000] * 8)
    for tp in (1, 2, 4, 8):
        layout = None if tp == 1 else ParallelismConfig(tensor_parallel_size=tp)
        cost, why = kernel_auto_choice(spec, hw, layout)
        if tp not in tps:
            assert cost is None and "kernel tables do not cover it" in why
            continue
        assert isinstance(cost, KernelCost) and cost.tp == tp
        assert why.startswith(f"priced from {provenance.gpu} kernel tables {path.name[:-8]}")
        # A step costs at least its share of the weights streamed at the datasheet bandwidth.
        assert cost.step_s(shape) > spec.weight_bytes / tp / hw.memory_bandwidth_bytes_per_s


def test_auto_without_tables_is_the_labelled_roofline_and_says_why() -> None:
    l4 = hardware_preset("l4")
    cost = build_cost_model(AutoCostConfig(), LLAMA, l4)
    assert type(cost) is RooflineCost
    assert cost.label == "roofline:llama-3-8b@l4 (uncalibrated)"
    why = auto_choice(LLAMA, l4)
    assert why == (
        "no kernel tables for llama-3.1-8b on l4; aiconfigurator-core not installed; the roofline"
    )
    assert "no kernel tables name hardware cpu-2core" in auto_choice(LLAMA, CPU)
    # A model the slices for its GPU do not cover: they are listed.
    qwen = auto_choice(model_preset("qwen2.5-7b"), hardware_preset("h100"))
    assert qwen.startswith("no kernel tables for qwen2.5-7b on h100_sxm (shipped for h100_sxm: ")
    assert "llama-3.1-8b" in qwen and qwen.endswith("; the roofline")
    # The A100 tables were measured on the 80 GB part: not the 40 GB one's.
    assert "measured on the 80 GB part" in auto_choice(LLAMA, hardware_preset("a100-40gb"))
    # Tables of another dtype: the choice names it.
    fp8 = LLAMA.model_copy(update={"kv_dtype_bytes": 1.0})
    assert "1-byte KV" in auto_choice(fp8, hardware_preset("h100"))


def test_chat_yaml_is_priced_from_the_h100_slice(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's main job: ``servesim run scenarios/chat.yaml`` says its tables in one line."""
    chat = Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml"
    scenario = load_scenario(chat, ["workload.num_requests=30"])
    assert scenario.cost.kind == "auto"
    cost = api.cost_model_for(scenario)
    assert isinstance(cost, EngineCpuCost) and isinstance(cost.gpu, KernelCost)
    assert cost.label.startswith("kernels:llama-3.1-8b@h100_sxm (aiconfigurator-core vllm 0.24.0")
    assert cost.label.endswith("+ engine CPU (estimate, vLLM 0.24; overlapped)")
    why = auto_choice(scenario.model, scenario.hardware)
    assert why == (
        "priced from h100_sxm kernel tables h100_sxm-vllm-0.24.0-llama-3.1-8b "
        "(aiconfigurator-core 0.12.0, vllm 0.24.0)"
    )


MHA = LLAMA.model_copy(update={"name": "mha-8b", "num_kv_heads": 32})  # 32 KV heads


def test_auto_falls_back_saying_which_shape_the_tables_lack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_test_database(monkeypatch)  # RTX PRO 6000 tables of Llama's head layouts only
    cost, why = kernel_auto_choice(MHA, PRO)
    assert cost is None
    assert why.startswith(
        "kernel tables do not cover it: kernel artifact (aiconfigurator-core vllm 0.24.0): "
        "context_attention has no rows for num_heads=32, num_kv_heads=32, head_dim=128"
    )
    assert "\n" not in why
    assert auto_choice(MHA, PRO).endswith("; the roofline")


def test_the_h100_database_has_no_decode_attention_for_32_kv_heads() -> None:
    spec = importlib.util.find_spec("aiconfigurator_core")  # extra gpu-data; not in CI
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("aiconfigurator-core is not installed")
    data = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    artifact = aiconfigurator.from_aiconfigurator("h100_sxm", data_dir=data)
    rows = artifact.tables["generation_attention"]
    assert not ((rows["num_heads"] == 32) & (rows["num_kv_heads"] == 32)).any()
    # Derived from rows of fewer heads, and said so (tests/test_trust_cost_derived.py).
    assert KernelCost(architecture_for(MHA), artifact).derived


def test_auto_uses_a_shipped_kernel_artifact_for_its_gpu_and_model() -> None:
    pro = build_cost_model(AutoCostConfig(), LLAMA, PRO)
    assert isinstance(pro, KernelCost) and "aiconfigurator" in pro.label  # before the profile
    assert [c.artifact for c in auto_candidates(LLAMA, PRO)[0]] == [
        str(resolve_kernel_artifact(PRO_SLICE, None)),
        str(resolve_kernel_artifact(PROFILE_PRO, None)),
    ]
    rtx = build_cost_model(AutoCostConfig(), LLAMA, RTX4090)
    assert isinstance(rtx, KernelCost) and "LLMServingSim" in rtx.label
    # Another model on the same GPU: no table covers it, so the roofline.
    other = build_cost_model(AutoCostConfig(), model_preset("qwen2.5-7b"), PRO)
    assert not isinstance(other, KernelCost)
    fp8 = LLAMA.model_copy(update={"kv_dtype_bytes": 1.0})
    assert not isinstance(build_cost_model(AutoCostConfig(), fp8, PRO), KernelCost)


def test_auto_prefers_the_installed_database(monkeypatch: pytest.MonkeyPatch) -> None:
    install_test_database(monkeypatch)
    candidates, _ = auto_candidates(LLAMA, PRO)
    assert candidates[0] == KernelsCostConfig(gpu="rtx_pro_6000_server")
    assert candidates[1].source == "path"
    cost = build_cost_model(AutoCostConfig(), LLAMA, PRO)
    assert isinstance(cost, KernelCost) and "sliced" not in cost.artifact.provenance.notes
    _, why = kernel_auto_choice(LLAMA, PRO)
    assert why.startswith("priced from rtx_pro_6000_server kernel tables in the installed ")
    # A GPU the (test) database lacks: the next candidate, the shipped H100 slice.
    h100 = build_cost_model(AutoCostConfig(), LLAMA, hardware_preset("h100"))
    assert isinstance(h100, KernelCost) and "sliced" in h100.artifact.provenance.notes
    assert "h100_sxm-vllm-0.24.0-llama-3.1-8b" in auto_choice(LLAMA, hardware_preset("h100"))
    # A GPU with neither: the first candidate's refusal is the reason.
    l40s_only = [KernelsCostConfig(gpu="l40s")]
    monkeypatch.setattr(kernels_config, "auto_candidates", lambda m, h: (l40s_only, ""))
    kernel_auto_choice.cache_clear()
    assert auto_choice(LLAMA, hardware_preset("l40s")).startswith(
        "kernel tables do not cover it: aiconfigurator: no GPU 'l40s' with GEMM tables"
    )


def test_auto_with_parallelism_uses_tables_when_they_cover_the_layout() -> None:
    tp2 = ParallelismConfig(tensor_parallel_size=2, link=link_preset("pcie5"))
    cost = build_cost_model(AutoCostConfig(), LLAMA, PRO, parallelism=tp2)
    assert isinstance(cost, KernelCost) and cost.tp == 2
    # The shipped slice has no tp4 head layout, the profile is tp1: roofline.
    tp4 = ParallelismConfig(tensor_parallel_size=4)
    on_pro = build_cost_model(AutoCostConfig(), LLAMA, PRO, parallelism=tp4)
    assert isinstance(on_pro, RooflineCost) and on_pro.parallelism == tp4
    on_4090 = build_cost_model(AutoCostConfig(), LLAMA, RTX4090, parallelism=tp2)
    assert isinstance(on_4090, RooflineCost) and on_4090.parallelism == tp2


def test_kind_kernels_with_parallelism_builds_the_layout() -> None:
    config = KernelsCostConfig(source="path", artifact=PRO_SLICE)
    layout = ParallelismConfig(tensor_parallel_size=2, pipeline_parallel_size=2)
    cost = build_cost_model(config, LLAMA, PRO, parallelism=layout)
    assert isinstance(cost, KernelCost) and (cost.tp, cost.pp) == (2, 2)
    assert "x4(tp2,pp2)" in cost.label
    direct = build_kernels(config, LLAMA, PRO, layout)
    shape = StepShape.build(prefill_chunks=[(512, 0)], decode_context_tokens=[300] * 4)
    assert direct.step_s(shape) == cost.step_s(shape)


def test_gpu_presets_are_datasheet_ordered_and_findable() -> None:
    assert (
        hardware_preset("b200").memory_bandwidth_bytes_per_s
        > hardware_preset("h200").memory_bandwidth_bytes_per_s
    )
    assert (
        hardware_preset("h100-sxm").peak_flops_per_s
        > HARDWARE_PRESETS["h100-pcie"].peak_flops_per_s
    )
    assert HARDWARE_PRESETS["a100-40gb"].memory_bytes < hardware_preset("a100-80gb").memory_bytes
    for name, spec in HARDWARE_PRESETS.items():
        assert spec.name == name
    with pytest.raises(ConfigError, match=r"unknown hardware preset 'z9'; known: .*rtx-4090"):
        hardware_preset("z9")


# -- a scenario end to end ------------------------------------------------------------


def small_scenario(cost: dict) -> dict:
    return {
        "name": "kernels",
        "seed": 0,
        "model": "llama-3-8b",
        "hardware": {**PRO.model_dump()},
        "cost": cost,
        "workload": {
            "kind": "synthetic",
            "num_requests": 30,
            "arrival": {"kind": "poisson", "rate_per_s": 5},
            "prompt_tokens": {"kind": "fixed", "tokens": 512},
            "output_tokens": {"kind": "fixed", "tokens": 32},
        },
    }


def test_a_scenario_runs_on_kernel_tables() -> None:
    scenario = scenario_from_dict(small_scenario({"kind": "kernels", "source": "path",
                                                  "artifact": PRO_SLICE}))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = api.run(scenario)
    assert result.summary["cost_model"].startswith("kernels:llama-3.1-8b@rtx_pro_6000_server")
    assert result.summary["completed"] == 30


def test_auto_picks_kernel_tables_for_an_inline_rtx_pro_6000_scenario() -> None:
    scenario = scenario_from_dict(small_scenario({"kind": "auto"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = api.run(scenario)
    assert result.summary["cost_model"].startswith("kernels:")
    # Decode steps of a handful of sequences cost at least the weights' GEMMs.
    assert result.summary["median_tpot_ms"] > 9.0


def test_tables_of_another_gpu_are_refused_unless_asked_for() -> None:
    config = KernelsCostConfig(source="path", artifact=PROFILE_4090)
    with pytest.raises(
        ConfigError, match="measured on RTX4090, the scenario's hardware is rtx-pro-6000: they"
    ):
        build_cost_model(config, LLAMA, PRO)
    what_if = config.model_copy(update={"allow_other_gpu": True})
    with pytest.warns(UserWarning, match=r"hardware is rtx-pro-6000 \(cost.allow_other_gpu\)"):
        build_cost_model(what_if, LLAMA, PRO)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_cost_model(config, LLAMA, RTX4090)  # the right GPU: silent
        build_cost_model(config, LLAMA, hardware_preset("cpu-2core"))  # no known name: silent
