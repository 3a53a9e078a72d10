"""Overrides for scenario files, written into the raw document before validation.

``servesim --set``'s ``"dotted.key=value"`` strings (values parsed as YAML) or, from
``api.run``, a mapping of dotted keys, nested sections or both
(``{"engine.block_size_tokens": 32}`` is ``{"engine": {"block_size_tokens": 32}}``). A
nested mapping is merged key by key into its section; the string form replaces a
section whole (``"workload.arrival={kind: gamma, ...}"``). A key set twice (a mapping's
two spellings of it, or a section replacing a ``--set`` key inside it) is refused: the
last would win without a word.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from sim.errors import ConfigError
from sim.scenario.strict_yaml import DuplicateKeyError, parse_yaml

Overrides = Sequence[str] | Mapping[str, Any]
WHAT = "overrides"  # names a mapping's keys in error messages (strings are ``--set``'s)


def set_dotted(doc: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    """``doc[a][b][c] = value`` for ``"a.b.c"``, creating missing sections; a mapping
    ``value`` replaces what was there whole (``dotted_items`` is what merges)."""
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError(f"{source}: bad override key {dotted!r}")
    node = doc
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: {dotted}: {key!r} is not a section")
        node = child
    node[keys[-1]] = copy.deepcopy(value)


def replaces(later: str, earlier: str) -> bool:
    """Whether setting dotted key ``later`` after ``earlier`` replaces what ``earlier``
    set: the same key, or a section holding it (``workload.arrival`` after
    ``workload.arrival.rate_per_s``)."""
    return earlier == later or earlier.startswith(f"{later}.")


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


def _set_value(text: str) -> Any:
    """A ``--set``'s value (after its ``=``): YAML, else the text as it stands."""
    try:
        return parse_yaml(text) if text else ""
    except (yaml.YAMLError, DuplicateKeyError):
        return text


def set_keys(overrides: Overrides | None) -> list[str]:
    """The dotted keys ``overrides`` set, in order: each ``--set``'s ``key`` (before its
    ``=``), or a mapping's flattened keys. What refuses a key reads it here, so a
    ``--set`` whose value is a mapping reads as its leaves (``workload={num_requests: 50}``
    sets ``workload.num_requests``); one that flattens to nothing (``workload={}``) reads
    as its own key."""
    if isinstance(overrides, Mapping):
        return [key for key, _ in dotted_items(overrides)]
    keys: list[str] = []
    for item in overrides or ():
        key, _, text = (part.strip() for part in item.partition("="))
        value = _set_value(text)
        try:
            leaves = dotted_items(value, f"{key}.") if isinstance(value, Mapping) else []
        except ConfigError:  # a key YAML read as no str ({1: 2}): validation names it
            leaves = []
        keys += [leaf for leaf, _ in leaves] or [key]
    return keys


def apply_overrides(doc: dict[str, Any], overrides: Overrides | None, source: str) -> None:
    """Apply ``overrides`` (strings or a mapping; None or empty: none) in place."""
    if not overrides:
        return
    if isinstance(overrides, Mapping):
        items = dotted_items(overrides)
        for index, (key, value) in enumerate(items):
            # ('workload.n': 5 and 'workload': {'n': 7}): the last would win, silently.
            earlier = next((k for k, _ in items[:index] if replaces(key, k)), None)
            if earlier is not None:
                what = key if earlier == key else f"{earlier} (and {key} holding it)"
                raise ConfigError(f"{source}: {WHAT}: {what} given twice; give one")
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
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected dotted.key=value")
        set_dotted(doc, key.strip(), _set_value(text), f"{source}: --set")
