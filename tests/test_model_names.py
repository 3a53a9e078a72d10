"""One rule for "this record is of that model", at each of the three doors it guards.

``servesim validate`` (a measured run against a scenario), ``calibrate --from-run``
(a run against ``--model``) and the kernel tables (a profile against the architecture
it prices) each refuse a record of another model with one line naming both. Another
model is one with other shapes or other weight bytes: a dense model against its MoE
namesake, a quantized checkpoint against full precision, a longer name that is not a
fine-tune's variant words. A fine-tune's variant words (instruct, chat, a release
date), the organisation prefix, letter case and the alias table's names are the same
model.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.cost.kernels.artifact import load_kernel_artifact, shipped_kernel_artifacts
from sim.cost.kernels.cost import KernelCost
from sim.errors import ConfigError
from sim.hardware.model_names import same_model
from sim.hardware.quantization import WeightDtype
from sim.hardware.specs import hardware_preset, load_architecture, model_preset
from sim.scenario import load_scenario
from sim.validation.fit_runs import check_run as check_fit_run
from sim.validation.match import RunFacts, mismatches
from sim.validation.runs import ImportedRun

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"

# (the model priced, the model a record names): another model, to be refused.
OTHER_MODELS = [
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B"),  # the dense model against the MoE one
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct-AWQ"),  # 4-bit weights
    ("llama-3.1-8b", "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"),  # 8-bit weights
    ("llama-3.1-8b", "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8"),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8"),
    ("llama-3-8b", "llama-3-8b-longer-context-thing"),  # words that are no variant
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-1"),  # a number that is no release date
    ("qwen3-8b", "Qwen/Qwen3-8"),
    ("llama-3-8b", "meta-llama/Llama-3.1-70B-Instruct"),
    ("tiny", "meta-llama/Llama-3.1-8B-Instruct"),
    ("llama-3.1-8b", "instruct"),  # variant words alone name nothing
]

# The same model under a fine-tune's name, an organisation, another case, an alias.
SAME_MODELS = [
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
    ("llama-3.1-8b", "META-LLAMA/LLAMA-3.1-8B"),
    ("llama-3-8b", "meta-llama/Llama-3.1-8B-Instruct"),  # the alias table's shapes
    ("llama-3-8b", "meta-llama/Meta-Llama-3-8B-Instruct"),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507"),
    ("qwen3-8b", "Qwen/Qwen3-8B"),
    ("qwen3-8b", "qwen3-8b"),
]


def _validate_complaints(model: str, named: str, *sets: str) -> list[str]:
    scenario = load_scenario(SCENARIO, [f"model={model}", "workload.duration_s=2", *sets])
    requests = pd.DataFrame(columns=["request_id", "num_prompt_tokens", "num_output_tokens"])
    run = RunFacts(requests, model=named, hardware=scenario.hardware.name, partial=True)
    return [line for line in mismatches(scenario, run) if line.startswith("model")]


def _imported(named: str) -> ImportedRun:
    requests = pd.DataFrame({"num_prompt_tokens": [8], "num_output_tokens": [4]})
    return ImportedRun(requests, {"format": "test", "model": named})


@pytest.mark.parametrize(("model", "named"), OTHER_MODELS)
def test_validate_refuses_a_run_of_another_model(model: str, named: str) -> None:
    assert _validate_complaints(model, named) == [
        f"model {named!r} measured, {model!r} in the scenario"
    ]


@pytest.mark.parametrize(("model", "named"), SAME_MODELS)
def test_validate_takes_a_run_of_the_same_model(model: str, named: str) -> None:
    assert _validate_complaints(model, named) == []


def test_a_quantized_run_belongs_to_a_scenario_of_the_same_quantization() -> None:
    fp8 = "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"
    awq = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
    assert _validate_complaints("llama-3.1-8b", fp8, "quantization.weights=fp8") == []
    assert _validate_complaints("llama-3.1-8b", awq, "quantization.weights=int4") == []
    w8a8 = "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8"
    assert _validate_complaints("llama-3.1-8b", w8a8, "quantization.weights=int8") == []
    # Another quantization is another weight size: refused.
    assert _validate_complaints("llama-3.1-8b", awq, "quantization.weights=fp8") == [
        f"model {awq!r} measured, 'llama-3.1-8b' in the scenario"
    ]
    assert _validate_complaints("llama-3.1-8b", fp8, "quantization.weights=int4") != []
    # The scenario's quantization does not excuse another model.
    assert _validate_complaints("qwen3-30b-a3b", "Qwen/Qwen3-30B-FP8", "quantization.weights=fp8")


@pytest.mark.parametrize(("model", "named"), OTHER_MODELS)
def test_calibrate_refuses_a_run_of_another_model(model: str, named: str) -> None:
    with pytest.raises(ConfigError, match=f"the run served {named}, not --model {model}$"):
        check_fit_run(_imported(named), "run", model_preset(model), hardware_preset("h100"))


@pytest.mark.parametrize(("model", "named"), SAME_MODELS)
def test_calibrate_takes_a_run_of_the_same_model(model: str, named: str) -> None:
    check_fit_run(_imported(named), "run", model_preset(model), hardware_preset("h100"))


def _llama_tables() -> Path:
    (path,) = [
        p
        for p in shipped_kernel_artifacts()
        if p.name.startswith("h100_sxm-vllm-0.24") and "llama-3.1-8b" in p.name
    ]
    return path


@pytest.mark.parametrize(
    "named",
    [
        "meta-llama/Llama-3.1-8B-Instruct-AWQ",
        "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
        "meta-llama/Llama-3.1-8B-longer-context-thing",
        "meta-llama/Llama-3.1-8B-1",
        "meta-llama/Llama-3.1-70B",
    ],
)
def test_kernel_tables_of_another_model_are_refused(named: str) -> None:
    artifact = load_kernel_artifact(_llama_tables())
    artifact.provenance = artifact.provenance.model_copy(update={"model": named})
    with pytest.raises(ConfigError, match=f"was profiled on {named}, not llama-3.1-8b$"):
        KernelCost(load_architecture("llama-3.1-8b"), artifact)


@pytest.mark.parametrize(
    "named", ["meta-llama/Llama-3.1-8B-Instruct", "LLAMA-3.1-8B", "meta-llama/Meta-Llama-3.1-8B"]
)
def test_kernel_tables_of_a_variant_price_the_model(named: str) -> None:
    artifact = load_kernel_artifact(_llama_tables())
    artifact.provenance = artifact.provenance.model_copy(update={"model": named})
    KernelCost(load_architecture("llama-3.1-8b"), artifact)


# The rule itself, over names built from a preset's: what may trail it, in any order.
ALIASED = {"llama-3.1-8b", "llama-3-8b"}  # models.toml's [aliases]: the same shapes
PRESETS = ["llama-3.1-8b", "llama-3-8b", "qwen3-30b-a3b", "qwen3-8b", "tiny"]
VARIANT_TAILS = st.lists(st.sampled_from(["Instruct", "chat", "it", "hf", "2507", "20240229"]))


@given(st.sampled_from(PRESETS), VARIANT_TAILS, st.sampled_from(["", "org/", "meta-llama/"]))
def test_variant_words_and_dates_keep_the_model(model: str, tail: list[str], org: str) -> None:
    named = org + "-".join([model.upper(), *tail])
    assert same_model(model, named) and same_model(named, model)


@given(
    st.sampled_from(PRESETS),
    VARIANT_TAILS,
    st.sampled_from(["AWQ", "GPTQ-Int4", "w4a16", "4bit"]),
    st.sampled_from(["fp8", "int8", "bf16", "fp16"]),
)
def test_a_quantization_word_is_the_model_only_at_that_quantization(
    model: str, tail: list[str], word: str, other: WeightDtype
) -> None:
    named = "-".join([model, *tail, word])
    assert same_model(model, named, "int4")  # each of these words means 4-bit weights
    assert not same_model(model, named)  # the model's own weights: another price
    assert not same_model(model, named, other)


@given(
    st.sampled_from(PRESETS),
    st.sampled_from(PRESETS),
    st.sampled_from(["longer", "context", "a3b", "1", "v2", "moe", "fp4"]),
)
def test_any_other_word_is_another_model(model: str, other: str, word: str) -> None:
    assert not same_model(model, f"{model}-{word}")
    assert not same_model(f"{model}-{word}", model)
    assert same_model(model, other) is (model == other or {model, other} == ALIASED)
