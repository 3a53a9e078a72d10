"""A run's tables (pandas) cut down to what its figures draw (``sim.metrics.figure_data``).

Each function here takes what the matching ``plot_*`` function of
``sim.metrics.plots`` / ``sim.metrics.waterfall`` takes and returns the arrays
that function draws, so that drawing (matplotlib) can happen in a process that
never imports pandas. No matplotlib here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from sim.engine.records import completed_mask
from sim.metrics.figure_data import (
    CdfData,
    FloatArray,
    PhaseBars,
    TimeseriesData,
    WaterfallData,
)
from sim.metrics.lifecycle import PHASES
from sim.metrics.stats import Slo, request_latencies
from sim.serving.cluster import total_over_replicas

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

# The time series' panels, top to bottom: column and scale (KV usage, a fraction, in %).
TIMESERIES_COLUMNS = (("num_waiting", 1.0), ("num_running", 1.0), ("kv_cache_usage", 100.0))


def as_floats(series: pd.Series) -> FloatArray:
    """Float64 values of a column; missing (None, NA, non-numeric) become NaN."""
    import pandas as pd

    return np.asarray(
        pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    )


def cdf_data(requests: pd.DataFrame, slo: Slo | None = None) -> CdfData:
    """TTFT and TPOT (ms) of completed requests; TPOT over requests with at least
    two output tokens, as in the summary; the TTFT/TPOT SLOs of ``slo``."""
    done = request_latencies(requests)[completed_mask(requests)]
    ttft_ms = done["ttft_s"].to_numpy(dtype=np.float64) * 1000.0
    tpot_ms = done["tpot_s"].to_numpy(dtype=np.float64) * 1000.0
    return CdfData(
        ttft_ms[np.isfinite(ttft_ms)],
        tpot_ms[np.isfinite(tpot_ms)],
        len(done),
        slo.ttft_ms if slo else None,
        slo.tpot_ms if slo else None,
    )


def timeseries_data(timeseries: pd.DataFrame) -> TimeseriesData:
    """Sample times in order and each panel's values (``TIMESERIES_COLUMNS``).

    Several replicas are drawn as one: queues summed, KV usage averaged.
    """
    frame = total_over_replicas(timeseries)
    if "time_s" in frame.columns and not frame["time_s"].is_monotonic_increasing:
        frame = frame.sort_values("time_s", kind="stable")
    time_s = as_floats(frame["time_s"]) if "time_s" in frame.columns else np.empty(0)
    series = tuple(
        as_floats(frame[column]) * scale if column in frame.columns else None
        for column, scale in TIMESERIES_COLUMNS
    )
    return TimeseriesData(time_s, series)


def waterfall_data(spans: pd.DataFrame, requests: pd.DataFrame) -> WaterfallData:
    """The bars of each request of ``spans`` (``sim.metrics.lifecycle``), in rows by
    request id, and each one's first token time from ``requests``."""
    ids = sorted(int(i) for i in spans["request_id"].unique()) if len(spans) else []
    row_of = {request_id: row for row, request_id in enumerate(ids)}
    bars = []
    for phase, group in spans.groupby("phase", sort=False):
        # Each request's row (float: the bars' y); pandas' stubs type it as integers.
        rows = cast(FloatArray, group["request_id"].map(row_of).to_numpy(dtype=np.float64))
        start_s: FloatArray = group["start_s"].to_numpy(dtype=np.float64)
        end_s: FloatArray = group["end_s"].to_numpy(dtype=np.float64)
        bars.append(PhaseBars(str(phase), rows, start_s, end_s))
    firsts = requests.set_index("request_id").reindex(ids)["first_token_s"].to_numpy(float)
    present = [p for p in PHASES if p in set(spans["phase"])] if len(spans) else []
    return WaterfallData(tuple(ids), tuple(bars), firsts, tuple(present))
