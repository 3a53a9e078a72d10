"""The operator-table artifact: measured kernel latencies with their provenance.

One JSON object (gzip-compressed when the name ends in ``.gz``) stamped
``servesim-kernels`` version 1: a ``provenance`` block and columnar ``tables``,
latencies in seconds (``TABLE_COLUMNS``; what each row means: ``docs/kernels.md``).
A source provides the tables it measured and no others. ``load_cached`` reads a
file once per version, ``load_provenance_cached`` only its provenance.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from sim.config import Frozen, anchored
from sim.cost.provenance import check_format, read_artifact, read_artifact_head, validated
from sim.errors import ConfigError

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

FORMAT_NAME = "servesim-kernels"
FORMAT_VERSION = 1
KIND = "kernel artifact"
# Bytes per element of the dtypes a provenance names (``dtype``, ``kv_dtype``).
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "fp8": 1.0}

# Known tables and their columns (what a row means: docs/kernels.md); ``latency_s`` is
# last, except in ``attention_skew``, whose rows are fitted blend weights (``alpha``).
TABLE_COLUMNS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "gemm": ("m", "n", "k", "latency_s"),
        "context_attention": (
            "num_heads", "num_kv_heads", "head_dim", "batch_size", "isl_tokens", "latency_s",
        ),
        "generation_attention": (
            "num_heads", "num_kv_heads", "head_dim", "batch_size", "kv_tokens", "latency_s",
        ),
        "allreduce": ("num_gpus", "message_bytes", "latency_s"),
        "collective": ("op", "num_gpus", "message_bytes", "latency_s"),
        "moe": (
            "hidden_size", "inter_size", "topk", "num_experts", "tp_size", "ep_size",
            "num_tokens", "latency_s",
        ),
        "moe_layer": ("num_tokens", "num_active_experts", "latency_s"),
        "per_sequence": ("op", "num_seqs", "latency_s"),
        "layer_ops": ("op", "num_tokens", "latency_s"),
        "mixed_attention": (
            "prefill_chunk_tokens", "kv_prefill_tokens", "num_decode_seqs",
            "kv_decode_tokens", "latency_s",
        ),
        "attention_skew": (
            "prefill_chunk_tokens", "max_num_decode_seqs", "max_skew_rate",
            "max_kv_decode_tokens", "max_kv_prefill_tokens", "num_samples", "alpha",
        ),
    }
)  # fmt: skip


class KernelProvenance(Frozen):
    """Where the numbers come from, so that a report can cite them."""

    source: str = Field(min_length=1)  # e.g. "aiconfigurator-core 0.12.0"
    licence: str = Field(min_length=1)  # e.g. "Apache-2.0"
    gpu: str = Field(min_length=1)  # the source's GPU name, e.g. "rtx_pro_6000_server"
    device_name: str = ""  # as the driver reports it
    framework: str = Field(min_length=1)  # e.g. "vllm"
    framework_version: str = Field(min_length=1)
    dtype: str = "bfloat16"  # weights and activations
    kv_dtype: str = "bfloat16"
    date: str = ""  # when measured (or published), ISO 8601
    tool: str = ""  # what produced this file
    tool_version: str = ""
    # Set when the tables are for one model only (per-layer profiles).
    model: str | None = None
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    # Which kernel variant each op was filtered to, e.g. {"attention": "vllm_flash_attn_fa2"}.
    kernels: dict[str, str] = Field(default_factory=dict)
    notes: str = ""


class KernelArtifact:
    """Provenance plus named tables (pandas DataFrames, latencies in seconds)."""

    __slots__ = ("provenance", "tables")

    def __init__(self, provenance: KernelProvenance, tables: Mapping[str, pd.DataFrame]) -> None:
        self.provenance = provenance
        self.tables: Mapping[str, pd.DataFrame] = MappingProxyType(dict(tables))
        for name, table in self.tables.items():
            check_table(name, table, "artifact")

    def has(self, name: str) -> bool:
        return name in self.tables and len(self.tables[name]) > 0

    @property
    def label(self) -> str:
        """Short source tag for cost-model labels."""
        p = self.provenance
        return f"{p.source.split()[0]} {p.framework} {p.framework_version}"

    def to_json(self) -> dict[str, Any]:
        tables = {
            name: {col: table[col].tolist() for col in TABLE_COLUMNS[name]}
            for name, table in sorted(self.tables.items())
        }
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "provenance": self.provenance.model_dump(),
            "tables": tables,
        }


def check_table(name: str, table: pd.DataFrame, where: str) -> None:
    """ConfigError unless ``table`` is a known table with its exact columns."""
    # Imported here: pandas loads with the first frame, after a run's summary is out
    # (docs/dev/speed.md).
    import pandas as pd

    if name not in TABLE_COLUMNS:
        known = ", ".join(TABLE_COLUMNS)
        raise ConfigError(f"{where}: unknown kernel table {name!r}; known: {known}")
    columns = TABLE_COLUMNS[name]
    if tuple(table.columns) != columns:
        raise ConfigError(f"{where}: table {name} has columns {list(table.columns)}, "
                          f"expected {list(columns)}")  # fmt: skip
    for column in columns:  # a true is not 1: a bool column, or one among numbers (object)
        values = table[column]
        if values.dtype == bool or (
            values.dtype == object and any(isinstance(v, bool) for v in values)
        ):
            raise ConfigError(f"{where}: table {name}: {column} must be numbers, not true/false")
    if "latency_s" not in columns:
        alpha = pd.to_numeric(table["alpha"], errors="coerce")
        if not bool(np.isfinite(alpha.to_numpy(np.float64)).all()):
            raise ConfigError(f"{where}: table {name}: every alpha must be a finite number")
        return
    latency = pd.to_numeric(table["latency_s"], errors="coerce")
    if bool(latency.isna().any()) or bool((latency <= 0).any()):
        raise ConfigError(f"{where}: table {name}: every latency_s must be a number > 0")


def save_artifact(artifact: KernelArtifact, path: Path) -> Path:
    """Write ``artifact`` to ``path`` (gzip when it ends in ``.gz``)."""
    text = json.dumps(artifact.to_json(), separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        # mtime 0: the same tables give the same bytes (reviewable diffs).
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)
    return path


# Tools whose earlier versions wrote wrong tables, and what was wrong: refused, not
# priced (aiconfigurator's importer before version 2 stored vLLM's all-reduce sizes,
# bf16 element counts, as bytes: every all-reduce at twice its bytes).
_STALE_TOOLS = {
    ("sim.cost.kernels.aiconfigurator", "1"): "its all-reduce sizes are bf16 element "
    "counts, not bytes; export it again (servesim export-kernels)",
}


def _provenance(data: dict[str, Any], path: Path) -> KernelProvenance:
    check_format(data, path, KIND, FORMAT_NAME, FORMAT_VERSION)
    provenance = validated(KernelProvenance, data.get("provenance"), path, "provenance")
    stale = _STALE_TOOLS.get((provenance.tool, provenance.tool_version))
    if stale is not None:
        raise ConfigError(
            f"{path}: provenance.tool {provenance.tool} version {provenance.tool_version}: {stale}"
        )
    return provenance


def load_kernel_artifact(path: Path) -> KernelArtifact:
    """Read an artifact; ConfigError naming the file and the problem."""
    import pandas as pd

    data = read_artifact(path, KIND)
    provenance = _provenance(data, path)
    tables_raw = data.get("tables")
    if not isinstance(tables_raw, dict):
        raise ConfigError(f"{path}: tables must be a mapping of table name to columns")
    tables = {}
    for name, columns in tables_raw.items():
        try:
            tables[name] = pd.DataFrame(columns)
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{path}: table {name}: {error}") from None
        check_table(name, tables[name], str(path))
    return KernelArtifact(provenance, tables)


ARTIFACTS_DIR = Path(__file__).parent / "artifacts"
SUFFIXES = (".json.gz", ".json")


def shipped_kernel_artifacts() -> list[Path]:
    """Shipped artifact files, sorted by name."""
    if not ARTIFACTS_DIR.is_dir():
        return []
    return sorted(p for p in ARTIFACTS_DIR.iterdir() if p.name.endswith(SUFFIXES))


def shipped_name(path: Path) -> str:
    """A shipped file's name without its suffix (what ``artifact:`` accepts)."""
    return next(path.name.removesuffix(s) for s in SUFFIXES if path.name.endswith(s))


def resolve_kernel_artifact(name: str, base_dir: Path | None) -> Path:
    """The file an ``artifact:`` value names: a path (with ``/`` or a suffix) or a shipped name."""
    if "/" in name or name.endswith(SUFFIXES):
        return anchored(name, base_dir)
    for path in shipped_kernel_artifacts():
        if shipped_name(path) == name:
            return path
    known = ", ".join(shipped_name(p) for p in shipped_kernel_artifacts()) or "none"
    raise ConfigError(f"cost.artifact: no shipped kernel artifact {name!r}; shipped: {known}")


@lru_cache(maxsize=16)
def _load(path: Path, mtime_ns: int) -> KernelArtifact:
    return load_kernel_artifact(path)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        raise ConfigError(f"{path}: no such kernel artifact") from None


def load_cached(path: Path) -> KernelArtifact:
    """``load_kernel_artifact``, parsed once per file version (sweeps build many models)."""
    return _load(path, _mtime_ns(path))


@lru_cache(maxsize=16)
def _load_provenance(path: Path, mtime_ns: int) -> KernelProvenance:
    # The tables left unbuilt (pandas frames cost ~10 ms a file).
    return _provenance(read_artifact_head(path, KIND, "tables"), path)


def load_provenance_cached(path: Path) -> KernelProvenance:
    """An artifact's provenance only, once per file version: ``kind: auto`` reads
    every shipped file's GPU and model, and builds the tables of the one it picks."""
    return _load_provenance(path, _mtime_ns(path))
