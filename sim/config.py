"""What every configuration section read from a file shares: ``Frozen``, the base of
its pydantic model (an unknown key is an error, a built value never changes), and
``anchored``, how a path the file names is read (against the file's folder); and what
every layer's arrays are typed as, ``FloatArray`` and ``IntArray``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

# Here, the bottom every layer may import (docs/architecture.md), so they are one type
# each: seconds, tokens and counts as every column and table holds them.
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class Frozen(BaseModel):
    """A configuration section: unknown keys refused, immutable once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
