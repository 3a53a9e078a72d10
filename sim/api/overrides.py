"""Overrides as ``run`` takes them: ``"dotted.key=value"`` strings or a mapping.

Part of the ``sim.api`` face (``api.Overrides``). The strings are ``servesim
--set``'s (``sim.scenario.apply_overrides``: values parsed as YAML). A mapping
holds values as they are, under dotted keys, nested mappings, or both:
``{"engine.block_size_tokens": 32}`` and ``{"engine": {"block_size_tokens": 32}}``
are one override. A mapping's value that is itself a mapping is merged key by
key into that section, the file's other keys kept; to replace a section
whole, pass the string form (``"workload.arrival={kind: gamma, ...}"``).
Either way the overrides go into the raw document before validation, so they
are checked exactly as the file is: a bad key or value is one ``ConfigError``
naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.scenario import Scenario, apply_overrides, read_yaml, scenario_from_dict, set_dotted

Overrides = Sequence[str] | Mapping[str, Any]
WHAT = "overrides"  # names a mapping's keys in error messages (strings are ``--set``'s)


def dotted_items(overrides: Mapping[Any, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``overrides`` as (dotted key, value) pairs, nested mappings flattened, in order."""
    items: list[tuple[str, Any]] = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{WHAT}: key {prefix}{key!r} is not a dotted key (a non-empty str)")
        dotted = f"{prefix}{key.strip()}"
        if isinstance(value, Mapping):  # merged key by key (an empty one sets nothing)
            items += dotted_items(value, f"{dotted}.")
        else:
            items.append((dotted, value))
    return items


def apply(doc: dict[str, Any], overrides: Overrides, source: str) -> None:
    """Apply ``overrides`` (strings or a mapping; None or empty: none) to a raw scenario
    document, in place."""
    if not overrides:
        return
    if isinstance(overrides, Mapping):
        for key, value in dotted_items(overrides):
            set_dotted(doc, key, value, f"{source}: {WHAT}")
        return
    if isinstance(overrides, str | bytes):  # a lone string would be read letter by letter
        raise ConfigError(
            f"{source}: {WHAT}: expected a list of 'key=value' strings or a mapping, "
            f"got the string {overrides!r}"
        )
    odd = [item for item in overrides if not isinstance(item, str)]
    if odd:
        raise ConfigError(f"{source}: {WHAT}: expected 'key=value' strings, got {odd[0]!r}")
    apply_overrides(doc, overrides, source)


def load_with(path: Path, overrides: Overrides) -> Scenario:
    """Read ``path``, apply ``overrides``, validate (``sim.scenario.load_scenario``'s steps)."""
    doc = read_yaml(path, "scenario")
    apply(doc, overrides, str(path))
    return scenario_from_dict(doc, str(path), path.parent)


def overridden(scenario: Scenario, overrides: Overrides, source: str, base_dir: Path) -> Scenario:
    """``scenario`` with ``overrides`` applied: its fields as set, overridden, validated again."""
    if not overrides:
        return scenario
    doc = scenario.model_dump(exclude_unset=True)
    apply(doc, overrides, source)
    return scenario_from_dict(doc, source, base_dir)
