"""Drawing the waterfall from plain arrays (``sim.metrics.figure_data.WaterfallData``).

One row per request (request 0 at the top), time on the x axis; each bar is
cut into its phases and a black tick marks the first streamed token (TTFT ends
there). No pandas here (``sim.metrics.plot_draw`` says why);
``sim.metrics.waterfall`` draws from the spans' DataFrame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sim.metrics.figure_data import PHASE_COLORS, WATERFALL_ROWS, WaterfallData
from sim.metrics.plot_draw import (
    PREBUILT_TICKS,
    TITLE_Y,
    Margins,
    agg_figure,
    make_ticks,
    save_png,
)

_DPI = 120
# Figures made by ``prebuild``, by number of rows: a draw of as many takes (pops) its own.
_prebuilt: dict[int, tuple[Figure, Axes]] = {}


def _waterfall_figure(num_rows: int) -> tuple[Figure, Axes]:
    """The waterfall's figure and axes for ``num_rows`` requests, before its data."""
    height_in = min(2.0 + 0.22 * num_rows, 14.0)
    # Right: the legend, outside the axes (its longest label, "first token (TTFT)", at 8 pt).
    fig = agg_figure(11, height_in, Margins(left_in=0.7, right_in=1.55, top_in=0.4), dpi=_DPI)
    return fig, fig.add_subplot()


def prebuild(num_rows: int = WATERFALL_ROWS) -> None:
    """Make the figure of a waterfall of ``num_rows`` requests, a tick for each row
    included; the next draw of that many rows takes it (``plot_draw.prebuild``)."""
    fig, ax = _waterfall_figure(num_rows)
    make_ticks(fig, PREBUILT_TICKS, num_rows)
    _prebuilt[num_rows] = (fig, ax)


def draw_waterfall_figure(data: WaterfallData, path: str | Path) -> Path:
    """The waterfall of ``data`` in a figure of its own, written to ``path`` (returned)."""
    num_rows = len(data.ids)
    built = _prebuilt.pop(num_rows, None)
    fig, ax = built if built is not None else _waterfall_figure(num_rows)
    draw_waterfall_axes(ax, data)
    return save_png(fig, path)


def draw_waterfall_axes(ax: Axes, data: WaterfallData) -> None:
    """The waterfall of ``data`` on ``ax``."""
    ids = data.ids
    if not ids:
        ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
    for bars in data.bars:
        # One collection of rectangles per phase, not one per request and phase:
        # adding a collection costs ~1 ms, drawing a rectangle next to nothing.
        row = bars.rows
        corners = [
            (bars.start_s, row - 0.4),
            (bars.start_s, row + 0.4),
            (bars.end_s, row + 0.4),
            (bars.end_s, row - 0.4),
        ]
        rectangles = np.stack([np.column_stack(corner) for corner in corners], axis=1)
        ax.add_collection(PolyCollection(list(rectangles), color=PHASE_COLORS.get(bars.phase)))
    ax.autoscale_view()  # matplotlib < 3.11 does not rescale for a collection by itself
    firsts = data.first_token_s
    shown = np.isfinite(firsts)
    rows = np.arange(len(ids))[shown]
    ax.scatter(firsts[shown], rows, marker="|", s=120, color="black", zorder=3)
    handles: list[Any] = [Patch(color=PHASE_COLORS[p], label=p) for p in data.present]
    handles.append(ax.scatter([], [], marker="|", s=120, color="black", label="first token (TTFT)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_yticks(range(len(ids)), [str(i) for i in ids], fontsize=7)
    if ids:
        ax.set_ylim(len(ids) - 0.5, -0.5)  # request 0 on top
    ax.set_xlabel("Simulated time (s)")
    ax.set_ylabel("request id")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"Life of the first {len(ids)} requests, phase by phase", loc="left", y=TITLE_Y)
