"""Kernel tables from NVIDIA's aiconfigurator-core database (optional extra ``gpu-data``).

aiconfigurator-core (PyPI, Apache-2.0) ships measured kernel latencies as
parquet files, ``systems/data/<gpu>/<op>/<framework>/<version>/*.parquet``,
in milliseconds. A table holds several kernel variants per shape, and mixing
them is off by up to 15x, so each is filtered to the one vLLM runs for a
bf16 model (which, and why: ``docs/kernels.md``, "Sources and pitfalls").
Without ``data_dir`` the database is found where the package is installed
(``importlib``; the package is not imported).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from sim.cost.kernels.artifact import DTYPE_BYTES, KernelArtifact, KernelProvenance
from sim.errors import ConfigError

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

PACKAGE = "aiconfigurator_core"
LICENCE = "Apache-2.0 (aiconfigurator-core, NVIDIA)"
_MS = 1e-3  # seconds per millisecond
# Preference order of the (prefill, decode) attention kernels with a bf16 KV
# cache: FlashAttention 3 on Hopper, FA2 on Ada / Ampere (``vllm_flash_attn``
# in older tables, e.g. A100's vLLM 0.14), and on Blackwell FlashInfer, whose
# vLLM 0.24 tables split into TRT-LLM prefill and decode kernels.
ATTENTION_KERNELS = (
    ("vllm_flash_attn_fa3", "vllm_flash_attn_fa3"),
    ("vllm_flash_attn_fa2", "vllm_flash_attn_fa2"),
    ("vllm_flash_attn", "vllm_flash_attn"),
    ("vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"),
    ("vllm_flashinfer", "vllm_flashinfer"),
    ("vllm_triton_attn", "vllm_triton_attn"),
)
# The loader knows vLLM's kernel names only: servesim prices a step as vLLM runs it.
FRAMEWORKS = ("vllm",)
# Unquantised linear layers: torch's linear (newer tables) or "vllm_default" (older).
GEMM_KERNELS = ("torch.nn.functional.linear", "vllm_default")
ALLREDUCE_BACKEND, ALLREDUCE_DTYPE = "vllm_graph", "bfloat16"
MOE_KERNEL_FRAGMENT = "unquantizedfusedmoe"
NCCL_DTYPE, NCCL_ELEMENT_BYTES = "half", 2
# Both communication tables' message_size counts elements of their dtype, not bytes:
# the collector reduces a tensor of message_size elements and logs that count
# (aiconfigurator's collector/network/collect_all_reduce.py,
# get_input_shape_and_comm_size; nccl-tests' counts for NCCL). Above vLLM's
# custom all-reduce limit (8 MB), where vLLM hands the reduce to NCCL, the two
# tables agree at the same count (docs/kernels.md, "Sources and pitfalls").
ALLREDUCE_ELEMENT_BYTES = int(DTYPE_BYTES[ALLREDUCE_DTYPE])


def installed_data_dir() -> Path | None:
    """``systems/data`` of the installed aiconfigurator-core, or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    return path if path.is_dir() else None


def package_version(data_dir: Path) -> str:
    """Version of the package holding ``data_dir`` (its dist-info), or "unknown"."""
    # data_dir is <site>/aiconfigurator_core/systems/data; dist-info sits in <site>.
    site = data_dir.resolve().parents[2]
    found = sorted(site.glob("aiconfigurator_core-*.dist-info"))
    return found[-1].name.removesuffix(".dist-info").split("-")[1] if found else "unknown"


def _data_dir(data_dir: Path | str | None) -> Path:
    if data_dir is not None:
        path = Path(data_dir)
        if not path.is_dir():
            raise ConfigError(f"aiconfigurator data_dir {path}: no such folder")
        return path
    found = installed_data_dir()
    if found is None:
        raise ConfigError(
            "aiconfigurator-core is not installed (pip install 'servesim[gpu-data]') "
            "and no data_dir was given"
        )
    return found


def _choose(kind: str, wanted: str | None, available: list[str], where: str) -> str:
    if wanted in available:
        return wanted
    listing = ", ".join(available) or "none"
    raise ConfigError(f"aiconfigurator: no {kind} {wanted!r} {where}; available: {listing}")


def _version_key(version: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in version.replace("rc", ".rc.").split("."))


def resolve(
    gpu: str,
    framework: str = "vllm",
    version: str | None = None,
    data_dir: Path | str | None = None,
) -> tuple[Path, str]:
    """(GPU folder, framework version) after checking both exist; ConfigError if not."""
    root = _data_dir(data_dir)
    gpus = sorted(p.name for p in root.iterdir() if list(p.glob("gemm/*/*/*.parquet")))
    gpu = _choose("GPU", gpu, gpus, "with GEMM tables")
    gemm_root = root / gpu / "gemm"
    frameworks = sorted(p.name for p in gemm_root.iterdir() if p.is_dir())
    framework = _choose("framework", framework, frameworks, f"for {gpu}")
    if framework not in FRAMEWORKS:
        raise ConfigError(
            f"aiconfigurator: framework {framework!r} is not supported ({gpu} has its "
            f"tables, but servesim reads only {', '.join(FRAMEWORKS)}'s kernels: it prices "
            "a step as vLLM runs it)"
        )
    versions = sorted(
        (p.parent.name for p in (gemm_root / framework).glob("*/gemm_perf.parquet")),
        key=_version_key,
    )
    if version is None:
        if not versions:  # a framework folder without a GEMM table
            raise ConfigError(f"aiconfigurator: no {framework} GEMM table for {gpu}")
        return root / gpu, versions[-1]
    return root / gpu, _choose("version", version, versions, f"of {framework} for {gpu}")


def _op_file(gpu_dir: Path, op: str, framework: str, version: str, name: str) -> Path | None:
    """The table for ``version``, else the newest version present, else None."""
    exact = gpu_dir / op / framework / version / name
    if exact.is_file():
        return exact
    found = sorted(
        gpu_dir.glob(f"{op}/{framework}/*/{name}"), key=lambda p: _version_key(p.parent.name)
    )
    return found[-1] if found else None


def _full_bf16(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of full attention (``window_size`` 0; older tables, without the
    column, time only full attention) over a bf16 KV cache, beam width 1."""
    keep = (table["kv_cache_dtype"] == "bfloat16") & (table["beam_width"] == 1)
    if "window_size" in table:
        keep &= table["window_size"] == 0
    return table[keep]


def _attention_kernels(ctx: pd.DataFrame, gen: pd.DataFrame) -> tuple[str, str] | None:
    """The first (prefill, decode) pair of ``ATTENTION_KERNELS`` both tables time."""
    in_ctx, in_gen = set(ctx["kernel_source"]), set(gen["kernel_source"])
    return next(((c, g) for c, g in ATTENTION_KERNELS if c in in_ctx and g in in_gen), None)


def _table(rows: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """``rows``' integer columns by our name (ours -> the database's), then ``latency_s``."""
    # Imported here: pandas loads with the first frame, after a run's summary is out
    # (docs/dev/speed.md).
    import pandas as pd

    out = {ours: rows[theirs].astype(int) for ours, theirs in columns.items()}
    return pd.DataFrame({**out, "latency_s": rows["latency"] * _MS}).reset_index(drop=True)


def _attention(table: pd.DataFrame, kernel: str, length: str, length_col: str) -> pd.DataFrame:
    rows = table[table["kernel_source"] == kernel]
    heads = {"num_heads": "num_heads", "num_kv_heads": "num_key_value_heads"}
    return _table(
        rows, {**heads, "head_dim": "head_dim", "batch_size": "batch_size", length_col: length}
    )


@lru_cache(maxsize=8)
def _load(gpu_dir: Path, framework: str, version: str) -> KernelArtifact:
    import pandas as pd

    tables: dict[str, pd.DataFrame] = {}
    kernels: dict[str, str] = {}
    notes: list[str] = []
    gemm = pd.read_parquet(gpu_dir / "gemm" / framework / version / "gemm_perf.parquet")
    gemm = gemm[gemm["gemm_dtype"] == "bfloat16"]
    gemm_kernel = next((k for k in GEMM_KERNELS if k in set(gemm["kernel_source"])), "none")
    gemm = gemm[gemm["kernel_source"] == gemm_kernel]
    tables["gemm"] = _table(gemm, {"m": "m", "n": "n", "k": "k"})
    kernels["gemm"] = gemm_kernel
    device_name = str(gemm["device"].iloc[0]) if len(gemm) else ""
    context = _op_file(gpu_dir, "attention", framework, version, "context_attention_perf.parquet")
    generation = _op_file(
        gpu_dir, "attention", framework, version, "generation_attention_perf.parquet"
    )
    if context is not None and generation is not None:
        ctx, gen = _full_bf16(pd.read_parquet(context)), _full_bf16(pd.read_parquet(generation))
        pair = _attention_kernels(ctx, gen)
        if pair is not None:
            tables["context_attention"] = _attention(ctx, pair[0], "isl", "isl_tokens")
            # In the generation table isl is 1 and step is the KV length.
            tables["generation_attention"] = _attention(gen, pair[1], "step", "kv_tokens")
            kernel = pair[0] if pair[0] == pair[1] else " / ".join(pair)
            kernels["attention"] = f"{kernel}, window 0, bf16 KV"
            notes.append(f"attention from {context.parent.name}")
    allreduce = _op_file(gpu_dir, "comm", framework, version, "custom_allreduce_perf.parquet")
    if allreduce is not None:
        ar = pd.read_parquet(allreduce)
        ar = ar[(ar["backend"] == ALLREDUCE_BACKEND) & (ar["allreduce_dtype"] == ALLREDUCE_DTYPE)]
        ar = ar.assign(message_bytes=ar["message_size"].astype(int) * ALLREDUCE_ELEMENT_BYTES)
        tables["allreduce"] = _table(ar, {"num_gpus": "num_gpus", "message_bytes": "message_bytes"})
        kernels["allreduce"] = ALLREDUCE_BACKEND
        notes.append(f"allreduce from {allreduce.parent.name}")
    moe = _op_file(gpu_dir, "moe", framework, version, "moe_perf.parquet")
    if moe is not None:
        m = pd.read_parquet(moe)
        m = m[
            (m["moe_dtype"] == "bfloat16")
            & m["kernel_source"].str.contains(MOE_KERNEL_FRAGMENT)
            & (m["distribution"] == "balanced")
        ]
        if len(m):
            kernels["moe"] = str(m["kernel_source"].iloc[0])
            same = ("hidden_size", "inter_size", "topk", "num_experts")
            layout = {"tp_size": "moe_tp_size", "ep_size": "moe_ep_size"}
            columns = {**{c: c for c in same}, **layout, "num_tokens": "num_tokens"}
            tables["moe"] = _table(m, columns)
    nccl = sorted(
        gpu_dir.glob("comm/nccl/*/nccl_perf.parquet"), key=lambda p: _version_key(p.parent.name)
    )
    if nccl:
        c = pd.read_parquet(nccl[-1])
        c = c[c["nccl_dtype"] == NCCL_DTYPE]
        tables["collective"] = pd.DataFrame(
            {
                "op": c["op_name"].astype(str),
                "num_gpus": c["num_gpus"].astype(int),
                "message_bytes": c["message_size"].astype(int) * NCCL_ELEMENT_BYTES,
                "latency_s": c["latency"] * _MS,
            }
        ).reset_index(drop=True)
        kernels["collective"] = f"nccl {nccl[-1].parent.name}"
    provenance = KernelProvenance(
        source=f"aiconfigurator-core {package_version(gpu_dir.parent)}",
        licence=LICENCE,
        gpu=gpu_dir.name,
        device_name=device_name,
        framework=framework,
        framework_version=version,
        tool="sim.cost.kernels.aiconfigurator",
        # 2: all-reduce sizes in bytes (version 1 stored vLLM's bf16 element counts)
        tool_version="2",
        kernels=kernels,
        notes="; ".join(notes),
    )
    return KernelArtifact(provenance, tables)


def from_aiconfigurator(
    gpu: str,
    framework: str = "vllm",
    version: str | None = None,
    data_dir: Path | str | None = None,
) -> KernelArtifact:
    """The tables of ``gpu`` for ``framework`` (newest version when None); a one-line
    ConfigError listing what is available for an unknown GPU, framework or version."""
    gpu_dir, version = resolve(gpu, framework, version, data_dir)
    return _load(gpu_dir, framework, version)
