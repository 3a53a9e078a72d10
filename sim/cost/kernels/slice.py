"""``export_slice``: the part of aiconfigurator's database one model needs, as a small artifact.

The full database is ~80 MB. A slice keeps, for every GEMM ``(n, k)`` the
model runs, all ``m`` rows of the neighbouring grid values of ``n`` and ``k``
(the cell the interpolation uses), so it prices that model exactly as the
full database does (what else it keeps: ``docs/kernels.md``). Its provenance
names the model, and ``KernelCost`` refuses other models.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.artifact import KernelArtifact, save_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.ops import layer_shapes
from sim.cost.kernels.tables import derived_decode_source
from sim.errors import ConfigError
from sim.hardware.specs import ModelSpec, load_architecture


def _neighbours(axis: np.ndarray, value: int) -> set[int]:
    """Grid values bracketing ``value`` (the last one when past the end)."""
    below = axis[axis <= value]
    above = axis[axis >= value]
    out = {int(below[-1])} if len(below) else {int(axis[0])}
    out.add(int(above[0]) if len(above) else int(axis[-1]))
    return out


def slice_artifact(
    full: KernelArtifact,
    arch: ModelSpec,
    tensor_parallel_sizes: Iterable[int] = (1,),
    expert_parallel_sizes: Iterable[int] = (1,),
) -> KernelArtifact:
    """``full`` pruned to the rows ``arch`` uses at the given tensor- and expert-parallel
    sizes (for ``ep``: whole experts' MoE rows at ``ep_size``, NCCL over ``ep`` GPUs)."""
    tps = sorted(set(tensor_parallel_sizes))
    eps = sorted(set(expert_parallel_sizes) - {1})
    tables = dict(full.tables)
    gemm = tables["gemm"]
    n_axis, k_axis = np.unique(gemm["n"]), np.unique(gemm["k"])
    keep_nk: set[tuple[int, int]] = set()
    heads: set[tuple[int, int, int]] = set()
    for tp in tps:
        shapes = layer_shapes(arch, tp)
        for n, k in [*shapes.gemms.values(), shapes.lm_head]:
            keep_nk |= {(a, b) for a in _neighbours(n_axis, n) for b in _neighbours(k_axis, k)}
        heads.add((shapes.num_heads, shapes.num_kv_heads, shapes.head_dim))
    derived: list[str] = []  # head layouts priced from another's rows (provenance notes)
    pairs = pd.Series(list(zip(gemm["n"], gemm["k"], strict=True)))
    tables["gemm"] = gemm[pairs.isin(keep_nk).to_numpy()].reset_index(drop=True)
    for name in ("context_attention", "generation_attention"):
        if name in tables:
            t = tables[name]
            keep = set(heads)
            if name == "generation_attention":  # and the rows a derived layout reads
                for h, kv, d in sorted(heads):
                    source = derived_decode_source(t, h, kv, d)
                    if source is not None:
                        keep.add((*source, d))
                        derived.append(f"decode attention of {h}/{kv} heads derived from "
                                       f"{source[0]}/{source[1]}")  # fmt: skip
            key = pd.Series(
                list(zip(t["num_heads"], t["num_kv_heads"], t["head_dim"], strict=True))
            )
            tables[name] = t[key.isin(keep).to_numpy()].reset_index(drop=True)
    for name, num_gpus in (("allreduce", tps), ("collective", [*tps, *eps])):
        if name in tables:
            t = tables[name]
            tables[name] = t[t["num_gpus"].isin(num_gpus)].reset_index(drop=True)
    if "moe" in tables:
        if arch.moe is None:
            del tables["moe"]
        else:
            t = tables["moe"]
            inter = arch.moe.expert_intermediate_size
            model_rows = (
                (t["hidden_size"] == arch.hidden_size)
                & (t["topk"] == arch.moe.top_k)
                & (t["num_experts"] == arch.moe.num_experts)
            )
            tp_rows = t["inter_size"].isin([inter // tp for tp in tps]) & t["tp_size"].isin(tps)
            ep_rows = (t["inter_size"] == inter) & (t["tp_size"] == 1) & t["ep_size"].isin(eps)
            tables["moe"] = t[model_rows & ((tp_rows & (t["ep_size"] == 1)) | ep_rows)].reset_index(
                drop=True
            )
    p = full.provenance
    notes = f"{p.notes}; " if p.notes else ""
    provenance = p.model_copy(
        update={
            "model": arch.name,
            "notes": f"{notes}sliced for {arch.name} at tp {','.join(map(str, tps))}"
            + (f", ep {','.join(map(str, eps))}" if eps else "")
            + "".join(f"; {phrase}" for phrase in derived),
        }
    )
    return KernelArtifact(provenance, tables)


_ATTENTION = {"context_attention": "prefill attention", "generation_attention": "decode attention"}


def check_covers(
    sliced: KernelArtifact,
    arch: ModelSpec,
    tensor_parallel_sizes: Iterable[int] = (1,),
    expert_parallel_sizes: Iterable[int] = (1,),
) -> None:
    """ConfigError naming the first shape ``arch`` needs at some layout that
    ``sliced`` lacks: its head layout per GPU in an attention table, else what
    building a cost model for the layout refuses (as a scenario would)."""
    p = sliced.provenance
    tables = f"{p.gpu} {p.framework} {p.framework_version}"
    for tp in sorted(set(tensor_parallel_sizes)):
        shapes = layer_shapes(arch, tp)
        heads = (shapes.num_heads, shapes.num_kv_heads, shapes.head_dim)
        for name, what in _ATTENTION.items():
            t = sliced.tables.get(name)
            timed = t is not None and bool(
                ((t["num_heads"] == heads[0]) & (t["num_kv_heads"] == heads[1])
                 & (t["head_dim"] == heads[2])).any()
            )  # fmt: skip
            if name == "generation_attention" and t is not None and not timed:
                timed = derived_decode_source(t, *heads) is not None  # tables.attention_grids
            if not timed:
                raise ConfigError(
                    f"export-kernels: {tables} has no {what} ({name}) for {heads[0]} heads / "
                    f"{heads[1]} KV heads / head_dim {heads[2]} per GPU ({arch.name} at tp {tp})"
                )
        for ep in sorted({1, *expert_parallel_sizes}):
            if ep % tp:
                continue  # not a layout (ep = dp x tp)
            try:
                KernelCost(arch, sliced, tensor_parallel_size=tp, expert_parallel_size=ep)
            except ConfigError as error:
                layout = f"tp {tp}" + (f", ep {ep}" if ep > 1 else "")
                raise ConfigError(
                    f"export-kernels: {tables} does not cover {arch.name} at {layout}: {error}"
                ) from None


def export_slice(
    gpu: str,
    model: str | ModelSpec,
    out_path: Path | str,
    framework: str = "vllm",
    version: str | None = None,
    data_dir: Path | str | None = None,
    tensor_parallel_sizes: Iterable[int] = (1,),
    expert_parallel_sizes: Iterable[int] = (1,),
) -> Path:
    """Write the slice of aiconfigurator's ``gpu`` tables that ``model`` needs.

    ``model`` is an architecture, a preset name or a ``config.json`` path.
    """
    arch = model if isinstance(model, ModelSpec) else load_architecture(model)
    full = from_aiconfigurator(gpu, framework, version, data_dir)
    sliced = slice_artifact(full, arch, tensor_parallel_sizes, expert_parallel_sizes)
    check_covers(sliced, arch, tensor_parallel_sizes, expert_parallel_sizes)  # before writing
    if not sliced.provenance.date:
        # The database records no measurement date: the slice's is the day it was exported.
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        notes = f"{sliced.provenance.notes}; exported {today} (no measurement date in the source)"
        update = {"date": today, "notes": notes}
        sliced = KernelArtifact(sliced.provenance.model_copy(update=update), sliced.tables)
    return save_artifact(sliced, Path(out_path))


def export_main(argv: Sequence[str] | None = None) -> int:
    """``servesim export-kernels GPU MODEL --out FILE [--tp 1 2] [--ep 2] [--version V] ...``
    (``sim.cli.main`` reports a ConfigError)."""
    parser = argparse.ArgumentParser(
        prog="servesim export-kernels",
        description="Write the aiconfigurator kernel tables one model needs as a small artifact.",
    )
    parser.add_argument("gpu", help="aiconfigurator GPU name, e.g. rtx_pro_6000_server")
    parser.add_argument("model", help="architecture preset or config.json path")
    parser.add_argument("--out", type=Path, required=True, help="artifact file (.json[.gz])")
    parser.add_argument("--tp", type=int, nargs="+", default=[1], help="tensor-parallel sizes")
    parser.add_argument("--ep", type=int, nargs="+", default=[1], help="expert-parallel sizes")
    parser.add_argument("--framework", default="vllm")
    parser.add_argument("--version", default=None, help="framework version (default: newest)")
    parser.add_argument("--data-dir", default=None, help="aiconfigurator systems/data folder")
    args = parser.parse_args(argv)
    path = export_slice(
        args.gpu,
        args.model,
        args.out,
        args.framework,
        args.version,
        args.data_dir,
        args.tp,
        args.ep,
    )
    print(f"wrote {path}")
    return 0
