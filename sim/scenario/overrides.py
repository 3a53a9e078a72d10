"""Overrides and validation messages for scenario files.

Part of the ``sim.scenario`` face (``Overrides``, ``set_dotted`` and ``apply_overrides``
are re-exported there, and ``Overrides`` by ``sim.api``). Overrides are ``servesim
--set``'s ``"dotted.key=value"`` strings (values parsed as YAML) or, from ``api.run``, a
mapping of dotted keys, nested sections or both: ``{"engine.block_size_tokens": 32}`` and
``{"engine": {"block_size_tokens": 32}}`` are one override. A nested mapping is merged
key by key into its section, the file's other keys kept; to replace a section whole,
pass the string form (``"workload.arrival={kind: gamma, ...}"``). Either way they go
into the raw document before validation, so they are checked exactly as the file is: a
bad key or value is one ``ConfigError`` naming the file and the key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from sim.errors import ConfigError
from sim.scenario.strict_yaml import DuplicateKeyError, parse_yaml

Overrides = Sequence[str] | Mapping[str, Any]
WHAT = "overrides"  # names a mapping's keys in error messages (strings are ``--set``'s)


def set_dotted(doc: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    """``doc[a][b][c] = value`` for ``"a.b.c"``, creating missing sections."""
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


def apply_overrides(doc: dict[str, Any], overrides: Overrides | None, source: str) -> None:
    """Apply ``overrides`` (strings or a mapping; None or empty: none) in place."""
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
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected dotted.key=value")
        try:
            value = parse_yaml(text) if text else ""
        except (yaml.YAMLError, DuplicateKeyError):
            value = text
        set_dotted(doc, key.strip(), value, f"{source}: --set")


# pydantic's names for the members of an untagged union (``seeds.int``,
# ``gpu_price_per_hour.dict[str,constrained-float]``, ``function-after[...]``)
# and for the model classes in one (``ModelSpec``); nothing a user wrote.
_TYPE_NAMES = frozenset({"int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set"})


def _pydantic_label(item: Any) -> bool:
    """Whether a location item is pydantic's name of a union member, not a key."""
    if not isinstance(item, str):
        return False
    return item in _TYPE_NAMES or "[" in item or "-" in item or item[:1].isupper()


def field_path(doc: Any, loc: tuple[Any, ...]) -> str:
    """The dotted path as written in the file: without union tags like ``synthetic``
    or pydantic's names of union members like ``int`` or ``function-after[...]``.

    pydantic puts the ``kind`` of a tagged union and the type it tried of an
    untagged one into the error location; a user (and ``--set``) knows only the
    keys they wrote. A key the document holds is always the user's.
    """
    parts: list[str] = []
    node = doc
    for item in loc:
        held = isinstance(node, dict) and item in node
        if not held and isinstance(node, dict) and node.get("kind") == item:
            continue  # a union tag
        if not held and _pydantic_label(item):
            continue
        parts.append(str(item))
        if isinstance(node, dict):
            node = node.get(item)
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            node = node[item]
        else:
            node = None
    return ".".join(parts)


def _problem(err: Any, doc: Any) -> str:
    """One pydantic error as ``path: what is wrong``, by the names the user wrote."""
    path = field_path(doc, tuple(err["loc"]))
    msg = str(err["msg"]).removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        # The tag is a field of its own: name it, and the kinds there are.
        key = str(ctx.get("discriminator", "kind")).strip("'\"")
        path = f"{path}.{key}" if path else key
        if err["type"] == "union_tag_not_found":
            msg = "Field required"
        else:
            msg = f"unknown {key} {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    elif err["type"] in ("model_type", "model_attributes_type", "dataclass_type"):
        msg = msg.split(" or instance of ")[0]  # the class's name means nothing in YAML
    return f"{path}: {msg}" if path else msg


def format_error(source: str, error: ValidationError, doc: Any = None) -> str:
    """One line naming ``source`` and the first three problems, by the paths written in ``doc``."""
    parts = [_problem(err, doc) for err in error.errors()[:3]]
    more = len(error.errors()) - 3
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{source}: " + "; ".join(parts) + tail
