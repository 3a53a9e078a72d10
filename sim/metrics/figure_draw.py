"""Drawing a run's figures from ``sim.metrics.figure_data.Figures``: numpy and
matplotlib only, what ``servesim run``'s figure process imports (no pandas)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from sim.metrics import plot_draw, waterfall_draw
from sim.metrics.figure_data import LATENCY_CDF_PNG, TIMESERIES_PNG, Figures


def draw_prepared(figures: Figures, names: Collection[str] | None = None) -> list[Path]:
    """Draw the figures of ``figures`` (only those of ``names`` when given) into its
    folder, which must exist; return their paths, in ``Figures.names`` order."""
    out = Path(figures.out_dir)
    written = []
    for name in figures.names():
        if names is not None and name not in names:
            continue
        # Looked up in their modules at each call: a test can replace one.
        if name == LATENCY_CDF_PNG:
            written.append(plot_draw.draw_latency_cdfs(figures.cdf, out / name))
        elif name == TIMESERIES_PNG:
            written.append(plot_draw.draw_timeseries(figures.timeseries, out / name))
        elif figures.waterfall is not None:
            written.append(waterfall_draw.draw_waterfall_figure(figures.waterfall, out / name))
    return written


def warm_up() -> None:
    """``plot_draw.warm_up``: a throw-away figure that leaves the caches warm."""
    plot_draw.warm_up()


def prebuild() -> None:
    """Make every figure of a run up to its data (a waterfall of the usual number
    of rows); each next draw takes its own (``plot_draw.prebuild``)."""
    plot_draw.prebuild()
    waterfall_draw.prebuild()
