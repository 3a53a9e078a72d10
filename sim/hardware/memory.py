"""The memory terms vLLM subtracts before sizing its KV cache, one function each.

vLLM v1 measures them at start-up (``Worker.determine_available_memory``,
``vllm/utils/mem_utils.memory_profiling``); servesim cannot run the model, so
the terms it cannot compute from the model's shape are estimates, each with
its constant and where it comes from. All figures are for one GPU, in bytes.

Computed:

- total memory: what CUDA reports (``HardwareSpec.cuda_memory_bytes``, else
  the datasheet ``memory_bytes``);
- weights: ``model.weight_bytes / num_gpus``.

Estimated:

- peak activations of the profile run: the larger of the forward pass over
  ``max_num_batched_tokens`` tokens, ``4 x tokens x (hidden + intermediate /
  tp) x activation bytes``, and the dummy sampler run over ``min(max_num_seqs,
  max_num_batched_tokens)`` rows of logits, ``rows x vocab x 24`` bytes;
- non-torch memory (cuBLAS and attention workspaces): 0.2 GiB;
- CUDA-graph memory (vLLM >= 0.21 subtracts its estimate by default): 15 MiB
  per layer on the GPU.

The budget itself is in :mod:`sim.hardware.kv_capacity`.
"""

from __future__ import annotations

import math

from sim.errors import ConfigError
from sim.hardware.specs import HardwareSpec, ModelSpec

GIB = float(2**30)
MIB = float(2**20)

# Peak live activations of a forward pass over N tokens are a few tensors of
# N x (hidden + intermediate) elements (residual stream, gate/up outputs,
# attention workspace). A factor of 4 gives Llama-3-8B at 8192 tokens 1.13 GiB;
# vLLM logged "PyTorch activation peak memory 1.26GiB" for that model and
# budget on an H100 (vllm-project/vllm PR #10511).
ACTIVATION_TENSORS_PER_TOKEN = 4.0

# The profile run ends with a dummy sampler run on one row of logits per
# request (GPUModelRunner._dummy_sampler_run). Live at its peak, per logit:
# fp32 logits (4 B), the top-k/top-p sort's sorted values (4 B) and int64
# indices (8 B), their softmax (4 B) and cumulative sum (4 B) = 24 B. For
# Llama-3 (vocab 128256) and 256 sequences that is 0.73 GiB.
SAMPLER_BYTES_PER_LOGIT = 24.0

# Memory the instance allocates outside torch during loading and the profile
# run (cuBLAS workspaces, attention backend buffers). vLLM logs
# "non_torch_memory takes 0.16GiB" on one H100 (vllm-project/vllm PR #12126)
# and 0.20GiB per RTX 3090 (PR #14447). NCCL's buffers are allocated before
# vLLM's baseline snapshot, so they are not in it.
NON_TORCH_BYTES = 0.2 * GIB

# vLLM >= 0.21 captures a few CUDA graphs while profiling and subtracts the
# extrapolated pool size (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by
# default). LMCache issue #3430 logs "Estimated CUDA graph memory: 0.52 GiB"
# for Qwen3-8B (36 layers, default capture sizes: 51 piecewise, 35 full):
# about 15 MiB per layer.
CUDA_GRAPH_BYTES_PER_LAYER = 15.0 * MIB


def cuda_total_memory_bytes(hardware: HardwareSpec) -> float:
    """Total device memory as ``torch.cuda.mem_get_info()`` reports it (what vLLM scales)."""
    if hardware.cuda_memory_bytes is not None:
        return hardware.cuda_memory_bytes
    return hardware.memory_bytes


def requested_memory_bytes(hardware: HardwareSpec, gpu_memory_utilization: float) -> float:
    """``ceil(total x gpu_memory_utilization)``: vLLM's ``requested_memory``."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(
            f"engine.gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
        )
    return float(math.ceil(cuda_total_memory_bytes(hardware) * gpu_memory_utilization))


def activation_dtype_bytes(model: ModelSpec) -> float:
    """Activations stay at least 2 bytes (bf16) even with 8- or 4-bit weights."""
    return max(model.weight_dtype_bytes, 2.0)


def forward_activation_bytes(
    model: ModelSpec, max_num_batched_tokens: int, tensor_parallel_size: int = 1
) -> float:
    """Peak activations of one forward pass over ``max_num_batched_tokens`` tokens (estimate)."""
    if max_num_batched_tokens <= 0:
        raise ConfigError(
            f"scheduler.max_num_batched_tokens must be > 0, got {max_num_batched_tokens}"
        )
    width = model.hidden_size + model.intermediate_size / tensor_parallel_size
    return (
        ACTIVATION_TENSORS_PER_TOKEN
        * max_num_batched_tokens
        * width
        * activation_dtype_bytes(model)
    )


def sampler_activation_bytes(model: ModelSpec, num_requests: int) -> float:
    """Peak of the dummy sampler run over ``num_requests`` rows of logits (estimate)."""
    if num_requests <= 0:
        raise ConfigError(f"scheduler.max_num_seqs must be > 0, got {num_requests}")
    return num_requests * model.vocab_size * SAMPLER_BYTES_PER_LOGIT


def peak_activation_bytes(
    model: ModelSpec,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tensor_parallel_size: int = 1,
) -> float:
    """The profile run's torch peak above the weights: forward or sampler, whichever is larger.

    As vLLM's ``profile_run``: ``min(max_num_seqs, max_num_batched_tokens)``
    requests share the token budget, and the sampler runs once the forward
    pass's activations are freed, so the two peaks do not add.
    """
    num_requests = min(max_num_seqs, max_num_batched_tokens)
    return max(
        forward_activation_bytes(model, max_num_batched_tokens, tensor_parallel_size),
        sampler_activation_bytes(model, num_requests),
    )


def cudagraph_memory_bytes(num_layers_on_gpu: int) -> float:
    """vLLM's CUDA-graph pool estimate for a GPU holding ``num_layers_on_gpu`` layers."""
    return CUDA_GRAPH_BYTES_PER_LAYER * num_layers_on_gpu
