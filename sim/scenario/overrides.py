"""``--set`` overrides and validation messages for scenario files.

Part of the ``sim.scenario`` face (``set_dotted`` and ``apply_overrides`` are
re-exported there). Overrides are applied to the raw document before
validation, so they are checked exactly like the file.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from sim.errors import ConfigError
from sim.scenario.strict_yaml import DuplicateKeyError, parse_yaml


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


def apply_overrides(doc: dict[str, Any], overrides: Sequence[str], source: str) -> None:
    """Apply ``key.sub=value`` strings (values parsed as YAML) in place."""
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected dotted.key=value")
        try:
            value = parse_yaml(text) if text else ""
        except (yaml.YAMLError, DuplicateKeyError):
            value = text
        set_dotted(doc, key.strip(), value, f"{source}: --set")


def field_path(doc: Any, loc: tuple[Any, ...]) -> str:
    """The dotted path as written in the file: without union tags like ``synthetic``.

    pydantic puts the ``kind`` of a tagged union into the error location; a
    user (and ``--set``) knows only the keys they wrote.
    """
    parts: list[str] = []
    node = doc
    for item in loc:
        if str(item).startswith("function-"):
            continue
        if isinstance(node, dict) and item not in node and node.get("kind") == item:
            continue  # a union tag
        parts.append(str(item))
        if isinstance(node, dict):
            node = node.get(item)
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            node = node[item]
        else:
            node = None
    return ".".join(parts)


def format_error(source: str, error: ValidationError, doc: Any = None) -> str:
    """One line naming ``source`` and the first three problems, by the paths written in ``doc``."""
    parts = []
    for err in error.errors()[:3]:
        loc = field_path(doc, tuple(err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = len(error.errors()) - 3
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{source}: " + "; ".join(parts) + tail
