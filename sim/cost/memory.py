"""KV cache sizing: how many paged KV blocks fit next to the weights.

    usable_bytes  = hardware.memory_bytes * gpu_memory_utilization         [B]
    kv_pool_bytes = usable_bytes - model.weight_bytes - activation_reserve  [B]
    num_kv_blocks = floor(kv_pool_bytes / (block_size_tokens * model.kv_bytes_per_token))

This mirrors how vLLM sizes its cache: a fraction of device memory, minus the
weights, minus the peak transient memory of one profiled forward pass.
"""

from __future__ import annotations

import math

from sim.cost.specs import HardwareSpec, ModelSpec
from sim.errors import ConfigError

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192

# Peak live activations of a forward pass over N tokens are a few tensors of
# N x (hidden + intermediate) elements (residual stream, gate/up outputs,
# attention workspace, logits). A factor of 4 gives Llama-3-8B at 8192 tokens
# about 1.2 GB, the order of the activation peak vLLM's profiling run reports.
ACTIVATION_TENSORS_PER_TOKEN = 4.0

_GB = 1e9


def default_activation_reserve_bytes(
    model: ModelSpec, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
) -> float:
    """Bytes held back for activations when a step runs ``max_num_batched_tokens``.

    ``4 * tokens * (hidden + intermediate) * activation dtype bytes``, where
    activations are at least 2 bytes (bf16) even for 8- or 4-bit weights.
    """
    if max_num_batched_tokens <= 0:
        raise ConfigError(f"max_num_batched_tokens must be > 0, got {max_num_batched_tokens}")
    activation_dtype_bytes = max(model.weight_dtype_bytes, 2.0)
    return (
        ACTIVATION_TENSORS_PER_TOKEN
        * max_num_batched_tokens
        * (model.hidden_size + model.intermediate_size)
        * activation_dtype_bytes
    )


def num_kv_blocks(
    model: ModelSpec,
    hardware: HardwareSpec,
    block_size_tokens: int,
    gpu_memory_utilization: float,
    activation_reserve_bytes: float | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> int:
    """KV blocks of ``block_size_tokens`` tokens that fit (see module formula).

    ``activation_reserve_bytes=None`` uses ``default_activation_reserve_bytes``
    for ``max_num_batched_tokens``. Raises ConfigError when the weights and
    reserve do not fit, or leave no room for even one block.
    """
    if block_size_tokens <= 0:
        raise ConfigError(f"block_size_tokens must be > 0, got {block_size_tokens}")
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if activation_reserve_bytes is None:
        activation_reserve_bytes = default_activation_reserve_bytes(model, max_num_batched_tokens)
    elif not activation_reserve_bytes >= 0:
        raise ConfigError(f"activation_reserve_bytes must be >= 0, got {activation_reserve_bytes}")

    usable_bytes = hardware.memory_bytes * gpu_memory_utilization
    needed_bytes = model.weight_bytes + activation_reserve_bytes
    room = (
        f"{hardware.name} has {hardware.memory_bytes / _GB:.1f} GB"
        f" × {gpu_memory_utilization:.2f} usable"
    )
    if needed_bytes > usable_bytes:
        if model.weight_bytes > usable_bytes:
            need = f"{model.weight_bytes / _GB:.1f} GB of weights"
        else:
            need = (
                f"{model.weight_bytes / _GB:.1f} GB of weights"
                f" + {activation_reserve_bytes / _GB:.1f} GB activation reserve"
            )
        raise ConfigError(f"{model.name} needs {need} but {room}")

    block_bytes = block_size_tokens * model.kv_bytes_per_token
    blocks = math.floor((usable_bytes - needed_bytes) / block_bytes)
    if blocks < 1:
        raise ConfigError(
            f"{model.name} leaves {(usable_bytes - needed_bytes) / _GB:.3f} GB for KV cache"
            f" on {hardware.name}, less than one {block_size_tokens}-token block"
            f" ({block_bytes / _GB:.3f} GB)"
        )
    return blocks
