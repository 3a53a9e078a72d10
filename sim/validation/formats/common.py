"""Helpers the format readers share: documents, typed fields, one-line errors."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.errors import ConfigError
from sim.validation.runs import ImportedRun
from sim.workload.json_lines import at_line, inner_suffix, read_text
from sim.workload.trace import TOO_MANY_TOKENS


def load_document(path: Path) -> Any:
    """A JSON or YAML document (by suffix: ``.yaml``/``.yml`` are YAML; either may be
    gzipped, ``.json.gz``)."""
    text = read_text(path)
    if inner_suffix(path) in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = error.problem_mark if isinstance(error, yaml.MarkedYAMLError) else None
            here = at_line(path, mark.line + 1) if mark is not None else str(path)
            raise ConfigError(f"{here}: not YAML ({type(error).__name__})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{at_line(path, error.lineno)}: not JSON ({error.msg})") from None


def number(value: Any, where: str, field: str, *, text: bool = True) -> float:
    """``value`` as a finite float, or ConfigError naming ``where`` and ``field``
    (``text``: a number written as a string is one too)."""
    if text and isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)  # OTLP JSON writes 64-bit integers as strings
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: {field} must be a finite number, got {value!r}")
    return float(value)


def count(value: Any, where: str, field: str) -> int:
    """``value`` as a whole count >= 0 (tokens, clients), below ``TOO_MANY_TOKENS``."""
    result = number(value, where, field)
    if result < 0 or result != math.floor(result):
        raise ConfigError(f"{where}: {field} must be a whole number >= 0, got {value!r}")
    if result >= TOO_MANY_TOKENS:
        raise ConfigError(f"{where}: {field} must be below 2**53, got {value!r}")
    return int(result)


def mapping(value: Any, where: str, field: str) -> dict[str, Any]:
    """``value`` as a JSON object."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {field} must be an object, got {type(value).__name__}")
    return value


def listing(value: Any, where: str, field: str) -> list[Any]:
    """``value`` as a JSON list."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {field} must be a list, got {type(value).__name__}")
    return value


def first_present(record: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` in ``record`` with a non-null value (None if none)."""
    for name in names:
        value = record.get(name)
        if value is not None:
            return value
    return None


def listed_once(seen: dict[Any, str], request_id: Any, where: str, field: str) -> None:
    """ConfigError when ``request_id`` (``field`` at ``where``; None: not recorded) was
    listed before (``seen``: each id and where it was first): a request exported
    twice would be counted, and replayed, twice."""
    if request_id is None:
        return
    if request_id in seen:
        raise ConfigError(
            f"{where}: {field} {request_id!r} listed again (first at {seen[request_id]}); "
            "a request listed twice would be replayed twice"
        )
    seen[request_id] = where


def with_shared_prefix(run: ImportedRun, tokens: int, groups: int, declared_by: str) -> ImportedRun:
    """``run`` with a shared prompt prefix declared: request ``i`` (in arrival order)
    belongs to group ``i % groups``, whose requests share their first ``tokens``
    prompt tokens (fewer where a prompt is shorter), the table's
    ``prefix_group`` and ``num_shared_prefix_tokens`` columns, which a replay
    reads (``sim.validation.predict.requests_as_work``). The measured prompt
    lengths already include the prefix. ``declared_by`` is recorded in
    ``run.json`` (the report, or ``--prefix-tokens``). ``--prefix-tokens`` longer than
    some prompt is refused: every prompt began with the shared prefix, so it cannot be."""
    if tokens < 1 or groups < 1:
        raise ConfigError(f"{declared_by}: prefix tokens and groups must be >= 1")
    requests = run.requests
    prompts = requests["num_prompt_tokens"].to_numpy(dtype=np.int64)
    num_shorter = int(np.count_nonzero(prompts < tokens))
    if num_shorter and declared_by == "--prefix-tokens":
        raise ConfigError(
            f"--prefix-tokens {tokens}: longer than {num_shorter} of the "
            f"{len(prompts)} prompts (the shortest has {int(prompts.min())} tokens); every "
            "prompt begins with the shared prefix, so it is at most the shortest prompt"
        )
    ids = requests["request_id"].to_numpy(dtype=np.int64)
    shared = np.minimum(prompts, tokens)
    table = requests.assign(prefix_group=ids % groups, num_shared_prefix_tokens=shared)
    meta = run.meta | {
        "shared_prefix": {
            "tokens": tokens,
            "groups": groups,
            "declared_by": declared_by,
            "num_shorter_prompts": num_shorter,
        }
    }
    return ImportedRun(table, meta, run.tokens)
