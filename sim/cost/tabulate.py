"""Step prices as arrays: what a compiled loop reads instead of a cost model's insides.

``tabulate(cost, max_num_seqs, max_tokens)`` is the one public way the speed
paths (``sim.fast.compiled``) get a cost model's prices: three arrays, the
``cost`` constants (a roofline's five, the engine CPU's five), the kernel
``tables`` and their ``layout`` (the slot indices below), for every step of up
to ``max_num_seqs`` sequences and ``max_tokens`` tokens. A cost model it does
not tabulate (``roofline_of`` and ``kernel_cost_of`` say None) is priced by its
own ``step_s`` on the Python path. It lives in ``sim.cost`` because it reads
the models' parts; nothing outside ``sim.cost`` does.

Which of ``KernelCost``'s terms are tabulated (those of the step's tokens alone
and of its sequences alone, computed by ``KernelCost``'s own methods or their
operations elementwise, so its bits) and what ``why_not`` leaves to the Python
path: ``docs/dev/speed.md``, "Kernel tables in the loop".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np

from sim.config import FloatArray, IntArray
from sim.cost.engine_cpu import (
    CPU_ASYNC_SCHEDULING,
    CPU_PER_STEP_S,
    NUM_COSTS,
    EngineCpuCost,
)
from sim.cost.kernels.config import kernel_cost_class
from sim.cost.kernels.expert_parallel import ACTIVATION_BYTES, ExpertParallelMoE
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.ops import expected_active_experts
from sim.cost.kernels.price import (
    ALLREDUCE,
    DENSE,
    EMBED_NORM,
    EXTRAPOLATES,
    HAS_MEMORY,
    HAS_PIPELINE,
    KIND,
    LAYOUT_SIZE,
    LM_HEAD,
    LM_SAMPLER,
    LOGITS,
    NUM_LAYERS,
    NUM_LM_OPS,
    NUM_S,
    NUM_T,
    PIPELINE,
    PROFILE_STEP,
    ROOFLINE,
    SAMPLER,
)
from sim.cost.roofline import RooflineCost

if TYPE_CHECKING:  # loaded where kernel tables are built (kernel_cost_of)
    from sim.cost.kernels.cost import KernelCost

# Roofline constants (``cost`` array, float64), by index (sim.cost.roofline), then
# the engine's CPU work (sim.cost.engine_cpu's slots, CPU_PER_STEP_S on; a bare GPU
# model's leave its prices unchanged to the bit: ``with_cpu_s``).
S_PER_DENSE_TOKEN, S_PER_PAIR, WEIGHT_S, S_PER_KV_TOKEN, S_PER_LAYER_TOKEN = 0, 1, 2, 3, 4
# The kernel tables' ``layout`` (its slots, and the functions that read it, in
# ``sim.cost.kernels.price``): KernelCost's attention grids and skew fit, then the
# per-token and per-sequence tables below.

# The cost models tabulated (``roofline_of``, ``kernel_cost_of``).
PlayedCost: TypeAlias = "RooflineCost | KernelCost | EngineCpuCost"
# (``cost`` constants, kernel ``tables``, ``layout``): the arrays a compiled loop reads.
PriceArrays = tuple[FloatArray, FloatArray, IntArray]


def roofline_of(cost: object) -> RooflineCost | None:
    """The roofline that prices ``cost``'s GPU work when the loop can play ``cost``:
    a one-GPU roofline (a relabelled one too, if it prices steps as the roofline),
    bare or inside exactly an ``EngineCpuCost``; else None. A parallel replica's
    roofline adds all-reduces and pipeline stages the loop's constants do not hold."""
    gpu = cost.gpu if type(cost) is EngineCpuCost else cost
    if (
        isinstance(gpu, RooflineCost)
        and type(gpu).step_s is RooflineCost.step_s
        and gpu.parallelism is None
    ):
        return gpu
    return None


def tabulate(cost: PlayedCost, max_num_seqs: int, max_tokens: int) -> PriceArrays:
    """The loop's ``cost``, ``tables`` and ``layout`` arrays for ``cost`` (``loop``'s
    indices), for steps of up to ``max_num_seqs`` sequences and ``max_tokens`` tokens."""
    constants = np.zeros(NUM_COSTS)
    roofline = roofline_of(cost)
    if roofline is not None:
        constants[S_PER_DENSE_TOKEN] = roofline._s_per_dense_token
        constants[S_PER_PAIR] = roofline._s_per_attention_pair
        constants[WEIGHT_S] = roofline._weight_s
        constants[S_PER_KV_TOKEN] = roofline._s_per_kv_token
        constants[S_PER_LAYER_TOKEN] = roofline._s_per_layer_token
        tables, layout = np.zeros(0), np.zeros(LAYOUT_SIZE, dtype=np.int64)
        layout[KIND] = ROOFLINE
    else:
        kernel = kernel_cost_of(cost)
        assert kernel is not None  # why_not said so
        tables, layout = arrays(kernel, max_num_seqs, max_tokens)
    constants[CPU_ASYNC_SCHEDULING] = 1.0  # the bare GPU model: 0 + max(gpu, 0) is gpu
    if isinstance(cost, EngineCpuCost):
        constants[CPU_PER_STEP_S:] = cost.costs[CPU_PER_STEP_S:]
    return constants, tables, layout


def kernel_cost_of(cost: object) -> KernelCost | None:
    """The kernel tables that price ``cost``'s GPU work, bare or inside exactly an
    ``EngineCpuCost`` (a subclass may price otherwise: not played); else None."""
    gpu = cost.gpu if type(cost) is EngineCpuCost else cost
    kind = kernel_cost_class()  # (None: no kernel tables were built)
    return cast("KernelCost", gpu) if kind is not None and type(gpu) is kind else None


def max_step_tokens(max_num_batched_tokens: int, max_num_seqs: int, longest_tokens: int) -> int:
    """The most tokens a step can compute: the budget, or every sequence's longest."""
    return min(max_num_batched_tokens, max_num_seqs * longest_tokens)


def why_not(kernel: KernelCost, max_num_seqs: int, max_tokens: int) -> str | None:
    """Why the loop cannot play ``kernel`` for steps of up to ``max_num_seqs``
    sequences and ``max_tokens`` tokens; None if it can."""
    profile = kernel._profile
    # Every table the loop reads (the per-token and per-sequence ones are tabulated
    # before the run: a lookup past a grid's last point there would warn for steps
    # the run may never take).
    factor = None if kernel._mixed_factor is None else kernel._mixed_factor.grid
    grids: list[Grid | None] = [
        kernel._prefill_attn, kernel._decode_attn, kernel._mixed_attn, factor,
    ]  # fmt: skip
    # (grid, the largest coordinate on each axis; None: no bound: GEMM n, split into
    # blocks inside the grid, gemm_s). Attention is looked up as the run goes: past
    # a grid's edge the loop hands the run over.
    reach: list[tuple[Grid, Sequence[float | None]]] = []
    max_seqs = min(max_num_seqs, max_tokens)
    if profile is not None:
        reach += [(grid, (max_tokens,)) for grid, _ in profile._layer_ops]
        reach += [(grid, (max_tokens,)) for grid in profile._step_ops]
        if profile._moe is not None:  # by tokens and the experts they activate
            experts, top_k = profile._moe_shape
            active = expected_active_experts(float(max_tokens), experts, top_k)
            reach.append((profile._moe, (max_tokens, active)))
    else:
        assert kernel._gemm is not None  # no profile: the GEMM table prices the dense ops
        reach += [(kernel._gemm, (max_tokens, None, k)) for _, k in kernel.shapes.gemms.values()]
    if kernel._lm_ops:
        reach += [(grid, (max_seqs,)) for grid in kernel._lm_ops]
    else:
        assert kernel._gemm is not None  # (KernelCost._build_dense)
        reach.append((kernel._gemm, (max_seqs, None, kernel.shapes.lm_head[1])))
    moe = kernel._moe
    if isinstance(moe, ExpertParallelMoE):  # the group's tokens, and their collectives
        group_tokens = moe.group_tokens(max_tokens)
        reach.append((moe._moe, moe.experts_point(group_tokens)))
        message_bytes = group_tokens * kernel.arch.hidden_size * ACTIVATION_BYTES
        collectives = (moe._all_gather, moe._reduce)
        reach += [(grid, (message_bytes,)) for grid in collectives if grid is not None]
    elif moe is not None:
        reach.append((moe, (max_tokens,)))
    if kernel._allreduce is not None:
        message_bytes = max_tokens * kernel.arch.hidden_size * ACTIVATION_BYTES
        reach.append((kernel._allreduce, (message_bytes,)))
    grids += [grid for grid, _ in reach]
    if any(grid is not None and min(map(len, grid.axes)) < 2 for grid in grids):
        return "a kernel table with one point on an axis"
    for grid, coords in reach:
        for axis, x in zip(grid.axes, coords, strict=True):
            if x is not None and x > axis[-1]:
                return (
                    f"kernel table {grid.name}: steps of up to {max_tokens} tokens and "
                    f"{max_seqs} sequences reach past its last point (extrapolated)"
                )
    return None


def arrays(kernel: KernelCost, max_num_seqs: int, max_tokens: int) -> tuple[FloatArray, IntArray]:
    """``loop.run``'s ``tables`` and ``layout`` for steps of up to ``max_num_seqs``
    sequences and ``max_tokens`` tokens (``why_not`` said the loop plays them)."""
    # KernelCost's attention grids and skew fit first (their offsets hold), read
    # by the same functions (``price``), which here give NaN past a grid's edge.
    layout = np.array(kernel.price_layout, dtype=np.int64)
    layout[EXTRAPOLATES] = 0
    layout[NUM_LAYERS] = kernel.arch.num_layers
    # A step has no more sequences than tokens.
    layout[NUM_T] = num_t = max_tokens + 1
    layout[NUM_S] = num_s = min(max_num_seqs, max_tokens) + 1
    memory = kernel._memory
    parts: list[list[float]] = [kernel.price_tables]

    def put(index: int, values: list[float]) -> None:
        layout[index] = sum(len(part) for part in parts)
        parts.append(values)

    tokens = np.arange(1, num_t, dtype=np.float64)
    profile = kernel._profile
    if profile is None:
        put(DENSE, [0.0, *dense_layer_s(kernel, tokens).tolist()])
        put(PROFILE_STEP, [0.0] * num_t)
    else:  # (its own methods: a profile's ops are few 1-D lookups)
        put(DENSE, [0.0] + [kernel.dense_layer_s(t) for t in range(1, num_t)])
        put(PROFILE_STEP, [0.0] + [profile.step_s(float(t)) for t in range(1, num_t)])
    layout[HAS_MEMORY] = memory is not None
    with_sampler = not kernel._lm_ops
    if memory is not None:  # MemoryOps.step_s's terms: embedding, final norm, sampler
        # (MemoryOps' arithmetic, elementwise over the token counts.)
        terms = memory.step_terms(tokens, 1.0, with_sampler)  # type: ignore[arg-type]
        embedding, final_norm = np.asarray(terms[0][1]), np.asarray(terms[1][1])
        put(EMBED_NORM, [0.0, *((0.0 + embedding) + final_norm).tolist()])
        sampler = [memory.step_terms(1.0, float(s), with_sampler)[2][1] for s in range(num_s)]
        put(SAMPLER, sampler)
    # The embedding's all-reduce and the logits' all-gather (KernelCost.per_step_s's
    # tensor-parallel terms, on every route; 0 on one GPU).
    put(ALLREDUCE, allreduce_s(kernel, num_t))
    put(LOGITS, [kernel.logits_all_gather_s(s) for s in range(num_s)])
    if kernel._lm_ops:  # per_sequence tables: LM head, then sampler
        layout[NUM_LM_OPS] = len(kernel._lm_ops)
        lm_head, lm_sampler = kernel._lm_ops
        put(LM_HEAD, [0.0] + [lm_head(float(s)) for s in range(1, num_s)])
        put(LM_SAMPLER, [0.0] + [lm_sampler(float(s)) for s in range(1, num_s)])
    else:
        n, k = kernel.shapes.lm_head
        seqs = np.arange(1, num_s, dtype=np.float64)
        put(LM_HEAD, [0.0, *gemm_s(kernel, seqs, n, k).tolist()])
    layout[HAS_PIPELINE] = kernel.pp > 1
    if kernel.pp > 1:  # KernelCost.per_step_s's stage transfers
        put(PIPELINE, [kernel.pipeline_transfer_s(t) for t in range(num_t)])

    tables = np.array([x for part in parts for x in part], dtype=np.float64)
    return tables, layout


# -- KernelCost's token-only terms at many token counts at once ----------------------
# Elementwise, the same float operations in the same order as the methods they
# name (Grid.many gives Grid.__call__'s bits); tests/test_compiled_kernels.py holds
# every table to the methods themselves.


def dense_layer_s(kernel: KernelCost, tokens: FloatArray) -> FloatArray:
    """``KernelCost.dense_layer_s`` at each of ``tokens`` (no per-layer profile)."""
    total = np.zeros(len(tokens))
    for n, k in kernel.shapes.gemms.values():
        total += gemm_s(kernel, tokens, n, k)
    moe = kernel._moe
    if isinstance(moe, ExpertParallelMoE):  # (a few lookups a token count: its own calls)
        total += np.array([moe(t) for t in tokens.tolist()])
    elif moe is not None:
        total += moe.many(tokens)
    if kernel._memory is not None:
        total += kernel._memory.layer_s(tokens)  # type: ignore[arg-type]
    num_tokens = tokens.astype(np.int64)
    total += 2.0 * np.array(allreduce_s(kernel, len(tokens) + 1))[num_tokens]
    return total


def gemm_s(kernel: KernelCost, m: FloatArray, n: int, k: int) -> FloatArray:
    """``KernelCost.gemm_s`` at each of ``m``."""
    gemm = kernel._gemm
    assert gemm is not None
    blocks = -(-n // int(gemm.axes[1][-1]))
    out: FloatArray = blocks * gemm.many(m, n / blocks, k)
    return out


def allreduce_s(kernel: KernelCost, num_t: int) -> list[float]:
    """``KernelCost.allreduce_s`` of the hidden states of 0 to ``num_t - 1`` tokens."""
    if kernel.tp == 1:
        return [0.0] * num_t  # (what allreduce_s answers on one GPU)
    hidden = kernel.arch.hidden_size
    return [kernel.allreduce_s(t * hidden * ACTIVATION_BYTES) for t in range(num_t)]
