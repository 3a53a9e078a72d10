"""Figures of a finished run from its tables: latency CDFs and the scheduler's time series.

``sim.metrics.figure_prep`` cuts the arrays to draw out of the DataFrames and
``sim.metrics.plot_draw`` draws them (matplotlib, on an Agg canvas; see there
for how the figures are kept cheap). The drawing side's names are re-exported
here, so ``sim.metrics.plots.agg_figure`` and the rest keep working.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.metrics import plot_draw
from sim.metrics.figure_prep import cdf_data, timeseries_data
from sim.metrics.plot_draw import (
    DPI,
    MAX_POINTS,
    PNG_COMPRESS_LEVEL,
    TITLE_Y,
    FloatArray,
    Margins,
    agg_figure,
    cdf_points,
    envelope,
    save_png,
    warm_up,
)
from sim.metrics.stats import Slo

__all__ = [
    "DPI",
    "MAX_POINTS",
    "PNG_COMPRESS_LEVEL",
    "TITLE_Y",
    "FloatArray",
    "Margins",
    "agg_figure",
    "cdf_points",
    "envelope",
    "plot_latency_cdfs",
    "plot_timeseries",
    "save_png",
    "warm_up",
]


def plot_latency_cdfs(requests: pd.DataFrame, path: str | Path, slo: Slo | None = None) -> Path:
    """TTFT and TPOT empirical CDFs of completed requests side by side, in ms.

    Marks p50 and p99 and draws the TTFT/TPOT SLOs of ``slo`` when given. TPOT is
    over requests with at least two output tokens, as in the summary. Returns ``path``.
    """
    return plot_draw.draw_latency_cdfs(cdf_data(requests, slo), path)


def plot_timeseries(timeseries: pd.DataFrame, path: str | Path) -> Path:
    """Queue length, running batch size and KV-cache usage (%), stacked on one time axis.

    Values are held until the next sample (step lines). Returns ``path``.
    Several replicas are drawn as one: queues summed, KV usage averaged.
    """
    return plot_draw.draw_timeseries(timeseries_data(timeseries), path)
