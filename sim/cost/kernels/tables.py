"""An artifact's tables as ``Grid``s for one model layout (latency in seconds).

Built once per cost model, filtered to the model's shapes; a shape the artifact
does not cover raises ``ConfigError`` naming the table and shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.config import FloatArray
from sim.cost.kernels import price
from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.grid import Grid, extrapolate_holes, interpolate_holes, mean_on_grid
from sim.errors import ConfigError
from sim.hardware.specs import MoeSpec

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd


def _rows(artifact: KernelArtifact, table: str, where: str, **match: int) -> pd.DataFrame:
    """Rows of ``table`` whose columns equal ``match``; ConfigError when none."""
    if not artifact.has(table):
        raise ConfigError(f"kernel artifact ({artifact.label}): no {table} table, needed {where}")
    rows = artifact.tables[table]
    selected = rows
    for column, value in match.items():
        selected = selected[selected[column] == value]
    if len(selected) == 0:
        wanted = ", ".join(f"{c}={v}" for c, v in match.items())
        keys = list(match)
        have = sorted({tuple(int(x) for x in r) for r in rows[keys].itertuples(index=False)})
        listing = "; ".join("/".join(map(str, h)) for h in have[:12])
        raise ConfigError(
            f"kernel artifact ({artifact.label}): {table} has no rows for {wanted} "
            f"({where}); measured {'/'.join(keys)}: {listing}"
        )
    return selected


def _grid(name: str, rows: pd.DataFrame, *axes: str) -> Grid:
    """``rows``' latencies on the grid of their columns ``axes`` (holes filled along the first)."""
    return Grid.from_points(name, axes, tuple(rows[axis] for axis in axes), rows["latency_s"])


def gemm_grid(artifact: KernelArtifact) -> Grid:
    """GEMM latency by (m, n, k)."""
    return _grid("gemm", _rows(artifact, "gemm", "for the dense layers"), "m", "n", "k")


class AttentionGrids(NamedTuple):
    """``attention_grids``' grids for one head layout, and what of them is derived."""

    prefill: Grid  # context attention by batch x prompt length
    decode: Grid  # generation attention by batch x KV length
    # How the decode grid was derived from another head layout's rows (one phrase),
    # None when the tables time this layout (derived_decode_source).
    derived: str | None


def derived_decode_source(
    rows: pd.DataFrame, num_heads: int, num_kv_heads: int, head_dim: int
) -> tuple[int, int] | None:
    """``(num_heads, num_kv_heads)`` of the generation-attention rows that price a
    multi-head layout the tables do not time, or None (timed, not multi-head, or no
    source of this ``head_dim``): the multi-head rows nearest in KV heads (the larger
    on a tie), else the grouped rows of its query heads with the most KV heads. Why
    that is sound (decode attention is memory-bound): ``docs/kernels.md``.
    """
    if num_heads != num_kv_heads:
        return None
    layouts = rows.loc[rows["head_dim"] == head_dim, ["num_heads", "num_kv_heads"]]
    timed = {(int(h), int(kv)) for h, kv in layouts.itertuples(index=False)}
    if (num_heads, num_kv_heads) in timed:
        return None
    multi_head = [kv for h, kv in timed if h == kv]
    if multi_head:  # the nearest in KV heads (the larger on a tie)
        kv = min(multi_head, key=lambda kv: (abs(np.log(kv / num_kv_heads)), -kv))
        return kv, kv
    grouped = [kv for h, kv in timed if h == num_heads]
    return (num_heads, max(grouped)) if grouped else None


def attention_grids(
    artifact: KernelArtifact, num_heads: int, num_kv_heads: int, head_dim: int
) -> AttentionGrids:
    """Context and generation attention grids for one head layout.

    Holes (large batch x long sequence) are filled along the batch axis: time is
    proportional to the batch once the GPU is full. Decode rows the tables lack come
    from ``derived_decode_source``'s, their batch axis divided by the ratio of KV
    heads (the same KV bytes), said so in ``derived``.
    """
    heads = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim}
    ctx = _rows(artifact, "context_attention", "for prefill attention", **heads)
    prefill = _grid("context_attention", ctx, "batch_size", "isl_tokens")
    source = None
    if artifact.has("generation_attention"):
        rows = artifact.tables["generation_attention"]
        source = derived_decode_source(rows, num_heads, num_kv_heads, head_dim)
    if source is None:
        gen = _rows(artifact, "generation_attention", "for decode attention", **heads)
        return AttentionGrids(
            prefill, _grid("generation_attention", gen, "batch_size", "kv_tokens"), None
        )
    src_heads, src_kv_heads = source
    match = {"num_heads": src_heads, "num_kv_heads": src_kv_heads, "head_dim": head_dim}
    gen = _rows(artifact, "generation_attention", "for decode attention", **match)
    timed = _grid("generation_attention", gen, "batch_size", "kv_tokens")
    ratio = num_kv_heads / src_kv_heads
    decode = Grid(
        "generation_attention (derived)",
        timed.axis_names,
        (timed.axes[0] / ratio, timed.axes[1]),
        timed.values,
    )
    derived = (
        f"decode attention derived from {src_heads}/{src_kv_heads}-head rows at "
        f"{ratio:g}x the batch (same KV bytes; {num_heads}/{num_kv_heads} not measured)"
    )
    return AttentionGrids(prefill, decode, derived)


def dram_floored(decode: Grid, kv_bytes_per_token: float, bandwidth_bytes_per_s: float) -> Grid:
    """A generation-attention grid with every point at least the time its KV (K and
    V, ``kv_bytes_per_token`` a token, one layer, one GPU) takes to stream from DRAM:
    the tables time a KV the L2 keeps resident (``docs/kernels.md``)."""
    batch, kv = np.meshgrid(decode.axes[0], decode.axes[1], indexing="ij")
    floor_s = batch * kv * kv_bytes_per_token / bandwidth_bytes_per_s
    return Grid(decode.name, decode.axis_names, decode.axes, np.maximum(decode.values, floor_s))


# The mixed-attention lattice's axes, in the order the 4-D grid takes them.
MIXED_AXES = ("prefill_chunk_tokens", "kv_prefill_tokens", "num_decode_seqs", "kv_decode_tokens")


class MixedAttention(NamedTuple):
    """A per-model attention profile as grids (seconds, one layer): ``mixed``, one
    varlen kernel over a prefill chunk and ``num_decode_seqs`` decodes (``MIXED_AXES``,
    the profiler's shot), and its pure planes ``prefill`` and ``decode`` as 2-D grids.
    """

    mixed: Grid | None  # None: the profile timed no mixed batch
    prefill: Grid
    decode: Grid


def mixed_attention_grids(artifact: KernelArtifact) -> MixedAttention:
    """The ``mixed_attention`` table on the rectangular grid of its four axes.

    Some profiles interleave two lattices, so the union grid has holes, filled so
    that a lookup means what the data means: an axis that does not apply (KV of an
    absent phase) repeats the value without it; a decode after 0 cached tokens takes
    the first timed KV; fewer prefill tokens than the first timed chunk cost that
    chunk; a hole between timed points is interpolated linearly, past them (a
    prefill beside ``max_num_seqs`` decodes) extrapolated from the last two.
    """
    rows = _rows(artifact, "mixed_attention", "for attention")
    pure_prefill = (rows["num_decode_seqs"] == 0) & (rows["prefill_chunk_tokens"] > 0)
    pure_decode = (rows["prefill_chunk_tokens"] == 0) & (rows["num_decode_seqs"] > 0)
    if not pure_prefill.any() or not pure_decode.any():
        raise ConfigError(
            f"kernel artifact ({artifact.label}): mixed_attention needs pure prefill "
            "rows (num_decode_seqs 0) and pure decode rows (prefill_chunk_tokens 0)"
        )
    coords = [rows[a].to_numpy(np.float64) for a in MIXED_AXES]
    axes = [np.unique(np.concatenate([[0.0], c])) for c in coords]
    values = mean_on_grid(axes, coords, rows["latency_s"].to_numpy(np.float64))
    values[0, :, 0, :] = np.nan  # the empty batch: no step has it
    prefill = _fill(values[1:, :, 0, 0], axes[0][1:], axes[1])
    decode = _fill(values[0, 0, 1:, 1:], axes[2][1:], axes[3][1:])
    mixed = values[1:, :, 1:, 1:]
    mixed_axes = (axes[0][1:], axes[1], axes[2][1:], axes[3][1:])
    for axis in range(4):
        mixed = interpolate_holes(mixed, mixed_axes[axis], axis)
    for axis in (2, 3, 0, 1):  # decodes first: max_num_seqs bounds the profiler's shots
        mixed = extrapolate_holes(mixed, mixed_axes[axis], axis)
    values[1:, :, 1:, 1:] = mixed
    values[1:, :, 0, :] = prefill[:, :, None]  # no decode: its KV length does not apply
    values[0, :, 1:, 1:] = decode[None, :, :]  # no prefill: nor does its cached length
    values[:, :, 1:, 0] = values[:, :, 1:, 1]  # a decode after 0 cached: the first timed
    values[0, :, 0, :] = prefill[0, :, None]  # fewer tokens than the first timed chunk
    has_mixed = bool(((rows["prefill_chunk_tokens"] > 0) & (rows["num_decode_seqs"] > 0)).any())
    if has_mixed and not np.all(np.isfinite(values)):
        raise ConfigError(
            f"kernel artifact ({artifact.label}): mixed_attention rows do not span "
            "a grid (a whole line of the lattice is missing)"
        )
    return MixedAttention(
        Grid("mixed_attention", MIXED_AXES, axes, values) if has_mixed else None,
        Grid("mixed_attention prefill", MIXED_AXES[:2], (axes[0][1:], axes[1]), prefill),
        Grid("mixed_attention decode", MIXED_AXES[2:], (axes[2][1:], axes[3][1:]), decode),
    )


def _fill(values: FloatArray, *axes: FloatArray) -> FloatArray:
    """Holes of a 2-D plane: interpolated between timed points, then extrapolated."""
    for axis, points in enumerate(axes):
        values = interpolate_holes(values, points, axis)
    for axis, points in enumerate(axes):
        values = extrapolate_holes(values, points, axis)
    return values


# The skew fit's bucket axes, after its prefill chunk (``put_skew_fit``).
SKEW_AXES = ("max_num_decode_seqs", "max_skew_rate", "max_kv_decode_tokens",
             "max_kv_prefill_tokens")  # fmt: skip


def put_skew_fit(artifact: KernelArtifact, tables: list[float], layout: list[int]) -> None:
    """A profile's fitted skew weights (``attention_skew``: how far a decode batch of
    uneven KV lengths moves from the time at its mean KV towards its max's; the rule:
    ``docs/kernels.md``) appended to ``tables`` and described in ``layout``'s skew
    slots (``price``: chunks, the four axes' edges, alphas, 0 where none, strides)."""
    rows = _rows(artifact, "attention_skew", "for the decode skew correction")
    all_edges = [sorted({float(v) for v in rows[axis]}) for axis in SKEW_AXES]
    keys = zip(rows["prefill_chunk_tokens"], *(rows[axis] for axis in SKEW_AXES), strict=True)
    fitted = {
        tuple(float(v) for v in key): float(alpha)
        for key, alpha in zip(keys, rows["alpha"], strict=True)
    }
    layout[price.HAS_SKEW] = 1
    chunks = sorted({key[0] for key in fitted})
    layout[price.SKEW_CHUNKS], layout[price.NUM_SKEW_CHUNKS] = len(tables), len(chunks)
    tables.extend(chunks)
    for d, edges in enumerate(all_edges):
        layout[price.SKEW_EDGES + 2 * d] = len(tables)
        layout[price.SKEW_EDGES + 2 * d + 1] = len(edges)
        tables.extend(edges)
    alphas = np.zeros((len(chunks), *(len(edges) for edges in all_edges)))
    for key, alpha in fitted.items():
        place = [chunks.index(key[0])]
        place += [edges.index(v) for edges, v in zip(all_edges, key[1:], strict=True)]
        alphas[tuple(place)] = alpha
    layout[price.SKEW_ALPHAS] = len(tables)
    tables.extend(alphas.ravel().tolist())
    for d, stride in enumerate(alphas.strides):
        layout[price.SKEW_STRIDES + d] = stride // alphas.itemsize


def op_grid(artifact: KernelArtifact, table: str, op: str) -> Grid:
    """Latency of one named op by its count (``layer_ops``: tokens; ``per_sequence``: seqs)."""
    count = "num_tokens" if table == "layer_ops" else "num_seqs"
    if not artifact.has(table):
        raise ConfigError(f"kernel artifact ({artifact.label}): no {table} table, needed for {op}")
    rows = artifact.tables[table]
    rows = rows[rows["op"] == op]
    if len(rows) == 0:
        known = ", ".join(sorted(set(artifact.tables[table]["op"])))
        raise ConfigError(f"kernel artifact ({artifact.label}): {table} has no op {op!r}; "
                          f"has: {known}")  # fmt: skip
    return _grid(f"{table} {op}", rows, count)


def allreduce_grid(artifact: KernelArtifact, num_gpus: int) -> Grid:
    """All-reduce latency by message bytes over ``num_gpus`` GPUs."""
    rows = _rows(artifact, "allreduce", f"for tensor parallel {num_gpus}", num_gpus=num_gpus)
    return _grid(f"allreduce x{num_gpus}", rows, "message_bytes")


def moe_grid(
    artifact: KernelArtifact, moe: MoeSpec, hidden_size: int, tp: int, ep: int = 1
) -> Grid:
    """Fused MoE layer latency by tokens, each expert split over ``tp`` GPUs; with
    ``ep`` > 1 (``tp`` 1) one GPU's ``num_experts / ep`` experts over the group's
    tokens."""
    match = {"hidden_size": hidden_size, "inter_size": moe.expert_intermediate_size // tp}
    layout = {"topk": moe.top_k, "num_experts": moe.num_experts, "tp_size": tp, "ep_size": ep}
    rows = _rows(artifact, "moe", "for the MoE layers", **match, **layout)
    return _grid("moe", rows, "num_tokens")


def moe_layer_grid(artifact: KernelArtifact) -> Grid:
    """Profiled MoE layer latency by tokens and distinct experts activated."""
    rows = _rows(artifact, "moe_layer", "for the MoE layers")
    return _grid("moe_layer", rows, "num_tokens", "num_active_experts")


def collective_grid(artifact: KernelArtifact, op: str, num_gpus: int) -> Grid | None:
    """Latency of one NCCL collective by message bytes over ``num_gpus`` GPUs, or None
    when the artifact has no such rows (the caller then uses a formula over the link)."""
    if not artifact.has("collective"):
        return None
    rows = artifact.tables["collective"]
    rows = rows[(rows["op"] == op) & (rows["num_gpus"] == num_gpus)]
    if len(rows) == 0:
        return None
    return _grid(f"{op} x{num_gpus}", rows, "message_bytes")
