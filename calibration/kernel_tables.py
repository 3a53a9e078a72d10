"""``servesim calibrate --kernels``: time a model's operators here, as a kernel-table artifact.

The other sources of kernel tables (aiconfigurator-core, LLMServingSim
profiles) were measured on someone else's GPU. When a GPU is at hand, this
times the operators ``KernelCost`` composes, at the model's own shapes, with
PyTorch on that device, and writes them in the same artifact format
(``sim.cost.kernels.artifact``), so one cost model serves all three sources:

- ``gemm``: ``torch.nn.functional.linear`` for every distinct (n, k) of the
  model's dense layers and LM head (the full cross product of its n and k
  values, so the grid is rectangular), at each token count of the grid;
- ``context_attention``: causal ``scaled_dot_product_attention`` of
  ``batch`` prompts of ``isl`` tokens (grouped-query heads expanded);
- ``generation_attention``: one query token per sequence against ``kv``
  cached tokens, ``batch`` sequences;
- ``per_sequence``: the LM head and the sampler (softmax and one
  multinomial draw over the vocabulary) by sequences.

Times are medians over ``repeats`` runs after a warm-up, synchronised on CUDA.
Eager PyTorch attention is not vLLM's FlashAttention: the provenance says so,
and the artifact prices what this machine runs. Importing this module does not
import torch; ``measure_tables`` does.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.cost.kernels.artifact import KernelArtifact, KernelProvenance
from sim.cost.kernels.ops import layer_shapes
from sim.hardware.specs import ModelArchitecture

TOOL_VERSION = "1"
# The CLI's dtype names -> torch's, which the artifact's provenance records.
TORCH_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


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


def _timer(torch: Any, device: Any) -> Callable[[Callable[[], object], int], float]:
    """Median seconds of ``fn`` over ``repeats`` runs, after one warm-up run."""
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def median_s(fn: Callable[[], object], repeats: int) -> float:
        fn()
        sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return median_s


def _gemm_rows(
    torch: Any, device: Any, dtype: Any, arch: ModelArchitecture, grid: KernelGrid, timer: Any
) -> list[tuple[int, int, int, float]]:
    shapes = layer_shapes(arch, 1)
    pairs = [*shapes.gemms.values(), shapes.lm_head]
    ns, ks = sorted({n for n, _ in pairs}), sorted({k for _, k in pairs})
    rows = []
    for n in ns:
        for k in ks:
            weight = torch.randn(n, k, device=device, dtype=dtype)
            for m in grid.tokens:
                x = torch.randn(m, k, device=device, dtype=dtype)
                seconds = timer(
                    lambda x=x, w=weight: torch.nn.functional.linear(x, w), grid.repeats
                )
                rows.append((m, n, k, seconds))
            del weight
    return rows


def _attention_rows(
    torch: Any, device: Any, dtype: Any, arch: ModelArchitecture, grid: KernelGrid, timer: Any
) -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]]:
    heads, kv_heads, dim = arch.num_attention_heads, arch.num_kv_heads, arch.head_dim
    sdpa = torch.nn.functional.scaled_dot_product_attention
    group = heads // kv_heads

    def run(q: Any, k: Any, v: Any, causal: bool) -> object:
        # Grouped-query heads share K and V: expand them as eager attention does.
        return sdpa(
            q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=causal
        )

    context: list[tuple[float, ...]] = []
    generation: list[tuple[float, ...]] = []
    for batch in grid.batches:
        for length in grid.lengths:
            q = torch.randn(batch, heads, length, dim, device=device, dtype=dtype)
            kv = torch.randn(batch, kv_heads, length, dim, device=device, dtype=dtype)
            s = timer(lambda q=q, kv=kv: run(q, kv, kv, True), grid.repeats)
            context.append((heads, kv_heads, dim, batch, length, s))
            q1 = q[:, :, :1, :].contiguous()
            s = timer(lambda q1=q1, kv=kv: run(q1, kv, kv, False), grid.repeats)
            generation.append((heads, kv_heads, dim, batch, length, s))
    return context, generation


def _per_sequence_rows(
    torch: Any, device: Any, dtype: Any, arch: ModelArchitecture, grid: KernelGrid, timer: Any
) -> list[tuple[str, int, float]]:
    vocab, hidden = layer_shapes(arch, 1).lm_head
    weight = torch.randn(vocab, hidden, device=device, dtype=dtype)
    rows: list[tuple[str, int, float]] = []
    for seqs in grid.batches:
        x = torch.randn(seqs, hidden, device=device, dtype=dtype)
        logits = torch.nn.functional.linear(x, weight).float()
        rows.append(
            (
                "lm_head",
                seqs,
                timer(lambda x=x: torch.nn.functional.linear(x, weight), grid.repeats),
            )
        )
        rows.append(
            (
                "sampler",
                seqs,
                timer(
                    lambda z=logits: torch.multinomial(torch.softmax(z, dim=-1), 1), grid.repeats
                ),
            )
        )
    return rows


def measure_tables(
    arch: ModelArchitecture,
    device_name: str = "cpu",
    dtype_name: str = "bf16",
    grid_name: str = "gpu",
    progress: Callable[[str], None] | None = None,
) -> KernelArtifact:
    """Time ``arch``'s operators on ``device_name`` and return them as an artifact."""
    import torch

    device = torch.device(device_name)
    dtype = getattr(torch, TORCH_DTYPE_NAMES[dtype_name])
    grid = KERNEL_GRIDS[grid_name]
    timer = _timer(torch, device)
    say = progress or (lambda _: None)
    say("gemm")
    gemm = _gemm_rows(torch, device, dtype, arch, grid, timer)
    say("attention")
    context, generation = _attention_rows(torch, device, dtype, arch, grid, timer)
    say("lm head and sampler")
    per_sequence = _per_sequence_rows(torch, device, dtype, arch, grid, timer)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    provenance = KernelProvenance(
        source="servesim calibrate --kernels",
        licence="measured on this machine",
        gpu=gpu,
        device_name=gpu,
        framework="torch",
        framework_version=torch.__version__,
        dtype=TORCH_DTYPE_NAMES[dtype_name],
        kv_dtype=TORCH_DTYPE_NAMES[dtype_name],
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        tool="calibration.kernel_tables",
        tool_version=TOOL_VERSION,
        model=arch.name,
        kernels={
            "gemm": "torch.nn.functional.linear",
            "attention": "torch scaled_dot_product_attention (eager, GQA expanded)",
        },
        notes=f"grid {grid_name}, median of {grid.repeats} runs after a warm-up",
    )
    return KernelArtifact(provenance, _frames(gemm, context, generation, per_sequence))


def _frames(
    gemm: Iterable[tuple[int, int, int, float]],
    context: Iterable[tuple[float, ...]],
    generation: Iterable[tuple[float, ...]],
    per_sequence: Iterable[tuple[str, int, float]],
) -> dict[str, pd.DataFrame]:
    heads = ["num_heads", "num_kv_heads", "head_dim", "batch_size"]
    return {
        "gemm": pd.DataFrame(list(gemm), columns=["m", "n", "k", "latency_s"]),
        "context_attention": pd.DataFrame(
            list(context), columns=[*heads, "isl_tokens", "latency_s"]
        ),
        "generation_attention": pd.DataFrame(
            list(generation), columns=[*heads, "kv_tokens", "latency_s"]
        ),
        "per_sequence": pd.DataFrame(list(per_sequence), columns=["op", "num_seqs", "latency_s"]),
    }
