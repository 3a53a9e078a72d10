"""One line about rejected requests, so that a run that served almost nothing says so.

A request is rejected at intake when it can never be served (prompt plus
output longer than ``max_model_len_tokens``, or more KV blocks than the whole
cache). Such a run still "succeeds": without a note, a scenario whose every
prompt is too long exits 0 with a report of zero completions and nothing on
stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.engine.records import RequestTable, rejected_mask

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

MOST_REJECTED_SHARE = 0.5
"""Warn when at least this share of the requests was rejected."""


def rejection_warning(requests: pd.DataFrame | RequestTable) -> str | None:
    """A one-line warning with the count and the first reason, when most were rejected."""
    if len(requests) == 0 or "rejection_reason" not in requests:
        return None
    rejected = rejected_mask(requests)
    num_rejected = int(rejected.sum())
    if num_rejected == 0 or num_rejected < MOST_REJECTED_SHARE * len(requests):
        return None
    first = np.asarray(requests["rejection_reason"])[rejected][0]
    return (
        f"{num_rejected} of {len(requests)} requests ({num_rejected / len(requests):.0%}) were "
        f"rejected as never servable; the first: {first}"
    )
