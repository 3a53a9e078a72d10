"""The per-request record table: which requests completed, which were rejected.

Every executor ends with one row per request (``EngineCore``'s records plus a
``rejection_reason`` column). Deciding which rows count as completed is
engine knowledge, needed both by the serving layer (per-replica summaries,
prefix-cache hit rates) and by the metrics, so it lives here, below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

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


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    """``frame``, checked to have ``columns``; an empty frame may lack them all."""
    missing = [c for c in columns if c not in frame.columns]
    if missing and len(frame) == 0:  # e.g. pd.DataFrame([]) from a run without requests
        return frame.reindex(columns=[*frame.columns, *missing])
    if missing:
        raise ValueError(f"{what} frame lacks columns {missing}")
    return frame


def floats(series: pd.Series) -> FloatArray:
    """``series`` as float64, anything non-numeric as NaN."""
    import pandas as pd

    return np.asarray(pd.to_numeric(series, errors="coerce"), dtype=np.float64)


def rejected_mask(requests: pd.DataFrame) -> BoolArray:
    """True where ``rejection_reason`` is a non-empty string (not None/NA/"")."""
    requests = require_columns(requests, ["rejection_reason"], "requests")
    reasons = requests["rejection_reason"].astype("string").fillna("")
    return np.asarray(reasons.ne("").to_numpy(dtype=bool, na_value=False))


def completed_mask(requests: pd.DataFrame) -> BoolArray:
    """True for requests that finished and were not rejected."""
    requests = require_columns(requests, ["finish_s", "rejection_reason"], "requests")
    return np.isfinite(floats(requests["finish_s"])) & ~rejected_mask(requests)
