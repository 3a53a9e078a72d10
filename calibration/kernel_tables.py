"""``servesim calibrate --kernels``: time a model's operators here, as a kernel-table artifact.

The other sources of kernel tables (aiconfigurator-core, LLMServingSim profiles)
were measured on someone else's GPU. This times the operators ``KernelCost``
composes, at the model's own shapes, with PyTorch on this device, and writes them
in the same artifact format (``sim.cost.kernels.artifact``): GEMMs over the full
cross product of the model's (n, k) so the grid is rectangular, causal context
attention, one-token generation attention, and per sequence the LM head and the
sampler. Times are medians over ``repeats`` runs after a warm-up, synchronised on
CUDA. Eager PyTorch attention is not vLLM's FlashAttention: the provenance says
so, and the artifact prices what this machine runs. Importing this module does not
import torch; ``measure_tables`` does.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.cost.kernels.artifact import KernelArtifact, KernelProvenance
from sim.cost.kernels.ops import layer_shapes
from sim.cost.provenance import utc_now
from sim.hardware.specs import ModelSpec

TOOL_VERSION = "1"


@dataclass(frozen=True)
class KernelGrid:
    """Which sizes to time: token counts, batches, sequence lengths, repeats."""

    tokens: tuple[int, ...]
    batches: tuple[int, ...]
    lengths: tuple[int, ...]
    repeats: int


KERNEL_GRIDS = {
    # A few seconds on a CPU with the tiny model: for tests and dry runs.
    "small": KernelGrid((1, 4, 16, 64), (1, 4), (16, 64, 256), 3),
    # A GPU: token counts to the usual 2048-token budget, batches to 256, contexts to 16k.
    "gpu": KernelGrid(
        (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
        (1, 2, 4, 8, 16, 32, 64, 128, 256),
        (16, 64, 256, 1024, 4096, 16384),
        10,
    ),
}


def measure_tables(
    arch: ModelSpec,
    device_name: str = "cpu",
    dtype_name: str = "bf16",
    grid_name: str = "gpu",
    progress: Callable[[str], None] | None = None,
) -> KernelArtifact:
    """Time ``arch``'s operators on ``device_name`` and return them as an artifact."""
    # Imported here: torch is optional (the calibrate extra): the simulator and --help run without
    # it.
    import torch

    from calibration.model import TORCH_DTYPES

    device = torch.device(device_name)
    dtype = TORCH_DTYPES[dtype_name]
    dtype_text = str(dtype).removeprefix("torch.")  # float32 ..., as the provenance records it
    grid = KERNEL_GRIDS[grid_name]
    linear = torch.nn.functional.linear

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed(fn: Callable[..., object]) -> float:
        """Median seconds of ``fn`` over the grid's repeats, after one warm-up run."""
        fn()
        sync()
        times = []
        for _ in range(grid.repeats):
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def randn(*size: int) -> Any:
        return torch.randn(*size, device=device, dtype=dtype)

    say = progress or (lambda _: None)
    say("gemm")
    shapes = layer_shapes(arch, 1)
    pairs = [*shapes.gemms.values(), shapes.lm_head]
    gemm = []
    for n in sorted({n for n, _ in pairs}):
        for k in sorted({k for _, k in pairs}):
            weight = randn(n, k)
            for m in grid.tokens:
                x = randn(m, k)
                gemm.append((m, n, k, timed(lambda x=x, w=weight: linear(x, w))))
            del weight
    say("attention")
    heads, kv_heads, dim = arch.num_attention_heads, arch.num_kv_heads, arch.head_dim
    group = heads // kv_heads

    def attention(q: Any, kv: Any, causal: bool) -> object:
        # Grouped-query heads share K and V: expand them as eager attention does.
        k, v = kv.repeat_interleave(group, 1), kv.repeat_interleave(group, 1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    context, generation = [], []
    for batch in grid.batches:
        for length in grid.lengths:
            q, kv = randn(batch, heads, length, dim), randn(batch, kv_heads, length, dim)
            s = timed(lambda q=q, kv=kv: attention(q, kv, True))
            context.append((heads, kv_heads, dim, batch, length, s))
            q1 = q[:, :, :1, :].contiguous()
            s = timed(lambda q1=q1, kv=kv: attention(q1, kv, False))
            generation.append((heads, kv_heads, dim, batch, length, s))
    say("lm head and sampler")
    vocab, hidden = shapes.lm_head
    weight = randn(vocab, hidden)
    per_sequence: list[tuple[str, int, float]] = []
    for seqs in grid.batches:
        x = randn(seqs, hidden)
        logits = linear(x, weight).float()
        per_sequence.append(("lm_head", seqs, timed(lambda x=x: linear(x, weight))))
        sample = timed(lambda z=logits: torch.multinomial(torch.softmax(z, dim=-1), 1))
        per_sequence.append(("sampler", seqs, sample))
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    provenance = KernelProvenance(
        source="servesim calibrate --kernels",
        licence="measured on this machine",
        gpu=gpu,
        device_name=gpu,
        framework="torch",
        framework_version=torch.__version__,
        dtype=dtype_text,
        kv_dtype=dtype_text,
        date=utc_now(),
        tool="calibration.kernel_tables",
        tool_version=TOOL_VERSION,
        model=arch.name,
        kernels={
            "gemm": "torch.nn.functional.linear",
            "attention": "torch scaled_dot_product_attention (eager, GQA expanded)",
        },
        notes=f"grid {grid_name}, median of {grid.repeats} runs after a warm-up",
    )
    heads_columns = ["num_heads", "num_kv_heads", "head_dim", "batch_size"]
    tables = {
        "gemm": pd.DataFrame(gemm, columns=["m", "n", "k", "latency_s"]),
        "context_attention": pd.DataFrame(
            context, columns=[*heads_columns, "isl_tokens", "latency_s"]
        ),
        "generation_attention": pd.DataFrame(
            generation, columns=[*heads_columns, "kv_tokens", "latency_s"]
        ),
        "per_sequence": pd.DataFrame(per_sequence, columns=["op", "num_seqs", "latency_s"]),
    }
    return KernelArtifact(provenance, tables)
