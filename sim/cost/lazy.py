"""Public names of a package loaded on first use (PEP 562), for ``sim.cost`` and
``sim.cost.kernels``: importing one submodule does not import them all."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def load_name(
    package: str, sources: Mapping[str, str], namespace: dict[str, Any], name: str
) -> Any:
    """Import ``name``'s submodule (``sources[name]`` in ``package``) and return
    ``name`` from it, kept in the package's ``namespace`` so later lookups skip this."""
    source = sources.get(name)
    if source is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{package}.{source}"), name)
    namespace[name] = value
    return value


def names(namespace: Mapping[str, Any], sources: Mapping[str, str]) -> list[str]:
    """What ``dir()`` of the package shows: what it holds and what it can load."""
    return sorted(set(namespace) | set(sources))
