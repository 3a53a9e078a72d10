"""The per-request record table: which requests completed, which were rejected.

Every executor ends with one row per request (``EngineCore``'s records plus a
``rejection_reason`` column). Deciding which rows count as completed is
engine knowledge, needed both by the serving layer (per-replica summaries,
prefix-cache hit rates) and by the metrics, so it lives here, below both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from sim.engine.columns import frame_of

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# The engine core's columns (``EngineCore.series``: one row per plan; ``records``:
# one row per request), as numpy dtypes.
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


class RequestTable:
    """A run's per-request table as numpy columns, one row per request, in
    ``request_id`` order, and why each rejected one was turned away.

    What a run's summary reads, without pandas (~0.3 s to import: ``servesim
    run`` prints its summary first). It answers the few questions the metrics
    ask of a frame (``table[name]``, ``name in table``, ``table.columns``,
    ``len(table)``: rows); ``frame()`` builds the DataFrame, with a
    ``rejection_reason`` text column (``reason_column``) after the record columns.
    """

    def __init__(self, columns: dict[str, npt.NDArray[Any]], rejections: Mapping[int, str]) -> None:
        self._columns = columns
        self.rejections = rejections
        self._num_rows = len(columns["request_id"])

    @property
    def columns(self) -> list[str]:
        """Column names, as the frame has them."""
        names = list(self._columns)
        names.insert(len(RECORD_COLUMNS), "rejection_reason")
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

    def find(self, request_ids: npt.ArrayLike) -> tuple[npt.NDArray[np.intp], BoolArray]:
        """The row of each of ``request_ids`` and whether it is in the table (a
        binary search: rows are in id order). A missing id's row is some valid
        row, not its own: read only where found."""
        known = self._columns["request_id"]
        wanted = np.asarray(request_ids)
        rows = np.minimum(np.searchsorted(known, wanted), max(self._num_rows - 1, 0))
        if not self._num_rows:
            return rows, np.zeros(wanted.shape, dtype=bool)
        return rows, known[rows] == wanted

    @property
    def rejected(self) -> BoolArray:
        """True for requests turned away (with a non-empty reason)."""
        ids = [request_id for request_id, reason in self.rejections.items() if reason]
        return np.isin(self._columns["request_id"], np.array(ids, dtype=np.int64))

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame (the columns share memory with it)."""
        frame = frame_of(self._columns)
        reasons = reason_column(frame["request_id"], self.rejections)
        frame.insert(len(RECORD_COLUMNS), "rejection_reason", reasons)
        return frame


def text_dtype() -> Any:
    """pandas' text dtype: ``str`` from pandas 3 (missing as NaN, what ``pd.read_parquet``
    gives a text column), else the ``string`` extension dtype (missing as ``pd.NA``)."""
    import pandas as pd

    inferred = pd.Series([""]).dtype
    return pd.StringDtype() if inferred == np.dtype(object) else inferred


def reason_column(request_ids: pd.Series, rejections: Mapping[int, str]) -> pd.Series:
    """``rejection_reason`` for the requests ``request_ids``: each one's reason, missing
    where it was accepted, in ``text_dtype`` whatever the rows hold (with no rejection at
    all it is still a text column, not a float one of NaN)."""
    # With no rejection the map is all missing, cast to text all the same.
    return request_ids.map(rejections).astype(text_dtype()).rename("rejection_reason")


@overload
def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame: ...
@overload
def require_columns(frame: RequestTable, columns: Sequence[str], what: str) -> RequestTable: ...
@overload
def require_columns(
    frame: pd.DataFrame | RequestTable, columns: Sequence[str], what: str
) -> pd.DataFrame | RequestTable: ...
def require_columns(
    frame: pd.DataFrame | RequestTable, columns: Sequence[str], what: str
) -> pd.DataFrame | RequestTable:
    """``frame``, checked to have ``columns``; an empty frame may lack them all."""
    missing = [c for c in columns if c not in frame.columns]
    if missing and len(frame) == 0 and not isinstance(frame, RequestTable):
        # e.g. pd.DataFrame([]) from a run without requests
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


def rejected_mask(requests: pd.DataFrame | RequestTable) -> BoolArray:
    """True where ``rejection_reason`` is a non-empty string (not None/NA/"")."""
    if isinstance(requests, RequestTable):
        return requests.rejected
    requests = require_columns(requests, ["rejection_reason"], "requests")
    reasons = requests["rejection_reason"].astype("string").fillna("")
    return np.asarray(reasons.ne("").to_numpy(dtype=bool, na_value=False))


def completed_mask(requests: pd.DataFrame | RequestTable) -> BoolArray:
    """True for requests that finished and were not rejected."""
    requests = require_columns(requests, ["finish_s", "rejection_reason"], "requests")
    return np.isfinite(floats(requests["finish_s"])) & ~rejected_mask(requests)
