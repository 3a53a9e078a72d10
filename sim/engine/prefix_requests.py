"""What requests say about prefixes: their prefix fields and their cache counters.

``prefix_describer`` fills in a request's shareable-prefix fields from an
open-loop workload (``sim.engine.prefix_cache`` keys blocks by them);
``prefix_cache_summary`` sums the counters every admission updates, as vLLM's
``PrefixCacheStats`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sim.engine.records import RequestTable, require_columns
from sim.engine.request import Request

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd


def prefix_describer(work: object) -> Callable[[Request], None] | None:
    """A function filling in a request's prefix fields from an open-loop workload.

    ``work`` may carry ``prefix_group`` with ``num_shared_prefix_tokens``
    (arrays indexed by request id) and/or ``block_hash_ids`` (a sequence of
    tuples, each id standing for ``block_hash_tokens`` tokens); returns
    ``None`` when it carries neither (the fast path).
    """
    groups = getattr(work, "prefix_group", None)
    shared = getattr(work, "num_shared_prefix_tokens", None)
    hash_ids = getattr(work, "block_hash_ids", None)
    hash_tokens = getattr(work, "block_hash_tokens", None)
    if groups is None and hash_ids is None:
        return None
    group_list: list[int] | None = None if groups is None else groups.tolist()
    shared_list: list[int] | None = None if shared is None else shared.tolist()

    def describe(request: Request) -> None:
        i = request.request_id
        if group_list is not None and shared_list is not None:
            request.prefix_group = group_list[i]
            request.num_shared_prefix_tokens = shared_list[i]
        if hash_ids is not None:
            request.block_hash_ids = hash_ids[i]
            request.block_hash_tokens = hash_tokens

    return describe


def prefix_cache_summary(requests: pd.DataFrame | RequestTable) -> dict[str, float | int]:
    """summary.json keys, as vLLM's PrefixCacheStats counts them: lookups (one per
    admission that looks the cache up, re-admissions after preemption included), the
    tokens looked up and the tokens found, over every request; the hit rate is found
    over looked-up tokens (0 when prefix caching is off: nothing is looked up)."""
    columns = ("num_prefix_lookups", "num_prefix_query_tokens", "num_prefix_hit_tokens")
    table = require_columns(requests, columns, "requests")
    lookups, queries, hits = (_count(table[c]) for c in columns)
    return {
        "prefix_cache_requests": lookups,
        "prefix_cache_query_tokens": queries,
        "prefix_cache_hit_tokens": hits,
        "prefix_cache_hit_rate": hits / queries if queries else 0.0,
    }


def _count(values: pd.Series | npt.NDArray[Any]) -> int:
    """The sum of a count column (integers summed as integers); NaN counts 0."""
    if isinstance(values, np.ndarray):  # a RequestTable's column
        return int(values.sum()) if values.dtype.kind in "iub" else int(np.nansum(values))
    return int(values.fillna(0).sum())
