"""The KV pool is checked as vLLM checks it at start, however it is sized: block sizes
vLLM allows, a given ``engine.num_kv_blocks`` that must hold one ``max_model_len``
request and sits beside weights that fit, and a speculative draft model whose weights
and KV layers take their share of the GPU (one-line errors, exit 2; counts by hand)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim import api
from sim.api.build import draft_model_for
from sim.errors import ConfigError
from sim.hardware.kv_capacity import (
    GIB,
    MIB,
    VLLM_BLOCK_SIZES_TOKENS,
    KvSizing,
    vllm_num_kv_blocks,
)
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import scenario_from_dict
from tests.cli_errors import run_error

LLAMA_8B = model_preset("llama-3-8b")
LLAMA_70B = model_preset("llama-3-70b")
SMOLLM2 = model_preset("smollm2-135m")
H100 = hardware_preset("h100")
INT4_BYTES = 0.5 + 2 / 128  # 4-bit weights and one fp16 scale per 128 (quantization.py)


def doc(**sections: Any) -> dict[str, Any]:
    """A small llama-3-8b scenario on one H100 with explicit batch limits."""
    base: dict[str, Any] = {
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "scheduler": {"kind": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 2048},
        "engine": {"max_model_len_tokens": 8192},
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 10},
            "prompt_tokens": {"kind": "fixed", "tokens": 32},
            "output_tokens": {"kind": "fixed", "tokens": 8},
        },
    }
    for name, value in sections.items():
        base[name] = {**base.get(name, {}), **value} if isinstance(value, dict) else value
    return base


def written(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


# --- item 7: block sizes vLLM allows ------------------------------------------------------


@pytest.mark.parametrize("block_size", [7, 100000, 0, 2, 256])
def test_a_block_size_vllm_refuses_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], block_size: int
) -> None:
    path = written(tmp_path, doc(engine={"block_size_tokens": block_size}))
    message = run_error(capsys, tmp_path, str(path))
    assert f"engine.block_size_tokens {block_size} is not one of vLLM's" in message
    assert "1, 8, 16, 32, 64, 128" in message


@pytest.mark.parametrize("block_size", VLLM_BLOCK_SIZES_TOKENS)
def test_every_block_size_vllm_allows_is_taken(block_size: int) -> None:
    # vLLM's CacheConfig.BlockSize: 1, 8, 16, 32, 64 and 128.
    assert VLLM_BLOCK_SIZES_TOKENS == (1, 8, 16, 32, 64, 128)
    scenario = scenario_from_dict(doc(engine={"block_size_tokens": block_size}))
    assert scenario.engine.block_size_tokens == block_size
    assert api.kv_blocks_for(scenario) >= math.ceil(8192 / block_size)


def test_the_kv_functions_refuse_a_block_size_vllm_refuses() -> None:
    with pytest.raises(ConfigError, match=r"engine\.block_size_tokens 7 is not one of vLLM's"):
        vllm_num_kv_blocks(
            LLAMA_8B,
            H100,
            ParallelismConfig(),
            KvSizing(7, 0.9, 2048, 256),
            max_model_len_tokens=1024,
        )


# --- item 6: a given num_kv_blocks gets the checks a derived one gets ---------------------


def test_a_given_pool_smaller_than_one_request_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 10 blocks of 16 tokens hold 160 tokens; one 8192-token request needs 512 blocks.
    path = written(tmp_path, doc(engine={"num_kv_blocks": 10}))
    message = run_error(capsys, tmp_path, str(path))
    assert "engine.num_kv_blocks 10 holds 160 tokens" in message
    assert "engine.max_model_len_tokens 8192 (512 blocks of 16" in message
    assert "vLLM refuses to start" in message


def test_a_given_pool_is_refused_exactly_below_one_request() -> None:
    # 1000 tokens in 16-token blocks: ceil(1000 / 16) = 63 blocks (62 hold 992 tokens).
    def blocks(num_kv_blocks: int) -> int:
        engine = {"num_kv_blocks": num_kv_blocks, "max_model_len_tokens": 1000}
        return api.kv_blocks_for(scenario_from_dict(doc(engine=engine)))

    assert blocks(63) == 63  # used verbatim, as vLLM logged it
    with pytest.raises(ConfigError, match=r"engine\.num_kv_blocks 62 holds 992 tokens"):
        blocks(62)


def test_a_given_pool_beside_weights_that_do_not_fit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Llama-3-70B's ~141 GB of bf16 weights on one 80 GB H100: vLLM cannot load them,
    # whatever block count the scenario says it logged.
    path = written(tmp_path, doc(model="llama-3-70b", engine={"num_kv_blocks": 10000}))
    message = run_error(capsys, tmp_path, str(path))
    assert "the weights of model llama-3-70b" in message and "exceed" in message


# --- item 3: a speculative draft model takes its share of the GPU --------------------------


def test_a_draft_models_weights_and_kv_come_out_of_the_pool_by_hand() -> None:
    # vLLM: available = requested - weights(target + draft) - activations - non-torch
    # - CUDA graphs; every attention layer, the draft's too, gets a block per block of
    # the pool, so a block's bytes are the target's and the draft's together.
    got = vllm_num_kv_blocks(
        LLAMA_8B,
        H100,
        ParallelismConfig(),
        KvSizing(16, 0.9, 2048, 256),
        max_model_len_tokens=8192,
        draft=SMOLLM2,
    )
    requested = math.ceil(79.22 * GIB * 0.9)
    weights = LLAMA_8B.num_params * 2 + SMOLLM2.num_params * 2
    activations = max(4 * 2048 * (4096 + 14336) * 2, 256 * 128256 * 24)
    graphs = 32 * 15 * MIB  # the target's layers (the draft's graphs are not added)
    target_kv = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    draft_kv = 2 * 30 * 3 * 64 * 2  # SmolLM2-135M: 30 layers, 3 KV heads of 576 / 9
    block = 16 * (target_kv + draft_kv)
    assert got == math.floor((requested - weights - activations - 0.2 * GIB - graphs) / block)
    alone = vllm_num_kv_blocks(
        LLAMA_8B, H100, ParallelismConfig(), KvSizing(16, 0.9, 2048, 256), max_model_len_tokens=8192
    )
    assert got < alone


def test_a_draft_is_split_over_the_tensor_parallel_gpus_as_its_target_by_hand() -> None:
    # Llama-3-70B on 4 H100s with a Llama-3-8B draft: each GPU holds a quarter of
    # both models' weights and of their KV heads (8 / 4 = 2 each).
    got = vllm_num_kv_blocks(
        LLAMA_70B,
        H100,
        ParallelismConfig(tensor_parallel_size=4),
        KvSizing(16, 0.9, 2048, 256),
        max_model_len_tokens=8192,
        draft=LLAMA_8B,
    )
    requested = math.ceil(79.22 * GIB * 0.9)
    weights = (LLAMA_70B.weight_bytes + LLAMA_8B.weight_bytes) / 4
    activations = max(4 * 2048 * (8192 + 28672 / 4) * 2, 256 * 128256 * 24)
    graphs = 80 * 15 * MIB
    block = 16 * (2 * 80 * 2 * 128 * 2 + 2 * 32 * 2 * 128 * 2)
    assert got == math.floor((requested - weights - activations - 0.2 * GIB - graphs) / block)


def test_a_draft_the_tensor_parallel_size_cannot_split_is_refused() -> None:
    # SmolLM2-135M's 9 attention heads do not split over 2 GPUs; vLLM runs the draft
    # with the target's tensor parallel size, so it cannot start.
    with pytest.raises(ConfigError, match=r"^speculative\.draft_model: .*9 attention heads"):
        vllm_num_kv_blocks(
            LLAMA_8B,
            H100,
            ParallelismConfig(tensor_parallel_size=2),
            KvSizing(16, 0.9, 2048, 256),
            max_model_len_tokens=8192,
            draft=SMOLLM2,
        )


def test_a_scenarios_draft_model_shrinks_its_pool() -> None:
    plain = scenario_from_dict(doc())
    draft = {"num_draft_tokens": 4, "acceptance_rate": 0.7, "draft_model": "llama-3-8b"}
    speculative = scenario_from_dict(doc(speculative=draft))
    # Two Llama-3-8Bs: twice the KV per token, and 15 GiB less for it.
    target_kv = 2 * 32 * 8 * 128 * 2
    expected = vllm_num_kv_blocks(
        LLAMA_8B,
        H100,
        ParallelismConfig(),
        KvSizing(16, 0.9, 2048, 256),
        max_model_len_tokens=8192,
        draft=LLAMA_8B,
    )
    assert api.kv_blocks_for(speculative) == expected
    assert expected < api.kv_blocks_for(plain) / 2
    free_with_one = api.kv_blocks_for(plain) * 16 * target_kv
    assert expected * 16 * 2 * target_kv == pytest.approx(
        free_with_one - LLAMA_8B.weight_bytes, abs=16 * 2 * target_kv
    )


def test_a_draft_cost_fraction_names_no_model_and_takes_no_memory() -> None:
    plain = scenario_from_dict(doc())
    fraction = {"num_draft_tokens": 4, "acceptance_rate": 0.7, "draft_cost_fraction": 0.1}
    assert api.kv_blocks_for(scenario_from_dict(doc(speculative=fraction))) == api.kv_blocks_for(
        plain
    )


def test_a_70b_draft_beside_a_70b_target_on_one_h100_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both 4-bit: 2 x 70.6e9 x 0.516 B = 67.8 GiB of the 71.3 GiB requested; the
    # ~1.4 GiB left, at 2 x 320 KiB of KV per token, holds far fewer than 8192 tokens.
    draft = {"preset": "llama-3-70b", "weight_dtype_bytes": INT4_BYTES}
    document = doc(
        model="llama-3-70b",
        quantization={"weights": "int4"},
        speculative={"num_draft_tokens": 4, "acceptance_rate": 0.7, "draft_model": draft},
    )
    message = run_error(capsys, tmp_path, str(written(tmp_path, document)))
    assert "engine.max_model_len_tokens 8192 needs 512 KV blocks" in message
    # Without the draft the same target has room to spare.
    alone = {k: v for k, v in document.items() if k != "speculative"}
    assert api.kv_blocks_for(scenario_from_dict(alone)) > 512


def test_a_bf16_70b_draft_is_refused_by_its_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = doc(
        model="llama-3-70b",
        quantization={"weights": "int4"},
        speculative={"num_draft_tokens": 4, "acceptance_rate": 0.7, "draft_model": "llama-3-70b"},
    )
    message = run_error(capsys, tmp_path, str(written(tmp_path, document)))
    assert "the weights of model llama-3-70b" in message
    assert "speculative.draft_model" in message and "exceed" in message
    # A block count given as vLLM's log does not make the weights fit.
    document["engine"] = {"max_model_len_tokens": 8192, "num_kv_blocks": 10000}
    message = run_error(capsys, tmp_path, str(written(tmp_path, document)))
    assert "speculative.draft_model" in message and "exceed" in message


def test_the_draft_keeps_its_weights_dtype_and_takes_the_engines_kv_dtype() -> None:
    # vLLM's kv_cache_dtype covers every attention layer, the draft's included.
    draft = {"num_draft_tokens": 4, "acceptance_rate": 0.7, "draft_model": "llama-3-8b"}
    scenario = scenario_from_dict(
        doc(speculative=draft, quantization={"weights": "fp8", "kv_cache": "fp8"})
    )
    model = draft_model_for(scenario)
    assert model is not None
    assert (model.weight_dtype_bytes, model.kv_dtype_bytes) == (2.0, 1.0)
