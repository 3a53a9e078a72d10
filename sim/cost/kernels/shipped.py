"""Kernel artifacts shipped in the repo (``sim/cost/kernels/artifacts``) and ``kind: auto``.

``auto`` prices a scenario with kernel tables only when some cover its
model (bf16) and GPU: the installed aiconfigurator-core database, else a
shipped artifact whose provenance names this GPU (``SOURCE_GPU_NAMES``) and
this model. When neither does, ``kernel_auto`` returns None and ``auto``
behaves exactly as before kernel tables existed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sim.cost.kernels.artifact import (
    KernelArtifact,
    KernelProvenance,
    load_kernel_artifact,
    load_provenance,
)
from sim.errors import ConfigError

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
        path = Path(name)
        return path if path.is_absolute() or base_dir is None else base_dir / path
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
    return load_provenance(path)


def load_provenance_cached(path: Path) -> KernelProvenance:
    """An artifact's provenance only, once per file version: ``kind: auto`` reads
    every shipped file's GPU and model, and builds the tables of the one it picks."""
    return _load_provenance(path, _mtime_ns(path))
