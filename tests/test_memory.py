"""The memory terms vLLM subtracts before sizing its KV cache (sim.hardware.kv_capacity)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.hardware.kv_capacity import (
    ACTIVATION_TENSORS_PER_TOKEN,
    CUDA_GRAPH_BYTES_PER_LAYER,
    GIB,
    MIB,
    NON_TORCH_BYTES,
    SAMPLER_BYTES_PER_LOGIT,
    cuda_total_memory_bytes,
    cudagraph_memory_bytes,
    forward_activation_bytes,
    peak_activation_bytes,
    requested_memory_bytes,
    sampler_activation_bytes,
)
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    HardwareSpec,
    ModelSpec,
    hardware_preset,
    model_preset,
)
from sim.scenario import scenario_from_dict

CHAT = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"

# hidden 4, intermediate 8, vocab 10, 1-byte weights (activations still 2 bytes).
TOY = ModelSpec(
    name="toy",
    num_layers=2,
    hidden_size=4,
    num_attention_heads=1,
    num_kv_heads=1,
    intermediate_size=8,
    vocab_size=10,
    weight_dtype_bytes=1.0,
    kv_dtype_bytes=1.0,
)
BOX = HardwareSpec(
    name="box", peak_flops_per_s=1e12, memory_bandwidth_bytes_per_s=1e11, memory_bytes=1000.0
)
LLAMA_8B = model_preset("llama-3-8b")


# --- total and requested memory --------------------------------------------------------


def test_cuda_total_is_the_preset_figure_else_the_datasheet() -> None:
    assert cuda_total_memory_bytes(BOX) == 1000.0
    assert cuda_total_memory_bytes(BOX.model_copy(update={"cuda_memory_bytes": 900.0})) == 900.0
    # vLLM logs "total_gpu_memory 79.22GiB" on an H100 (vllm-project/vllm PR #10511).
    assert cuda_total_memory_bytes(hardware_preset("h100")) == 79.22 * GIB
    # LLMServingSim's vLLM 0.19 run on an RTX 4090: device_total_memory_bytes.
    assert cuda_total_memory_bytes(hardware_preset("rtx-4090")) == 25_250_627_584


def test_cuda_totals_sit_just_below_the_marketed_binary_size() -> None:
    """The driver keeps a few hundred MiB: CUDA's total is below N GiB for an 'N GB' card."""
    for name in ("h100", "h200", "a100-80gb", "rtx-4090", "rtx-pro-6000", "b200"):
        hardware = HARDWARE_PRESETS[name]
        assert hardware.cuda_memory_bytes is not None
        marketed_gib = round(hardware.memory_bytes / 1e9)
        assert 0.93 * marketed_gib * GIB < hardware.cuda_memory_bytes < marketed_gib * GIB, name


def test_requested_memory_is_the_ceiling_of_total_times_utilization() -> None:
    assert requested_memory_bytes(BOX, 0.9) == 900.0
    assert requested_memory_bytes(BOX.model_copy(update={"memory_bytes": 1001.0}), 0.5) == 501.0
    assert requested_memory_bytes(BOX, 1.0) == 1000.0


def _chat_with(section: str, **fields: object) -> None:
    """scenarios/chat.yaml with ``fields`` set in ``section``, loaded as a user's would be."""
    doc = yaml.safe_load(CHAT.read_text())
    scenario_from_dict({**doc, section: {**doc[section], **fields}})


@pytest.mark.parametrize("utilization", [0.0, -0.1, 1.01, float("nan")])
def test_bad_utilization_names_the_field(utilization: float) -> None:
    with pytest.raises(ConfigError, match=r"engine\.gpu_memory_utilization"):
        _chat_with("engine", gpu_memory_utilization=utilization)


# --- activations -------------------------------------------------------------------


def test_forward_activations_by_hand() -> None:
    # 4 tensors x 10 tokens x (4 + 8) x 2 bytes (activations at least bf16).
    assert ACTIVATION_TENSORS_PER_TOKEN == 4.0
    assert forward_activation_bytes(TOY, 10) == 4 * 10 * 12 * 2
    # tp 2 halves the MLP's width: 4 x 10 x (4 + 4) x 2.
    assert forward_activation_bytes(TOY, 10, tensor_parallel_size=2) == 4 * 10 * 8 * 2


def test_forward_activations_keep_16_bits_for_quantized_weights() -> None:
    fp8 = LLAMA_8B.model_copy(update={"weight_dtype_bytes": 1.0})
    assert forward_activation_bytes(fp8, 2048) == forward_activation_bytes(LLAMA_8B, 2048)
    fp32 = LLAMA_8B.model_copy(update={"weight_dtype_bytes": 4.0})
    assert forward_activation_bytes(fp32, 2048) == 2 * forward_activation_bytes(LLAMA_8B, 2048)


def test_forward_activations_of_llama_8b_match_vllms_logged_peak_within_15_percent() -> None:
    """vLLM: 'PyTorch activation peak memory 1.26GiB' for Llama-3-8B at 8192 tokens on an
    H100 (vllm-project/vllm PR #10511); the estimate is 4 x 8192 x 18432 x 2 B = 1.125 GiB."""
    estimate = forward_activation_bytes(LLAMA_8B, 8192)
    assert estimate == 4 * 8192 * (4096 + 14336) * 2
    assert estimate == pytest.approx(1.26 * GIB, rel=0.15)


def test_sampler_activations_by_hand() -> None:
    """One row of vocab logits per request, 24 bytes a logit at the sort's peak."""
    assert SAMPLER_BYTES_PER_LOGIT == 4 + 4 + 8 + 4 + 4
    assert sampler_activation_bytes(TOY, 3) == 3 * 10 * 24
    # Llama-3 (vocab 128256), 256 requests: 0.73 GiB.
    assert sampler_activation_bytes(LLAMA_8B, 256) == pytest.approx(0.734 * GIB, rel=1e-3)


def test_peak_is_the_larger_of_forward_and_sampler() -> None:
    # 10 tokens over min(3, 10) = 3 requests: forward 960 B, sampler 720 B.
    assert peak_activation_bytes(TOY, 10, 3) == 960
    # 20 requests but 10 tokens: 10 rows (one token each) -> sampler 2400 B.
    assert peak_activation_bytes(TOY, 10, 20) == 2400
    # Llama-3-8B at vLLM's H100 defaults (8192 tokens, 1024 seqs): the sampler dominates.
    assert peak_activation_bytes(LLAMA_8B, 8192, 1024) == sampler_activation_bytes(LLAMA_8B, 1024)
    assert peak_activation_bytes(LLAMA_8B, 8192, 1) == forward_activation_bytes(LLAMA_8B, 8192)


@pytest.mark.parametrize(
    ("tokens", "seqs", "field"), [(0, 1, "max_num_batched_tokens"), (1, 0, "max_num_seqs")]
)
def test_bad_limits_name_the_field(tokens: int, seqs: int, field: str) -> None:
    with pytest.raises(ConfigError, match=f"scheduler.{field}"):
        _chat_with("scheduler", max_num_batched_tokens=tokens, max_num_seqs=seqs)


@given(tokens=st.integers(1, 1 << 16), seqs=st.integers(1, 4096))
def test_peak_grows_with_either_limit(tokens: int, seqs: int) -> None:
    peak = peak_activation_bytes(LLAMA_8B, tokens, seqs)
    assert peak >= forward_activation_bytes(LLAMA_8B, tokens)
    assert peak_activation_bytes(LLAMA_8B, tokens + 1, seqs) >= peak
    assert peak_activation_bytes(LLAMA_8B, tokens, seqs + 1) >= peak


# --- constants -----------------------------------------------------------------------


def test_non_torch_and_cudagraph_estimates() -> None:
    assert NON_TORCH_BYTES == 0.2 * GIB
    assert CUDA_GRAPH_BYTES_PER_LAYER == 15 * MIB
    # Qwen3-8B's 36 layers: 0.53 GiB, vLLM estimated 0.52 GiB (LMCache issue #3430).
    assert cudagraph_memory_bytes(36) == pytest.approx(0.52 * GIB, rel=0.05)
    assert cudagraph_memory_bytes(0) == 0
    assert math.isclose(cudagraph_memory_bytes(32), 32 * 15 * MIB)
