"""YAML input read strictly: a key written twice in one mapping is an error.

PyYAML keeps the last of duplicate keys silently, so a scenario with two
``workload:`` blocks would run the second and ignore the first. Every user
YAML file (scenarios, sweeps) goes through :func:`read_yaml`, which turns
each problem into a one-line :class:`ConfigError` naming the file and line:
an unreadable, binary or oversized file, a syntax error, or a duplicate key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError

_MERGE_TAG = "tag:yaml.org,2002:merge"
# A scenario or sweep is a few kB (the largest shipped is ~3 kB; traces and
# tables live in files they name). PyYAML parses ~1 MB/s, so a 40 MB file took
# 46 s to be refused: refuse by size first, bytes.
MAX_YAML_BYTES = 1 << 20


class DuplicateKeyError(Exception):
    """A mapping repeats ``key``; ``line`` (1-based) is its second occurrence."""

    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"line {line}: duplicate key {key!r} (first at line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key given twice in one mapping (merge keys aside)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:  # ``<<: *anchor`` may be overridden by design
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKeyError(key, line, seen[key])
                seen[key] = line
            except TypeError:  # an unhashable key: SafeLoader reports it itself
                continue
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str) -> Any:
    """Parse YAML ``text``; raises ``yaml.YAMLError`` or :class:`DuplicateKeyError`."""
    return yaml.load(text, Loader=_StrictLoader)


def read_yaml(path: str | Path, what: str) -> dict[str, Any]:
    """The mapping of ``what`` fields in ``path`` (an empty file: none), or a one-line
    ``ConfigError`` naming file and line."""
    path = Path(path)
    try:
        size_bytes = path.stat().st_size
        if size_bytes > MAX_YAML_BYTES:
            raise ConfigError(
                f"{path}: {size_bytes:,} bytes is too large for a {what} file (at most "
                f"{MAX_YAML_BYTES:,}); put traces and tables in files the {what} names"
            )
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read {what} ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not a text {what} file (byte {error.start} is not UTF-8)"
        ) from None
    try:
        doc = parse_yaml(text)
    except DuplicateKeyError as error:
        raise ConfigError(
            f"{path}: line {error.line}: duplicate key {error.key!r} "
            f"(first at line {error.first_line}); each key may appear once"
        ) from None
    except yaml.YAMLError as error:
        marked = error if isinstance(error, yaml.MarkedYAMLError) else None
        mark = None if marked is None else marked.problem_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = (None if marked is None else marked.problem) or "invalid YAML"
        raise ConfigError(f"{path}:{where} {problem}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping of {what} fields at the top level")
    return doc
