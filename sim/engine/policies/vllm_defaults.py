"""vLLM's default batch limits for a GPU, as ``EngineArgs.get_batch_defaults`` picks them.

When the user sets neither limit, vLLM picks them by device (memory and name)
and usage context (``vllm serve`` or the ``LLM`` class), then clamps them to the
model length; this module is that table and that clamp.
"""

from __future__ import annotations

from typing import Literal

from sim.engine.scheduler import FALLBACK_LIMITS, BatchLimits

UsageContext = Literal["openai_api_server", "llm_class"]

# vLLM calls a device "large" from 70 GiB of total memory, except A100s
# (larger batches cut their throughput, vLLM PR #17885).
_LARGE_GPU_MEMORY_BYTES = 70 * 2**30

# (max_num_batched_tokens, max_num_seqs) per usage context.
_LARGE_GPU = {"llm_class": (16384, 1024), "openai_api_server": (8192, 1024)}
_OTHER_GPU = {
    "llm_class": (8192, 256),
    "openai_api_server": (FALLBACK_LIMITS.max_num_batched_tokens, FALLBACK_LIMITS.max_num_seqs),
}
# CPUs: per unit of world size (tensor x pipeline parallel).
_CPU_PER_WORKER = {"llm_class": (4096, 256), "openai_api_server": (2048, 128)}


def device_class(hardware_name: str, memory_bytes: float) -> Literal["large_gpu", "gpu", "cpu"]:
    """How vLLM classifies a device for its batch defaults."""
    name = hardware_name.lower()
    if name.startswith("cpu"):
        return "cpu"
    if memory_bytes >= _LARGE_GPU_MEMORY_BYTES and "a100" not in name:
        return "large_gpu"
    return "gpu"


def batch_defaults(
    hardware_name: str,
    memory_bytes: float,
    world_size: int,
    usage: UsageContext,
    max_model_len_tokens: int,
    chunked_prefill: bool,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
) -> BatchLimits:
    """Fill in whichever of the two limits is ``None`` as vLLM does (``memory_bytes``:
    one device's; ``world_size``: devices of one replica, for CPUs)."""
    kind = device_class(hardware_name, memory_bytes)
    if kind == "cpu":
        tokens, seqs = _CPU_PER_WORKER[usage]
        default_tokens, default_seqs = tokens * world_size, seqs * world_size
    else:
        default_tokens, default_seqs = (_LARGE_GPU if kind == "large_gpu" else _OTHER_GPU)[usage]
    tokens_out = default_tokens if max_num_batched_tokens is None else max_num_batched_tokens
    seqs_out = default_seqs if max_num_seqs is None else max_num_seqs
    if max_num_batched_tokens is None:
        if not chunked_prefill:  # a whole prompt must fit one step
            tokens_out = max(max_model_len_tokens, tokens_out)
        tokens_out = min(seqs_out * max_model_len_tokens, tokens_out)
    if max_num_seqs is None:
        seqs_out = min(seqs_out, tokens_out)
    return BatchLimits(tokens_out, seqs_out)
