"""The waterfall: the first requests of a run as horizontal bars coloured by phase.

One row per request (request 0 at the top), time on the x axis; each bar is
cut into the phases of ``sim.metrics.lifecycle`` and a black tick marks the
first streamed token (TTFT ends there). Drawn on an Agg canvas like
``sim.metrics.plots``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sim.metrics.lifecycle import PHASES

if TYPE_CHECKING:
    from matplotlib.axes import Axes

NUM_WATERFALL_REQUESTS = 40
PHASE_COLORS = {
    "tokenize": "tab:gray",
    "waiting": "gold",
    "prefill": "tab:orange",
    "decode": "tab:blue",
    "preempted": "tab:red",
    "swapped": "tab:purple",
    "kv_transfer": "tab:brown",
    "detokenize": "tab:green",
}
_DPI = 120


def plot_waterfall(spans: pd.DataFrame, requests: pd.DataFrame, path: str | Path) -> Path:
    """Draw each request of ``spans`` (``sim.metrics.lifecycle``) as a bar; return ``path``."""
    # matplotlib on first use: importing this module (for NUM_WATERFALL_REQUESTS) stays cheap.
    from sim.metrics.plots import Margins, agg_figure, save_png

    num_rows = spans["request_id"].nunique() if len(spans) else 0
    height_in = min(2.0 + 0.22 * num_rows, 14.0)
    # Right: the legend, outside the axes (its longest label, "first token (TTFT)", at 8 pt).
    fig = agg_figure(11, height_in, Margins(left_in=0.7, right_in=1.55, top_in=0.4), dpi=_DPI)
    draw_waterfall(fig.add_subplot(), spans, requests)
    return save_png(fig, path)


def draw_waterfall(ax: Axes, spans: pd.DataFrame, requests: pd.DataFrame) -> None:
    """The waterfall on ``ax`` (a notebook's own axes, say); ``requests`` gives first tokens."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    from sim.metrics.plots import TITLE_Y

    ids = sorted(int(i) for i in spans["request_id"].unique()) if len(spans) else []
    row_of = {request_id: row for row, request_id in enumerate(ids)}
    if not ids:
        ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
    for phase, group in spans.groupby("phase", sort=False):
        # One collection of rectangles per phase, not one per request and phase:
        # adding a collection costs ~1 ms, drawing a rectangle next to nothing.
        row = group["request_id"].map(row_of).to_numpy(dtype=np.float64)
        start_s = group["start_s"].to_numpy(dtype=np.float64)
        end_s = group["end_s"].to_numpy(dtype=np.float64)
        corners = [
            (start_s, row - 0.4),
            (start_s, row + 0.4),
            (end_s, row + 0.4),
            (end_s, row - 0.4),
        ]
        rectangles = np.stack([np.column_stack(corner) for corner in corners], axis=1)
        ax.add_collection(PolyCollection(list(rectangles), color=PHASE_COLORS.get(str(phase))))
    ax.autoscale_view()  # matplotlib < 3.11 does not rescale for a collection by itself
    firsts = requests.set_index("request_id").reindex(ids)["first_token_s"].to_numpy(float)
    shown = np.isfinite(firsts)
    rows = np.arange(len(ids))[shown]
    ax.scatter(firsts[shown], rows, marker="|", s=120, color="black", zorder=3)
    present = [p for p in PHASES if p in set(spans["phase"])] if len(spans) else []
    handles: list[Any] = [Patch(color=PHASE_COLORS[p], label=p) for p in present]
    handles.append(ax.scatter([], [], marker="|", s=120, color="black", label="first token (TTFT)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_yticks(range(len(ids)), [str(i) for i in ids], fontsize=7)
    if ids:
        ax.set_ylim(len(ids) - 0.5, -0.5)  # request 0 on top
    ax.set_xlabel("Simulated time (s)")
    ax.set_ylabel("request id")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"Life of the first {len(ids)} requests, phase by phase", loc="left", y=TITLE_Y)
