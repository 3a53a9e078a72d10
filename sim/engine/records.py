"""The per-request record table: one row per request, which completed, which were
rejected (engine knowledge the serving layer and the metrics both need)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray
from sim.engine.columns import frame_of

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

BoolArray = npt.NDArray[np.bool_]
Records = dict[str, npt.NDArray[Any]]  # columns by name, one row per request

# ``EngineCore.series`` (a row per plan) and ``records`` (a row per request) dtypes.
SERIES_COLUMNS = {
    "time_s": "f8",
    "num_waiting": "i4",
    "num_running": "i4",
    "num_kv_blocks_used": "i4",
}
RECORD_COLUMNS = {
    "request_id": "i8",
    "arrival_s": "f8",
    "ready_s": "f8",
    "first_scheduled_s": "f8",
    "first_token_s": "f8",
    "finish_s": "f8",
    "num_prompt_tokens": "i8",
    "num_output_tokens": "i8",
    "num_generated_tokens": "i8",
    "num_preemptions": "i8",
    "replica": "i4",
    "num_swaps": "i8",
    "priority": "i8",
    "num_cached_tokens": "i8",
    "num_prefix_lookups": "i8",
    "num_prefix_query_tokens": "i8",
    "num_prefix_hit_tokens": "i8",
}


# The columns every per-request table holds besides ``rejection_reason`` (a run's, a
# measured run's).
REQUEST_COLUMNS = (
    "request_id",
    "arrival_s",
    "ready_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "num_prompt_tokens",
    "num_output_tokens",
    "num_generated_tokens",
)


class RequestTable:
    """A run's per-request table as numpy columns, in ``request_id`` order, and why
    each rejected request was turned away.

    What every metric reads, without pandas (~0.3 s to import); it answers what
    they ask of a frame (``table[name]``, ``in``, ``columns``, ``len``).
    ``frame()`` builds the DataFrame; ``nullable``: float64 columns (NaN where
    missing) it gives a pandas nullable integer dtype. A frame made elsewhere
    becomes a table once, at its edge (``from_frame``).
    """

    def __init__(
        self,
        columns: Records,
        rejections: Mapping[int, str],
        nullable: Mapping[str, str] | None = None,
    ) -> None:
        self._columns = columns
        self.rejections = rejections
        self.nullable: dict[str, Any] = dict(nullable or {})  # name: pandas dtype
        self._num_rows = len(columns["request_id"])
        self._reason_at = len(columns)  # rejection_reason's place in the frame

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> RequestTable:
        """A per-request frame made outside a run as a table, rows in its order (id
        order): nullable integers as float64 (NaN where missing), text as objects,
        ``rejection_reason`` as the rejections."""
        frame = require_columns(frame, [*REQUEST_COLUMNS, "rejection_reason"], "requests")
        columns: Records = {}
        nullable: dict[str, str] = {}
        for name, values in frame.drop(columns="rejection_reason").items():
            kind = values.dtype.kind  # pandas' nullable dtypes have numpy's kinds too
            if isinstance(values.dtype, np.dtype) and kind in "biuf":
                columns[str(name)] = values.to_numpy()
            elif kind in "biuf":  # nullable: NaN where missing
                columns[str(name)] = values.to_numpy(dtype=np.float64, na_value=np.nan)
                if kind in "iu":
                    nullable[str(name)] = str(values.dtype)
            else:
                columns[str(name)] = values.astype(object).where(values.notna(), None).to_numpy()
        reasons = frame["rejection_reason"]
        ids = frame["request_id"][reasons.notna()].tolist()
        rejections = dict(zip(ids, map(str, reasons.dropna().tolist()), strict=True))
        return cls(columns, rejections, nullable)

    @property
    def columns(self) -> list[str]:
        names = list(self._columns)
        names.insert(self._reason_at, "rejection_reason")
        return names

    def __len__(self) -> int:
        return self._num_rows

    def __contains__(self, name: object) -> bool:
        return name in self._columns or name == "rejection_reason"

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        if name == "rejection_reason":  # object: the reason, or None
            reasons = self.rejections
            return np.array([reasons.get(i) for i in self._columns["request_id"].tolist()], object)
        return self._columns[name]

    def __setitem__(self, name: str, values: npt.NDArray[Any]) -> None:
        if len(values) != self._num_rows:
            raise ValueError(f"column {name!r}: {len(values)} values for {self._num_rows} rows")
        self._columns[name] = values

    def find(self, request_ids: npt.ArrayLike) -> tuple[npt.NDArray[np.intp], BoolArray]:
        """The row of each of ``request_ids`` and whether it is in the table."""
        return rows_of(self._columns["request_id"], np.asarray(request_ids))

    @property
    def rejected(self) -> BoolArray:
        """True for requests turned away (with a non-empty reason)."""
        ids = [request_id for request_id, reason in self.rejections.items() if reason]
        return np.isin(self._columns["request_id"], np.array(ids, dtype=np.int64))

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame (the columns share memory with it, but nullable ones)."""
        frame = frame_of(self._columns)
        for name, dtype in self.nullable.items():
            frame[name] = frame[name].astype(dtype)
        reasons = reason_column(frame["request_id"], self.rejections)
        frame.insert(self._reason_at, "rejection_reason", reasons)
        return frame


def rows_of(
    ids: npt.NDArray[Any], wanted: npt.NDArray[Any], order: npt.NDArray[np.intp] | None = None
) -> tuple[npt.NDArray[np.intp], BoolArray]:
    """The row of ``ids`` (unique, sorted, or sorted at ``order``) holding each of
    ``wanted``, and whether one does; a missing id's row is meaningless."""
    at = np.minimum(np.searchsorted(ids, wanted, sorter=order), max(len(ids) - 1, 0))
    if not len(ids):
        return at, np.zeros(np.shape(wanted), dtype=bool)
    rows = at if order is None else order[at]
    return rows, ids[rows] == wanted


def text_dtype() -> Any:
    """pandas' text dtype: ``str`` from pandas 3 (missing as NaN, what ``pd.read_parquet``
    gives a text column), else the ``string`` extension dtype (missing as ``pd.NA``)."""
    import pandas as pd

    inferred = pd.Series([""]).dtype
    return pd.StringDtype() if inferred == np.dtype(object) else inferred


def reason_column(request_ids: pd.Series, rejections: Mapping[int, str]) -> pd.Series:
    """``rejection_reason`` for ``request_ids``: missing where accepted, in
    ``text_dtype`` even with no rejection at all."""
    return request_ids.map(rejections).astype(text_dtype()).rename("rejection_reason")


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    """``frame``, checked to have ``columns``; an empty frame may lack them all."""
    missing = [c for c in columns if c not in frame.columns]
    if missing and len(frame) == 0:  # e.g. pd.DataFrame([]) from a run without requests
        return frame.reindex(columns=[*frame.columns, *missing])
    if missing:
        raise ValueError(f"{what} frame lacks columns {missing}")
    return frame


def floats(series: pd.Series | npt.NDArray[Any]) -> FloatArray:
    """``series`` as float64, anything non-numeric as NaN."""
    if isinstance(series, np.ndarray) and series.dtype.kind in "fiub":
        return series.astype(np.float64, copy=False)  # a RequestTable's column: numbers
    import pandas as pd

    return np.asarray(pd.to_numeric(series, errors="coerce"), dtype=np.float64)


def completed_mask(requests: RequestTable) -> BoolArray:
    """True for requests that finished and were not rejected."""
    return np.isfinite(floats(requests["finish_s"])) & ~requests.rejected
