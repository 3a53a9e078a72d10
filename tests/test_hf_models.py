"""Any Hugging Face model a scenario names by its ``config.json``: GPT-2 and OPT
(non-gated MLP, LayerNorm, biases, learned positions, tied LM head), Mistral
(sliding window), multi-head attention; weights, KV, roofline and GEMM shapes
hand-computed from the configs, and one-line errors naming file and field."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim import api
from sim.cli import main
from sim.cli.fit import model_option
from sim.cost.base import StepShape
from sim.cost.fitted import FitParameters, FittedCost, load_fitted_artifact
from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.kernels.ops import ProfileDense, layer_shapes
from sim.cost.roofline import RooflineCost
from sim.errors import ConfigError
from sim.hardware.kv_capacity import (
    ACTIVATION_TENSORS_PER_TOKEN,
    CUDA_GRAPH_BYTES_PER_LAYER,
    NON_TORCH_BYTES,
    SAMPLER_BYTES_PER_LOGIT,
)
from sim.hardware.specs import (
    from_hf_config,
    hardware_preset,
    load_architecture,
    model_from_ref,
    model_preset,
    resolve_model,
)
from sim.planning.sweep import load_sweep
from sim.scenario import load_scenario
from sim.validation.runs import REQUEST_COLUMNS, ImportedRun

CONFIGS = Path(__file__).resolve().parent / "data" / "hf_configs"
KERNELS = Path(__file__).resolve().parent / "data" / "kernels"
GPT2, OPT, MISTRAL = (CONFIGS / f"{n}.json" for n in ("gpt2", "opt-125m", "mistral-7b-v0.1"))


def config(path: Path, **changes: Any) -> dict[str, Any]:
    """The config in ``path`` with ``changes`` (None: the field removed)."""
    data: dict[str, Any] = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# --- weights, as the published parameter counts -------------------------------------------


def layernorm_layer_params(hidden: int, inner: int) -> int:
    """One GPT-2 / OPT layer: q, k, v, o with biases, fc1 and fc2 with biases, 2 LayerNorms."""
    attention = 4 * hidden * hidden + 4 * hidden
    mlp = 2 * hidden * inner + inner + hidden
    return attention + mlp + 2 * 2 * hidden


def test_gpt2_is_its_published_124m_parameters_with_the_lm_head_tied() -> None:
    model = resolve_model(str(GPT2))
    hidden, layers, vocab, positions = 768, 12, 50257, 1024
    layer = layernorm_layer_params(hidden, 4 * hidden)  # n_inner null: 4 x n_embd
    expected = layers * layer + 2 * hidden + vocab * hidden + positions * hidden
    assert model.num_params == expected == 124_439_808  # the published count
    assert model.tied_embeddings and model.weight_bytes == 2.0 * expected
    assert (model.mlp, model.mlp_activation, model.norm) == ("non_gated", "gelu_new", "layer")
    assert model.num_kv_heads == model.num_attention_heads == 12  # multi-head attention
    assert model.max_context_tokens == 1024 and model.name == "gpt2"


def test_opt_125m_is_its_published_parameters_with_two_extra_positions() -> None:
    model = resolve_model(str(OPT))
    hidden, layers, vocab = 768, 12, 50272
    positions = 2048 + 2  # OPT's learned position table is offset by 2
    expected = layers * layernorm_layer_params(hidden, 3072) + 2 * hidden
    expected += vocab * hidden + positions * hidden
    assert model.num_params == expected == 125_239_296  # the published count
    assert (model.mlp, model.mlp_activation) == ("non_gated", "relu")
    assert model.intermediate_size == 3072 and model.num_kv_heads == 12


def test_mistral_is_its_published_7b_with_a_4096_token_window_on_every_layer() -> None:
    model = resolve_model(str(MISTRAL))
    hidden, inter, layers, vocab, kv_width = 4096, 14336, 32, 32000, 8 * 128
    layer = 2 * hidden * hidden + 2 * hidden * kv_width + 3 * hidden * inter + 2 * hidden
    expected = layers * layer + hidden + 2 * vocab * hidden  # untied LM head
    assert model.num_params == expected == 7_241_732_096
    assert (model.mlp, model.norm, model.num_learned_positions) == ("gated", "rms", 0)
    assert model.sliding_window_tokens == 4096 and model.num_sliding_window_layers == 32


def test_a_tied_head_counts_its_weights_once() -> None:
    tied = resolve_model(str(GPT2))
    untied = from_hf_config(config(GPT2, tie_word_embeddings=False), "gpt2")
    assert untied.weight_bytes - tied.weight_bytes == 2.0 * 50257 * 768
    assert untied.dense_flops_per_token == tied.dense_flops_per_token  # the head runs either way


@pytest.mark.parametrize(
    ("path", "expected_bytes"),
    # 2 (K and V) x layers x KV heads x head_dim x 2 bytes
    [(GPT2, 2 * 12 * 12 * 64 * 2), (OPT, 2 * 12 * 12 * 64 * 2), (MISTRAL, 2 * 32 * 8 * 128 * 2)],
)
def test_kv_bytes_per_token_from_the_config(path: Path, expected_bytes: int) -> None:
    assert resolve_model(str(path)).kv_bytes_per_token == expected_bytes


def test_no_num_key_value_heads_is_multi_head_attention() -> None:
    arch = from_hf_config(config(MISTRAL, num_key_value_heads=None), "mha")
    assert arch.num_kv_heads == arch.num_attention_heads == 32


# --- the MLP kind in FLOPs and GEMM shapes -----------------------------------------------


def test_a_non_gated_mlp_has_two_gemms_of_flops_not_three() -> None:
    gpt2 = resolve_model(str(GPT2))
    gated = gpt2.model_copy(update={"mlp": "gated"})
    # One more hidden x inner matrix per layer, and one more inner-wide bias.
    extra = 2.0 * 12 * (768 * 3072 + 3072)
    assert gated.dense_flops_per_token - gpt2.dense_flops_per_token == extra
    # Non-embedding params: 2 FLOPs per weight, plus the LM head.
    head = 2.0 * 768 * 50257
    assert gpt2.dense_flops_per_token == 2.0 * gpt2.num_non_embedding_params + head


def test_the_roofline_prices_a_config_models_flops_and_bytes() -> None:
    model, h100 = resolve_model(str(OPT)), hardware_preset("h100")
    cost = RooflineCost(model, h100)
    pairs = 2048 * 2049 // 2  # one causal prompt of 2048 tokens
    prefill = StepShape(num_prefill_seqs=1, num_prefill_tokens=2048,
                        prefill_attention_pairs=pairs, prefill_kv_read_tokens=2048)  # fmt: skip
    # The layers at all 2048 tokens, the LM head (hidden 768 x vocab 50272) at the
    # prompt's last one only (vLLM's logits_indices: one position a request).
    head = 2.0 * 768 * 50272
    layers = model.dense_flops_per_token - head
    flops = layers * 2048 + head + 4 * 12 * 12 * 64 * pairs
    assert cost.compute_s(prefill) == pytest.approx(
        flops / (h100.peak_flops_per_s * h100.compute_efficiency), rel=1e-12
    )
    decode = StepShape(num_decode_seqs=1, num_decode_context_tokens=100)
    weights_s = model.weight_bytes / (h100.memory_bandwidth_bytes_per_s * h100.memory_efficiency)
    assert cost.memory_s(decode) == pytest.approx(
        weights_s
        + model.kv_bytes_per_token
        * 101
        / (h100.memory_bandwidth_bytes_per_s * h100.memory_efficiency),
        rel=1e-12,
    )


def test_layer_shapes_of_a_non_gated_mlp_are_fc1_and_fc2() -> None:
    arch = load_architecture(GPT2)
    one, two = layer_shapes(arch, 1), layer_shapes(arch, 2)
    assert one.gemms == {
        "qkv_proj": (3 * 768, 768),  # multi-head: q, k, v all 12 heads of 64
        "o_proj": (768, 768),
        "fc1": (3072, 768),
        "fc2": (768, 3072),
    }
    assert two.gemms["fc1"] == (1536, 768) and two.gemms["fc2"] == (768, 1536)
    assert one.lm_head == (50257, 768) and two.lm_head == (25129, 768)  # vocab padded to tp
    assert "gate_up_proj" in layer_shapes(load_architecture(MISTRAL)).gemms


def test_a_config_model_is_its_architecture() -> None:
    # One class: a scenario's config.json model is what the kernel cost model reads,
    # its context limit the file's max_position_embeddings.
    for path in (GPT2, OPT, MISTRAL):
        arch = load_architecture(path)
        assert resolve_model(str(path)) == arch
        assert arch.max_context_tokens == json.loads(Path(path).read_text()).get(
            "max_position_embeddings", json.loads(Path(path).read_text()).get("n_positions")
        )


# --- sliding windows as Hugging Face reads them ------------------------------------------


def test_qwen2_without_use_sliding_window_has_no_window() -> None:
    qwen = config(MISTRAL, model_type="qwen2", sliding_window=131072, use_sliding_window=False)
    assert from_hf_config(qwen, "q").sliding_window_tokens is None


def test_qwen2_max_window_layers_keeps_the_first_layers_full() -> None:
    qwen = config(MISTRAL, sliding_window=4096, use_sliding_window=True, max_window_layers=28)
    assert from_hf_config(qwen, "q").num_sliding_window_layers == 32 - 28


def test_gemma_windows_and_tied_head_follow_their_config_classes() -> None:
    gemma3 = config(MISTRAL, model_type="gemma3_text", sliding_window_pattern=6,
                    tie_word_embeddings=None)  # fmt: skip
    arch = from_hf_config(gemma3, "g3")
    assert arch.num_sliding_window_layers == 32 - 32 // 6  # every 6th layer is full
    assert arch.tied_embeddings  # Gemma's config class ties by default
    gemma2 = from_hf_config(config(MISTRAL, model_type="gemma2"), "g2")
    assert gemma2.num_sliding_window_layers == 16  # every other layer
    assert not from_hf_config(config(MISTRAL, tie_word_embeddings=None), "m").tied_embeddings


def test_layer_types_say_which_layers_slide() -> None:
    types = ["sliding_attention", "full_attention"] * 16
    arch = from_hf_config(config(MISTRAL, layer_types=types), "g")
    assert (arch.sliding_window_tokens, arch.num_sliding_window_layers) == (4096, 16)
    with pytest.raises(ConfigError, match="'layer_types' must list all 32 layers"):
        from_hf_config(config(MISTRAL, layer_types=types[:3]), "g", "cfg.json")


# --- scenarios that name a config.json ---------------------------------------------------


def scenario_file(tmp_path: Path, model: Any, **engine: Any) -> Path:
    doc = {
        "model": model,
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "scheduler": {"kind": "continuous", "max_num_seqs": 64, "max_num_batched_tokens": 2048},
        "engine": {"max_model_len_tokens": 1024, **engine},
        "workload": {
            "kind": "synthetic",
            "num_requests": 40,
            "arrival": {"kind": "poisson", "rate_per_s": 20},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 16, "max_tokens": 600},
            "output_tokens": {"kind": "uniform", "min_tokens": 4, "max_tokens": 64},
        },
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def hand_kv_blocks(model_path: Path, layers: int, vocab: int, width: int) -> int:
    """KV blocks of the scenario above on one H100, from the sizing formula by hand."""
    model, h100 = resolve_model(str(model_path)), hardware_preset("h100")
    assert h100.cuda_memory_bytes is not None
    requested = math.ceil(h100.cuda_memory_bytes * 0.9)
    activations = max(ACTIVATION_TENSORS_PER_TOKEN * 2048 * width * 2.0,
                      64 * vocab * SAMPLER_BYTES_PER_LOGIT)  # fmt: skip
    available = (requested - model.num_params * 2.0 - activations - NON_TORCH_BYTES
                 - CUDA_GRAPH_BYTES_PER_LAYER * layers)  # fmt: skip
    return math.floor(available / (16 * model.kv_bytes_per_token))


@pytest.mark.parametrize(
    ("name", "layers", "vocab", "width"),
    [("gpt2", 12, 50257, 768 + 3072), ("opt-125m", 12, 50272, 768 + 3072),
     ("mistral-7b-v0.1", 32, 32000, 4096 + 14336)],
)  # fmt: skip
def test_a_scenario_naming_a_config_runs_and_sizes_kv_from_it(
    tmp_path: Path, name: str, layers: int, vocab: int, width: int
) -> None:
    (tmp_path / "models").mkdir()
    shutil.copy(CONFIGS / f"{name}.json", tmp_path / "models" / f"{name}.json")
    path = scenario_file(tmp_path, f"models/{name}.json")
    result = api.run(path)
    assert len(result.requests) == 40 and result.requests["finish_s"].notna().all()
    assert result.summary["cost_model"].startswith(f"roofline:{name}@h100")
    expected = hand_kv_blocks(CONFIGS / f"{name}.json", layers, vocab, width)
    assert result.summary["engine_settings"]["num_kv_blocks"] == expected
    # The window is recorded and said not to be modelled, in summary.json.
    caveat = result.summary["model_caveat"]
    assert (caveat is not None) == (name == "mistral-7b-v0.1")
    assert caveat is None or "4096-token sliding window (32 of 32 layers) is not modelled" in caveat


def test_a_relative_config_path_starts_at_the_scenarios_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(GPT2, tmp_path / "gpt2.json")
    path = scenario_file(tmp_path, "./gpt2.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_scenario(path).model == resolve_model(str(GPT2))


def test_a_sweep_resolves_its_scenarios_config_path_from_the_scenarios_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "scenarios").mkdir()
    shutil.copy(GPT2, tmp_path / "scenarios" / "gpt2.json")
    scenario_file(tmp_path / "scenarios", "gpt2.json").rename(tmp_path / "scenarios" / "s.yaml")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"scenario": "scenarios/s.yaml",
                                     "grid": {"scheduler.max_num_seqs": [8, 16]}}))  # fmt: skip
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    plan = load_sweep(sweep)
    assert [p.scenario.model.name for p in plan.points] == ["gpt2", "gpt2"]


def test_a_config_folder_and_overrides_work_as_for_presets(tmp_path: Path) -> None:
    (tmp_path / "opt-125m").mkdir()
    shutil.copy(OPT, tmp_path / "opt-125m" / "config.json")
    scenario = load_scenario(scenario_file(tmp_path, {"preset": "opt-125m/", "kv_dtype_bytes": 1}))
    assert scenario.model.name == "opt-125m" and scenario.model.kv_dtype_bytes == 1
    assert scenario.model.num_params == 125_239_296


def test_a_context_longer_than_the_configs_is_refused(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, str(GPT2), max_model_len_tokens=2048)
    with pytest.raises(ConfigError) as error:
        load_scenario(path)
    message = str(error.value)
    assert "exceeds gpt2's context length of 1024 tokens (its config.json)" in message
    assert str(path) in message and "\n" not in message


# --- errors: one line naming the file and the field --------------------------------------


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, "models/nothere.json")
    with pytest.raises(ConfigError) as error:
        load_scenario(path)
    message = str(error.value)
    assert str(path) in message and "model" in message
    assert f"{tmp_path / 'models' / 'nothere.json'}: no such config.json file" in message


def test_an_unknown_name_still_lists_the_presets(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown model preset 'nope'; known: .*config\.json path"
    ):
        load_scenario(scenario_file(tmp_path, "nope"))


@pytest.mark.parametrize(
    ("source", "removed", "field"),
    [(GPT2, "n_embd", "n_embd"), (GPT2, "n_layer", "n_layer"), (OPT, "ffn_dim", "ffn_dim"),
     (MISTRAL, "intermediate_size", "intermediate_size"), (OPT, "vocab_size", "vocab_size")],
)  # fmt: skip
def test_a_missing_field_is_named_with_its_file(
    tmp_path: Path, source: Path, removed: str, field: str
) -> None:
    bad = write(tmp_path, "bad.json", config(source, **{removed: None}))
    with pytest.raises(ConfigError) as error:
        load_scenario(scenario_file(tmp_path, "bad.json"))
    message = str(error.value)
    assert f"{bad}: missing field {field!r}" in message and "\n" not in message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"n_head": "12"}, "field 'n_head' must be a positive integer"),
        ({"tie_word_embeddings": "yes"}, "field 'tie_word_embeddings' must be true or false"),
        ({"activation_function": 3}, "field 'activation_function' must be an activation name"),
        ({"quantization_config": {"quant_method": "awq"}}, "quantization_config (awq) is not read"),
        ({"n_head": 7}, "'head_dim' (hidden_size % heads != 0)"),
    ],
)
def test_an_invalid_field_is_named_with_its_file(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    bad = write(tmp_path, "bad.json", config(GPT2, **changes))
    with pytest.raises(ConfigError) as error:
        resolve_model(str(bad))
    assert str(error.value).startswith(f"{bad}: ") and expected in str(error.value)


def test_opt_shapes_not_modelled_are_refused(tmp_path: Path) -> None:
    projected = write(tmp_path, "a.json", config(OPT, word_embed_proj_dim=512))
    with pytest.raises(ConfigError, match="word_embed_proj_dim 512 != hidden_size 768"):
        resolve_model(str(projected))
    post_norm = write(tmp_path, "b.json", config(OPT, do_layer_norm_before=False))
    with pytest.raises(ConfigError, match="do_layer_norm_before false"):
        resolve_model(str(post_norm))


def test_a_file_that_is_not_a_json_object_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match=f"{broken}: cannot read config.json"):
        resolve_model(str(broken))
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=f"{listed}: expected a JSON object"):
        resolve_model(str(listed))


# --- calibrate --from-run --model: the same resolver -------------------------------------


def test_the_model_option_accepts_what_a_scenario_accepts(tmp_path: Path) -> None:
    assert model_option(str(GPT2)) == resolve_model(str(GPT2))
    assert model_option("llama-3-8b") == model_preset("llama-3-8b")
    inline = model_option(f"{{preset: {OPT}, kv_dtype_bytes: 1}}")
    assert inline == resolve_model(str(OPT)).model_copy(update={"kv_dtype_bytes": 1.0})
    spec = model_preset("tiny").model_dump()
    assert model_option(json.dumps(spec)) == model_preset("tiny")  # JSON is YAML flow style


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nope", "--model: unknown model preset 'nope'"),
        ("missing/config.json", "no such config.json file"),
        ("{name: m, num_layers: 2", "--model: not a YAML mapping"),
        ("{name: m, num_layers: 2}", "--model.hidden_size: Field required"),
    ],
)
def test_a_bad_model_option_is_one_line(value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        model_option(value)
    assert expected in str(error.value) and "\n" not in str(error.value)


def test_model_from_ref_anchors_paths_at_its_base_dir() -> None:
    assert model_from_ref("gpt2.json", CONFIGS) == resolve_model(str(GPT2))


def test_calibrate_from_run_takes_a_config_path_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(OPT, tmp_path / "opt-125m.json")
    doc = {
        "model": "opt-125m.json",
        "hardware": "cpu-2core",
        "cost": {"kind": "linear", "step_overhead_s": 0.002, "per_prefill_token_s": 5e-5,
                 "per_decode_seq_s": 1e-3},
        "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 256},
        "engine": {"num_kv_blocks": 4096, "async_scheduling": False, "max_model_len_tokens": 2048},
        "workload": {
            "kind": "synthetic",
            "num_requests": 30,
            "arrival": {"kind": "poisson", "rate_per_s": 20},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 32, "max_tokens": 400},
            "output_tokens": {"kind": "uniform", "min_tokens": 4, "max_tokens": 24},
        },
    }  # fmt: skip
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    result = api.run(
        scenario,
        wrap_cost=lambda base: FittedCost(
            base, FitParameters(prefill_multiplier=1.2, decode_multiplier=0.9)
        ),
    )
    run = ImportedRun(
        result.requests[list(REQUEST_COLUMNS)], {"format": "test", "model": "facebook/opt-125m"}
    )
    run.write(tmp_path / "run")
    out = tmp_path / "fit.json"
    argv = ["calibrate", "--model", str(OPT), "--from-run", str(tmp_path / "run"), "--scenario",
            str(scenario), "--out", str(out), "--free", "decode_multiplier", "--max-evals", "8",
            "--no-cross-validation"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert load_fitted_artifact(out).provenance.model == "opt-125m"
    # Another model's config is refused as another preset would be.
    argv[2] = str(GPT2)
    assert main(argv) == 2
    assert "model opt-125m on cpu-2core, not --model gpt2" in capsys.readouterr().err


def test_a_profile_of_a_non_gated_model_needs_fc1_and_fc2() -> None:
    profile = profile_artifact(KERNELS / "profile" / "bf16" / "tp1")
    llama = load_architecture("llama-3.1-8b")
    non_gated = llama.model_copy(update={"mlp": "non_gated"})
    with pytest.raises(ConfigError, match="layer_ops has no op 'fc1'"):
        ProfileDense(profile, non_gated)
    ops = profile.tables["layer_ops"].copy()
    ops["op"] = ops["op"].replace({"gate_up_proj": "fc1", "down_proj": "fc2"})
    renamed = KernelArtifact(profile.provenance, {**profile.tables, "layer_ops": ops})
    dense = ProfileDense(renamed, non_gated)
    assert {"fc1", "fc2"} <= set(dense.op_names)
    assert dense.layer_s(64.0) == pytest.approx(ProfileDense(profile, llama).layer_s(64.0))
