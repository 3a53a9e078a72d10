"""Overrides for scenario files, written into the raw document before validation.

``servesim --set``'s ``"dotted.key=value"`` strings (values parsed as YAML) or, from
``api.run``, a mapping of dotted keys, nested sections or both
(``{"engine.block_size_tokens": 32}`` is ``{"engine": {"block_size_tokens": 32}}``). A
nested mapping is merged key by key into its section; the string form replaces a
section whole (``"workload.arrival={kind: gamma, ...}"``). A mapping's values are YAML's
(a numpy scalar as its Python number; an array, a set, a Path refused: ``_plain``). A key
set twice with two values, however spelled, or dropped by a later section given whole is
refused (``_one_value_per_key``); ``layered`` puts one list of strings over another.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import date  # (a datetime is one): YAML reads 2024-01-01 as one
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
    return [(key, value) for key, value, _ in _spelled_items(overrides, prefix)]


def _spelled_items(overrides: Mapping[Any, Any], prefix: str) -> list[tuple[str, Any, Any]]:
    """``dotted_items`` with each pair's spelling: the one-leaf mapping it was given as
    (``{"a": {"b.c": 1}}``), for an error to name."""
    items: list[tuple[str, Any, Any]] = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{WHAT}: key {prefix}{key!r} is not a dotted key (a non-empty str)")
        dotted = f"{prefix}{key.strip()}"
        if isinstance(value, Mapping):  # merged key by key (an empty one sets nothing)
            items += [(k, v, {key: s}) for k, v, s in _spelled_items(value, f"{dotted}.")]
        else:
            value = _plain(dotted, value)
            items.append((dotted, value, {key: value}))
    return items


def _plain(dotted: str, value: Any) -> Any:
    """``value`` as YAML could give it: a numpy scalar (``np.float64(5.0)``, a notebook's)
    as its Python value, a list's and a mapping's items alike; anything else (an array, a
    set, a Path) a ConfigError naming ``dotted``, not a value compared (``==`` on an array
    raises) or validated as what it is not."""
    # A numpy scalar (shape ()), known by its module: the CLI starts without numpy.
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        value = value.item()
    if isinstance(value, list):
        return [_plain(f"{dotted}[{index}]", item) for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {key: _plain(f"{dotted}.{key}", item) for key, item in value.items()}
    if value is not None and not isinstance(value, bool | int | float | str | bytes | date):
        raise ConfigError(
            f"{WHAT}: {dotted}: type {type(value).__name__} is not a YAML value "
            "(give a number, string, bool, null, list or mapping)"
        )
    return value


def _set_value(text: str) -> Any:
    """A ``--set``'s value (after its ``=``): YAML, else the text as it stands."""
    try:
        return parse_yaml(text) if text else ""
    except (yaml.YAMLError, DuplicateKeyError):
        return text


def _writes(overrides: Overrides | None) -> list[tuple[str, str, Any]]:
    """(spelling, dotted key, value) of each ``set_dotted`` ``overrides`` make, in order:
    a ``--set`` is one (a mapping value replaces its key's section whole), a mapping one
    a leaf (its nested mappings merge)."""
    if isinstance(overrides, Mapping):
        return [
            (repr(spelled), key, value) for key, value, spelled in _spelled_items(overrides, "")
        ]
    return [
        (repr(item.strip()), key.strip(), _set_value(text))
        for item in overrides or ()
        for key, _, text in [item.partition("=")]
    ]


def _leaves(key: str, value: Any) -> dict[str, Any]:
    """What a write of ``value`` at ``key`` sets: a mapping's leaves, else ``key`` itself
    (an empty mapping, or one whose keys YAML read as no str: validation names those)."""
    try:
        leaves = dotted_items(value, f"{key}.") if isinstance(value, Mapping) else []
    except ConfigError:
        leaves = []
    return dict(leaves) or {key: value}


def set_keys(overrides: Overrides | None) -> list[str]:
    """The dotted keys ``overrides`` set, in order: each ``--set``'s ``key`` (before its
    ``=``), or a mapping's flattened keys. What refuses a key reads it here, so a
    ``--set`` whose value is a mapping reads as its leaves (``workload={num_requests: 50}``
    sets ``workload.num_requests``); one that flattens to nothing (``workload={}``) reads
    as its own key."""
    return [leaf for _, key, value in _writes(overrides) for leaf in _leaves(key, value)]


def layered(sets: Sequence[str], later: Sequence[str]) -> list[str]:
    """``later``'s ``--set`` strings over ``sets`` as a layer (a tool's defaults under a
    user's settings, a user's under a tool's), not keys given twice: each of ``sets``
    whose every key one of ``later`` replaces is left out; one replaced in part (a
    section given whole, one of its keys set again) takes ``later``'s values, so the two
    agree (the same value twice is one setting)."""
    writes = [(key, value) for _, key, value in _writes(later)]
    kept: list[str] = []
    for item in sets:
        ((_, key, value),) = _writes([item])
        leaves = _leaves(key, value)
        over = [(k, v) for k, v in writes if any(replaces(k, leaf) for leaf in leaves)]
        if all(any(replaces(k, leaf) for k, _ in over) for leaf in leaves):
            continue
        if over:  # each under ``key`` (one above it would replace every leaf)
            doc: dict[str, Any] = {}
            for k, v in [(key, value), *over]:
                set_dotted(doc, k, v, "layered")
            for part in key.split("."):
                doc = doc[part]
            flow = yaml.safe_dump(doc, default_flow_style=True, sort_keys=False, width=1 << 30)
            item = f"{key}={flow.strip()}"
        kept.append(item)
    return [*kept, *later]


def _one_value_per_key(writes: list[tuple[str, str, Any]], what: str) -> None:
    """ConfigError for a key set twice with two values, however spelled (``a.b=1`` and
    ``a={b: 2}``), or dropped by a later write that replaces its section whole
    (``a.b=1``, then ``a={c: 2}``) or made a section (``a=null``, then ``a.b=1``): the
    last would win, the other dropped without a word. The same value twice is one setting."""
    given: dict[str, tuple[Any, str]] = {}  # each leaf set so far: its value, its spelling
    for spelling, key, value in writes:
        leaves = _leaves(key, value)
        for leaf, (before, earlier) in list(given.items()):
            if replaces(key, leaf):  # replaced
                kept = leaf in leaves and _same(leaves[leaf], before)
                why = "" if leaf in leaves else f" (which replaces {key} whole)"
            elif replaces(leaf, key):  # gone through: a null would become a section
                kept, why = before is not None, ""  # (set_dotted refuses a value, merges a mapping)
            else:
                continue
            if not kept:
                raise ConfigError(
                    f"{what} {leaf}: given twice, {earlier} and {spelling}{why}; give one"
                )
            del given[leaf]
        given.update((leaf, (leaf_value, spelling)) for leaf, leaf_value in leaves.items())


def _same(a: Any, b: Any) -> bool:
    """One value (``1`` is not ``True`` nor ``1.0`` here, as it is to ``==``)."""
    return type(a) is type(b) and bool(a == b)


def apply_overrides(doc: dict[str, Any], overrides: Overrides | None, source: str) -> None:
    """Apply ``overrides`` (strings or a mapping; None or empty: none) in place."""
    if not overrides:
        return
    if isinstance(overrides, str | bytes):  # a lone string would be read letter by letter
        raise ConfigError(
            f"{source}: {WHAT}: expected a list of 'key=value' strings or a mapping, "
            f"got the string {overrides!r}"
        )
    if isinstance(overrides, Mapping):  # its errors name the file, as pydantic's do
        what, twice = WHAT, f"{source}: {WHAT}:"
    else:
        what = twice = "--set"
        odd = [item for item in overrides if not isinstance(item, str)]
        if odd:
            raise ConfigError(f"{source}: {WHAT}: expected 'key=value' strings, got {odd[0]!r}")
        for item in overrides:
            key, sep, _ = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--set {item!r}: expected dotted.key=value")
    try:
        writes = _writes(overrides)
    except ConfigError as error:  # a mapping's key or value: the file named, as below
        raise ConfigError(f"{source}: {error}") from None
    _one_value_per_key(writes, twice)
    for _, key, value in writes:
        set_dotted(doc, key, value, f"{source}: {what}")
