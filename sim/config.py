"""What every configuration section read from a file shares: ``Frozen``, the base of
its pydantic model (an unknown key is an error, as is a true or false where a number
is wanted; a built value never changes), and ``anchored``, how a path the file names
is read (against the file's folder); and what every layer's arrays are typed as,
``FloatArray`` and ``IntArray``."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, model_validator

from sim.errors import BoolForNumber

# Here, the bottom every layer may import (docs/architecture.md), so they are one type
# each: seconds, tokens and counts as every column and table holds them.
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class Frozen(BaseModel):
    """A configuration section: unknown keys refused, immutable once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_number(cls, data: Any) -> Any:
        # pydantic's lax mode reads true as 1 and false as 0 where a number is wanted: a
        # user who wrote true for a rate, a seed or a count meant something else. (Not a
        # field validator: pydantic allows none on a union's ``kind``.)
        if not isinstance(data, dict):
            return data
        return {
            key: _switches_marked(value, _bool_refused(cls, key))
            if key in cls.model_fields
            else value
            for key, value in data.items()
        }


@cache
def _bool_refused(model: type[Frozen], name: str) -> bool | None:
    """``None`` if field ``name`` of ``model`` admits a bool or wants no number (pydantic
    speaks for itself there); else whether to look inside lists and mappings too (not
    where they may hold a model, whose own fields it checks)."""
    leaves: set[Any] = set()
    todo = [model.model_fields[name].annotation]
    while todo:
        annotation = todo.pop()
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Literal:
            leaves.update(type(arg) for arg in args)
        elif args:
            todo.extend(args[:1] if origin is Annotated else args)
        else:
            leaves.add(annotation)
    if leaves & {bool, Any, object} or not leaves & {int, float}:
        return None
    return not any(isinstance(leaf, type) and issubclass(leaf, BaseModel) for leaf in leaves)


def _switches_marked(value: Any, deep: bool | None) -> Any:
    """``value`` with a ``BoolForNumber`` for a bool (``deep``: in its lists and mappings
    too; ``None``: none, ``value`` as is)."""
    if deep is None:
        return value
    if isinstance(value, bool):
        return BoolForNumber(value)
    if deep and isinstance(value, dict):
        return {_switches_marked(k, deep): _switches_marked(v, deep) for k, v in value.items()}
    if deep and isinstance(value, list | tuple):
        return type(value)(_switches_marked(item, deep) for item in value)
    return value


def anchored(path: str | Path, base_dir: Path | str | None) -> Path:
    """``path`` (``~`` expanded); a relative one anchored at ``base_dir`` (the scenario
    file's folder) if given: how a scenario names any file (a model, an artifact)."""
    path = Path(path).expanduser()
    return path if path.is_absolute() or base_dir is None else Path(base_dir) / path


def named_files(doc: Any, base_dir: Path | str | None) -> list[Path]:
    """The files the strings of a scenario document (or one string) name, ``anchored``
    (a folder: the files in it), in order: what a run reads besides the scenario."""
    if isinstance(doc, dict | list):
        values = doc.values() if isinstance(doc, dict) else doc
        return [file for value in values for file in named_files(value, base_dir)]
    if not isinstance(doc, str) or not doc or "\n" in doc or len(doc) > 1024:
        return []  # (a description, not a path)
    path = anchored(doc, base_dir)
    try:
        if path.is_dir():
            return [file for file in sorted(path.iterdir()) if file.is_file()]
        return [path] if path.is_file() else []
    except OSError:
        return []  # unreadable: the run says so
