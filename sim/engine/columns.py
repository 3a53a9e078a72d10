"""Append-only numeric columns, stored compactly in ``array.array`` (4–8 bytes an
entry, not a list's ~32, and numpy arrays without a copy).

Columns of one dtype share one array, row by row (a *group*: ``b: i4, c: i4``
hold ``b0 c0 b1 c1 ...``), so a hot caller adds a row with one ``extend`` per
dtype (``group``); ``views`` splits the groups into columns.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

# numpy dtype -> array typecode of the same size
TYPECODES = {"f8": "d", "i4": "i", "i8": "q"}


class Columns:
    """Named columns of one dtype each (``f8``, ``i4`` or ``i8``), appended row by row."""

    def __init__(self, dtypes: dict[str, str]) -> None:
        self._dtypes = dtypes
        self._groups: dict[str, array[Any]] = {}
        self._names: dict[str, list[str]] = {}  # dtype -> its columns, in row order
        for name, dtype in dtypes.items():
            if dtype not in self._groups:
                self._groups[dtype] = array(TYPECODES[dtype])
                self._names[dtype] = []
            self._names[dtype].append(name)
        self._appenders = [self._groups[dtype].append for dtype in dtypes.values()]

    def group(self, dtype: str, names: tuple[str, ...]) -> array[Any]:
        """The array holding the ``dtype`` columns, rows side by side; ``names``: those
        columns in order (the caller states the layout it extends)."""
        if tuple(self._names.get(dtype, ())) != names:
            raise ValueError(f"{dtype} columns are {self._names.get(dtype)}, not {list(names)}")
        return self._groups[dtype]

    def append(self, *values: float) -> None:
        """Append one row; values in the order the columns were declared."""
        for append, value in zip(self._appenders, values, strict=True):
            append(value)

    def views(self) -> dict[str, npt.NDArray[Any]]:
        """Each column as a numpy array sharing memory with the groups (the groups
        cannot grow while a view lives)."""
        out: dict[str, npt.NDArray[Any]] = {}
        for dtype, names in self._names.items():
            rows = np.frombuffer(self._groups[dtype], dtype=dtype).reshape(-1, len(names))
            for k, name in enumerate(names):
                out[name] = rows[:, k]
        return {name: out[name] for name in self._dtypes}

    def frame(self) -> pd.DataFrame:
        """All rows as a DataFrame (columns in declared order)."""
        return frame_of(self.views())


def frame_of(columns: Mapping[str, npt.NDArray[Any]]) -> pd.DataFrame:
    """``columns`` as a DataFrame sharing their memory: the one place numpy columns
    become a frame."""
    # Imported here: pandas loads with the first frame, after a run's summary is out
    # (docs/dev/speed.md).
    import pandas as pd

    return pd.DataFrame(columns, copy=False)
