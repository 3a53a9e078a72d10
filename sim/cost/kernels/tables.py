"""Operator latency functions built from an artifact's tables, for one model layout.

Each function maps a count (tokens, sequences, bytes) to seconds by
``Grid`` interpolation (see ``sim.cost.kernels.grid`` for the rules). They
are built once per cost model, filtered to the model's shapes; a shape the
artifact does not cover raises ``ConfigError`` naming the table and shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.grid import Grid
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


def attention_grids(
    artifact: KernelArtifact, num_heads: int, num_kv_heads: int, head_dim: int
) -> tuple[Grid, Grid]:
    """(context by batch x prompt length, generation by batch x KV length) for one head layout.

    Holes (large batch x long sequence, not timed) are filled along the batch
    axis: time is proportional to the batch once the GPU is full.
    """
    heads = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim}
    ctx = _rows(artifact, "context_attention", "for prefill attention", **heads)
    gen = _rows(artifact, "generation_attention", "for decode attention", **heads)
    return (
        _grid("context_attention", ctx, "batch_size", "isl_tokens"),
        _grid("generation_attention", gen, "batch_size", "kv_tokens"),
    )


def mixed_attention_grids(artifact: KernelArtifact) -> tuple[Grid, Grid]:
    """(one prefill chunk by chunk x cached tokens, decodes by count x KV length).

    From the pure rows of a per-model mixed-attention profile: prefill rows
    have no decode, decode rows no prefill.
    """
    rows = _rows(artifact, "mixed_attention", "for attention")
    prefill = rows[rows["num_decode_seqs"] == 0]
    decode = rows[rows["prefill_chunk_tokens"] == 0]
    if len(prefill) == 0 or len(decode) == 0:
        raise ConfigError(
            f"kernel artifact ({artifact.label}): mixed_attention needs pure prefill "
            "rows (num_decode_seqs 0) and pure decode rows (prefill_chunk_tokens 0)"
        )
    return (
        _grid("mixed_attention prefill", prefill, "prefill_chunk_tokens", "kv_prefill_tokens"),
        _grid("mixed_attention decode", decode, "num_decode_seqs", "kv_decode_tokens"),
    )


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
    """Fused MoE layer latency by tokens, each expert split over ``tp`` GPUs.

    With ``ep`` > 1 (and ``tp`` 1: whole experts) a row is one GPU's share: its
    ``num_experts / ep`` experts over the tokens of the whole expert-parallel
    group routed to them (``num_tokens`` counts the group's tokens).
    """
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
