"""KV cache capacity as vLLM v1 computes it at start-up, one GPU's budget at a time.

vLLM (``Worker.determine_available_memory``, ``kv_cache_utils.get_num_blocks``)::

    requested  = ceil(total GPU memory x gpu_memory_utilization)
    available  = requested - weights - peak activations of the profile run
                 - non-torch memory - CUDA-graph estimate (vLLM >= 0.21)
    num_blocks = available // page_size // num_layers
    page_size  = 2 (K and V) x block_size x kv_heads x head_dim x kv dtype bytes

All per GPU, for the GPU of the largest pipeline stage; a speculative draft
model's weights and layers count too. Total memory, weights and block bytes
are computed, the rest estimated, each constant with its source below (the
terms and how they were checked: ``docs/vllm-fidelity.md``, "KV capacity as
vLLM computes it"). A sliding window is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.hardware.parallel import ParallelismConfig, kv_bytes_per_token_per_gpu, layout_problem
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
    return float(math.ceil(cuda_total_memory_bytes(hardware) * gpu_memory_utilization))


def activation_dtype_bytes(model: ModelSpec) -> float:
    """Activations stay at least 2 bytes (bf16) even with 8- or 4-bit weights."""
    return max(model.weight_dtype_bytes, 2.0)


def forward_activation_bytes(
    model: ModelSpec, max_num_batched_tokens: int, tensor_parallel_size: int = 1
) -> float:
    """Peak activations of one forward pass over ``max_num_batched_tokens`` tokens (estimate)."""
    width = model.hidden_size + model.intermediate_size / tensor_parallel_size
    return (
        ACTIVATION_TENSORS_PER_TOKEN
        * max_num_batched_tokens
        * width
        * activation_dtype_bytes(model)
    )


def sampler_activation_bytes(model: ModelSpec, num_requests: int) -> float:
    """Peak of the dummy sampler run over ``num_requests`` rows of logits (estimate)."""
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


# vLLM's CacheConfig.block_size choices (``BlockSize = Literal[1, 8, 16, 32, 64,
# 128]`` in vllm/config.py, later vllm/config/cache.py); vLLM refuses any other.
# Newer releases add 256, which not every version modelled here accepts, so it is
# refused too.
VLLM_BLOCK_SIZES_TOKENS: tuple[int, ...] = (1, 8, 16, 32, 64, 128)


def block_size_problem(block_size_tokens: int) -> str | None:
    """Why vLLM would refuse ``block_size_tokens`` tokens per KV block, or None."""
    if block_size_tokens in VLLM_BLOCK_SIZES_TOKENS:
        return None
    allowed = ", ".join(map(str, VLLM_BLOCK_SIZES_TOKENS))
    return f"engine.block_size_tokens {block_size_tokens} is not one of vLLM's: {allowed}"


SOURCE_SCENARIO = "engine.num_kv_blocks"
"""``engine_settings.num_kv_blocks_source`` when the scenario gave the count (vLLM's log)."""
SOURCE_ESTIMATE = "memory_profile_estimate"
"""``engine_settings.num_kv_blocks_source`` when the count comes from :func:`kv_cache_budget`."""


@dataclass(frozen=True, slots=True)
class KvSizing:
    """The engine settings vLLM's start-up profile sizes the KV cache from."""

    block_size_tokens: int  # tokens per KV block (engine.block_size_tokens)
    gpu_memory_utilization: float  # fraction of the GPU's memory vLLM may use, 0-1
    max_num_batched_tokens: int  # the profile run's batch, in tokens
    max_num_seqs: int  # the requests the profile run spreads those tokens over
    estimate_cudagraph_memory: bool = True  # subtract vLLM >= 0.21's CUDA-graph estimate


@dataclass(frozen=True, slots=True)
class KvCacheBudget:
    """One GPU's start-up memory budget, in bytes, term by term (see the module formula)."""

    total_bytes: float  # computed: what CUDA reports
    requested_bytes: float  # computed: ceil(total x gpu_memory_utilization)
    weights_bytes: float  # computed: weight bytes / num_gpus (the target's)
    activation_bytes: float  # estimated: the profile run's torch peak
    non_torch_bytes: float  # estimated constant
    cudagraph_bytes: float  # estimated; 0 when not subtracted
    block_bytes: float  # computed: one block of every layer on this GPU, draft's included
    block_size_tokens: int
    draft_weights_bytes: float = 0.0  # computed: the draft's weight bytes / tp; 0: no draft

    @property
    def available_bytes(self) -> float:
        """What is left for the KV cache (vLLM logs it as "Available KV cache memory")."""
        return (
            self.requested_bytes
            - self.weights_bytes
            - self.draft_weights_bytes
            - self.activation_bytes
            - self.non_torch_bytes
            - self.cudagraph_bytes
        )

    @property
    def num_blocks(self) -> int:
        """Whole blocks that fit, 0 if none (``available // page_size // num_layers``)."""
        return max(math.floor(self.available_bytes / self.block_bytes), 0)


def kv_cache_budget(
    model: ModelSpec,
    hardware: HardwareSpec,
    parallelism: ParallelismConfig,
    sizing: KvSizing,
    draft: ModelSpec | None = None,
) -> KvCacheBudget:
    """The budget of the GPU holding the largest pipeline stage (no fit checks);
    ``draft``: a speculative draft model sharing the GPUs and the KV pool (module)."""
    block_size_tokens = sizing.block_size_tokens
    problem = block_size_problem(block_size_tokens) or layout_problem(model, parallelism)
    draft_weights_bytes, draft_kv_bytes_per_token = 0.0, 0.0
    if draft is not None:
        # Split over the tensor-parallel GPUs as the target; whole on one stage.
        draft_layout = ParallelismConfig(tensor_parallel_size=parallelism.tensor_parallel_size)
        draft_problem = layout_problem(draft, draft_layout)
        if problem is None and draft_problem is not None:
            problem = f"speculative.draft_model: {draft_problem}"
        draft_weights_bytes = draft.weight_bytes / parallelism.tensor_parallel_size
        draft_kv_bytes_per_token = kv_bytes_per_token_per_gpu(draft, draft_layout)
    if problem is not None:
        raise ConfigError(problem)
    layers_on_gpu = math.ceil(model.num_layers / parallelism.pipeline_parallel_size)
    return KvCacheBudget(
        total_bytes=cuda_total_memory_bytes(hardware),
        requested_bytes=requested_memory_bytes(hardware, sizing.gpu_memory_utilization),
        weights_bytes=model.weight_bytes / parallelism.num_gpus,
        activation_bytes=peak_activation_bytes(
            model,
            sizing.max_num_batched_tokens,
            sizing.max_num_seqs,
            parallelism.tensor_parallel_size,
        ),
        non_torch_bytes=NON_TORCH_BYTES,
        cudagraph_bytes=cudagraph_memory_bytes(layers_on_gpu)
        if sizing.estimate_cudagraph_memory
        else 0.0,
        block_bytes=block_size_tokens
        * (kv_bytes_per_token_per_gpu(model, parallelism) + draft_kv_bytes_per_token),
        block_size_tokens=block_size_tokens,
        draft_weights_bytes=draft_weights_bytes,
    )


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def check_budget(
    budget: KvCacheBudget,
    model: ModelSpec,
    hardware: HardwareSpec,
    max_model_len_tokens: int,
    num_kv_blocks_given: int | None = None,
) -> int:
    """The pool's blocks (``num_kv_blocks_given``, the count vLLM logged, else
    ``budget.num_blocks``), or a one-line ConfigError where vLLM's start-up checks
    (``_check_enough_kv_cache_memory``) would refuse to start."""
    share = (
        f"hardware {hardware.name}'s {_gib(budget.total_bytes)} x engine.gpu_memory_utilization"
        f" = {_gib(budget.requested_bytes)}"
    )
    weights_bytes = budget.weights_bytes + budget.draft_weights_bytes
    draft = (
        f" and its speculative.draft_model's ({_gib(budget.draft_weights_bytes)})"
        if budget.draft_weights_bytes
        else ""
    )
    if weights_bytes > budget.requested_bytes:
        raise ConfigError(
            f"the weights of model {model.name} ({_gib(budget.weights_bytes)} per GPU){draft}"
            f" exceed {share}; use more GPUs (parallelism) or smaller weights (quantization)"
        )
    needed = math.ceil(max_model_len_tokens / budget.block_size_tokens)  # one whole request
    if num_kv_blocks_given is not None:
        if num_kv_blocks_given < needed:
            raise ConfigError(
                f"engine.num_kv_blocks {num_kv_blocks_given} holds"
                f" {num_kv_blocks_given * budget.block_size_tokens} tokens, less than one request"
                f" of engine.max_model_len_tokens {max_model_len_tokens} ({needed} blocks of"
                f" {budget.block_size_tokens}; vLLM refuses to start); raise num_kv_blocks or"
                " lower max_model_len_tokens"
            )
        # A logged count is vLLM's own and fit its GPU; one whose KV alone exceeds
        # the GPU's whole memory is a typo that vLLM could never allocate (CUDA out
        # of memory). The weights are not subtracted: their per-GPU share is not
        # modelled under expert parallelism (docs/vllm-fidelity.md), and a real count
        # there (33,510 blocks of Qwen3-30B-A3B per RTX PRO 6000 under EP2) fits
        # beside the expert shard vLLM holds, not beside the whole model.
        if num_kv_blocks_given * budget.block_bytes > budget.total_bytes:
            raise ConfigError(
                f"engine.num_kv_blocks {num_kv_blocks_given:,} of"
                f" {budget.block_bytes / MIB:.2f} MiB need"
                f" {_gib(num_kv_blocks_given * budget.block_bytes)} per GPU, more than"
                f" hardware {hardware.name}'s whole {_gib(budget.total_bytes)} (vLLM could"
                " not allocate them); give the count vLLM logged, or leave it out to"
                " estimate it"
            )
        return num_kv_blocks_given
    blocks = budget.num_blocks
    if blocks < 1:
        raise ConfigError(
            f"no memory for the KV cache: {share} minus weights {_gib(budget.weights_bytes)}"
            f"{draft}, activations {_gib(budget.activation_bytes)}"
            " (scheduler.max_num_batched_tokens, max_num_seqs), non-torch"
            f" {_gib(budget.non_torch_bytes)} and CUDA graphs {_gib(budget.cudagraph_bytes)}"
            f" leaves {_gib(budget.available_bytes)}, less than one block"
            f" ({budget.block_bytes / MIB:.2f} MiB)"
        )
    if blocks < needed:
        raise ConfigError(
            f"engine.max_model_len_tokens {max_model_len_tokens} needs {needed} KV blocks but"
            f" {blocks} fit in {_gib(budget.available_bytes)} (vLLM refuses to start);"
            " lower max_model_len_tokens or raise engine.gpu_memory_utilization"
        )
    return blocks


def vllm_num_kv_blocks(
    model: ModelSpec,
    hardware: HardwareSpec,
    parallelism: ParallelismConfig,
    sizing: KvSizing,
    *,
    max_model_len_tokens: int,
    draft: ModelSpec | None = None,
    num_kv_blocks_given: int | None = None,
) -> int:
    """KV blocks a replica holds: ``num_kv_blocks_given`` (vLLM's log) or as vLLM's
    start-up profile would size them, checked as vLLM checks them (``check_budget``);
    ``draft``: a speculative draft model sharing the GPUs and the pool."""
    budget = kv_cache_budget(model, hardware, parallelism, sizing, draft)
    return check_budget(budget, model, hardware, max_model_len_tokens, num_kv_blocks_given)
