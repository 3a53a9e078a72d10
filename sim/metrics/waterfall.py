"""The waterfall: the first requests of a run as horizontal bars coloured by phase.

One row per request (request 0 at the top), time on the x axis; each bar is
cut into the phases of ``sim.metrics.lifecycle`` and a black tick marks the
first streamed token (TTFT ends there). Drawn on an Agg canvas like
``sim.metrics.plots``, by ``sim.metrics.waterfall_draw`` from the arrays
``sim.metrics.figure_prep.waterfall_data`` cuts out of the spans.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sim.metrics.figure_data import PHASE_COLORS, WATERFALL_ROWS
from sim.metrics.figure_prep import waterfall_data

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

__all__ = ["NUM_WATERFALL_REQUESTS", "PHASE_COLORS", "draw_waterfall", "plot_waterfall"]

NUM_WATERFALL_REQUESTS = WATERFALL_ROWS


def plot_waterfall(spans: pd.DataFrame, requests: pd.DataFrame, path: str | Path) -> Path:
    """Draw each request of ``spans`` (``sim.metrics.lifecycle``) as a bar; return ``path``."""
    # matplotlib on first use: importing this module (for NUM_WATERFALL_REQUESTS) stays cheap.
    from sim.metrics import waterfall_draw

    return waterfall_draw.draw_waterfall_figure(waterfall_data(spans, requests), path)


def draw_waterfall(ax: Axes, spans: pd.DataFrame, requests: pd.DataFrame) -> None:
    """The waterfall on ``ax`` (a notebook's own axes, say); ``requests`` gives first tokens."""
    from sim.metrics import waterfall_draw

    waterfall_draw.draw_waterfall_axes(ax, waterfall_data(spans, requests))
