"""Append-only numeric columns in fixed-size numpy chunks.

A simulation of a million requests logs tens of millions of steps; Python
lists of floats would cost ~32 bytes an entry, these cost 4–8.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

CHUNK_ROWS = 1 << 16


class Columns:
    """Named columns of one dtype each, appended row by row or in slices."""

    def __init__(self, dtypes: dict[str, str]) -> None:
        self._dtypes = dtypes
        self._done: dict[str, list[npt.NDArray[np.generic]]] = {name: [] for name in dtypes}
        self._chunk = {name: np.empty(CHUNK_ROWS, dtype=dt) for name, dt in dtypes.items()}
        self._arrays = list(self._chunk.values())
        self._fill = 0
        self.num_rows = 0

    def _flush(self) -> None:
        for name, chunk in self._chunk.items():
            self._done[name].append(chunk[: self._fill].copy())
        self._fill = 0
        self._arrays = list(self._chunk.values())

    def append(self, *values: float) -> None:
        """Append one row; values in the order the columns were declared."""
        if self._fill == CHUNK_ROWS:
            self._flush()
        i = self._fill
        for chunk, value in zip(self._arrays, values, strict=True):
            chunk[i] = value
        self._fill = i + 1
        self.num_rows += 1

    def frame(self) -> pd.DataFrame:
        """All rows as a DataFrame; empties the columns (a log can be GBs: no second copy)."""
        self._flush()
        data = {}
        for name in list(self._done):
            parts = self._done.pop(name)
            data[name] = np.concatenate(parts) if parts else np.empty(0, self._dtypes[name])
            del parts  # free each column's chunks before concatenating the next
        self._done = {name: [] for name in self._dtypes}
        self.num_rows = 0
        return pd.DataFrame(data, copy=False)
