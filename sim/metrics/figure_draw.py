"""Drawing a run's figures from plain arrays (``sim.metrics.figure_data``): numpy and
matplotlib only, what ``servesim run``'s figure process imports (no pandas).

matplotlib's object API on an Agg canvas (no pyplot, no global figure state: safe
headless and threaded). A line has at most ``MAX_POINTS`` points (matplotlib's cost
grows with points, not requests); margins are fixed (``agg_figure``), since the
constrained layout measures every label in an extra pass and doubles a draw.
"""

from __future__ import annotations

import io
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from sim.metrics.figure_data import (
    LATENCY_CDF_PNG,
    NUM_WATERFALL_REQUESTS,
    PHASE_COLORS,
    TIMESERIES_PNG,
    CdfData,
    Figures,
    TimeseriesData,
    WaterfallData,
)

if TYPE_CHECKING:  # a name for annotations only: sim.config loads pydantic, which the
    # figure process must not (tests/test_cli_figure_data.py)
    from sim.config import FloatArray

MAX_POINTS = 5000
DPI = 120
# zlib level of the PNGs: 1 instead of Pillow's 6 writes files ~20 % larger
# (still ~0.1 MB) in a fraction of the time; encoding was a third of drawing.
PNG_COMPRESS_LEVEL = 1
# Titles at a fixed height: left to itself, matplotlib measures every tick label at
# each draw to lift the title clear of any on top, and these figures have none there.
TITLE_Y = 1.0
# The title and, under it, the caption, from the top edge in inches; ``CAPTION_IN``: the
# caption's share of the top margin (the axes give it up).
SUPTITLE_TOP_IN = 0.08
CAPTION_TOP_IN = 0.36
CAPTION_IN = 0.2
_CAPTION: dict[str, Any] = {"fontsize": 8.5, "color": "dimgray", "ha": "center", "va": "top"}
SLO_COLOR = "tab:red"  # an SLO's line, in a run's figures and a sweep's
_MARK_PERCENTILES = (50, 99)
_NOTE: dict[str, Any] = {"fontsize": 8, "color": "dimgray"}
_SERIES_COLOR = "tab:blue"
# Windows of the queue panel's mean line (~1 s each at 2,000 chat requests): a queue
# that changes more often than this is drawn as that mean over a light band.
QUEUE_WINDOWS = 200
_CDF_PANELS = (  # title and x label of each CDF panel, left to right
    ("Time to first token (TTFT)", "TTFT (ms)"),
    ("Time per output token (TPOT, excl. 1st token)", "TPOT (ms)"),
)
# The waterfall's narrowest phase, in pixels: TTFT's waiting and prefill (ms) next to
# decode (s) were thinner than a pixel.
MIN_PHASE_PX = 3.0
# Major ticks ``prebuild`` makes per axis: more than these figures draw.
PREBUILT_TICKS = 12
# Figures made up to their data by ``prebuild``, by kind: a draw takes (pops) its own.
_prebuilt: dict[str, tuple[Figure, list[Axes]]] = {}
# Waterfalls made by ``prebuild``, by number of rows: a draw of as many takes its own.
_prebuilt_waterfalls: dict[int, tuple[Figure, Axes]] = {}
# The time series' panels, top to bottom: title and unit (the data's order).
TIMESERIES_PANELS = (
    ("Waiting requests (queue length)", "requests"),
    ("Running batch size", "sequences"),
    ("KV-cache usage", "% of blocks"),
)


@dataclass(frozen=True)
class Margins:
    """Space around and between a figure's axes, in inches (``left_in``: up to six-digit
    y ticks at 10 pt; ``gap_w_in`` / ``gap_h_in``: between panels side by side / stacked).
    """

    left_in: float = 0.85
    right_in: float = 0.25
    bottom_in: float = 0.6
    top_in: float = 0.45
    gap_w_in: float = 0.0
    gap_h_in: float = 0.0


def agg_figure(
    width_in: float,
    height_in: float,
    margins: Margins,
    num_rows: int = 1,
    num_cols: int = 1,
    dpi: int = DPI,
) -> Figure:
    """A figure on its own Agg canvas whose subplots leave ``margins`` around them (the
    gaps converted to matplotlib's fractions of the mean axes size)."""
    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    FigureCanvasAgg(fig)
    inner_w_in = width_in - margins.left_in - margins.right_in
    inner_h_in = height_in - margins.top_in - margins.bottom_in
    axes_w_in = (inner_w_in - margins.gap_w_in * (num_cols - 1)) / num_cols
    axes_h_in = (inner_h_in - margins.gap_h_in * (num_rows - 1)) / num_rows
    fig.subplots_adjust(
        left=margins.left_in / width_in,
        right=1 - margins.right_in / width_in,
        bottom=margins.bottom_in / height_in,
        top=1 - margins.top_in / height_in,
        wspace=margins.gap_w_in / axes_w_in,
        hspace=margins.gap_h_in / axes_h_in,
    )
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as a PNG (fast zlib level); return ``path`` as a Path."""
    out = Path(path)
    fig.savefig(out, format="png", pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
    return out


def warm_up() -> None:
    """Draw a small throw-away figure: a later figure skips the first-use costs
    (loading the font, text layout caches, the PNG encoder)."""
    fig = agg_figure(3, 2, Margins())
    ax = fig.subplots()
    ax.plot([0.0, 1.0], [0.0, 1.0], label="warm-up")
    ax.set_title("warm-up", y=TITLE_Y)
    ax.legend()
    fig.suptitle("warm-up")
    fig.savefig(io.BytesIO(), format="png", pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})


def cdf_points(
    values: npt.ArrayLike, max_points: int = MAX_POINTS
) -> tuple[FloatArray, FloatArray]:
    """Empirical CDF of the finite ``values``: sorted values and fractions ``(i+1)/n``, at
    most ``max_points`` evenly spaced ranks, the minimum and maximum among them."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = np.sort(v[np.isfinite(v)])
    n = v.size
    ranks = np.arange(n)
    if n > max_points:
        ranks = np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))
    return v[ranks], (ranks + 1) / n


def envelope(
    time_s: npt.ArrayLike, values: npt.ArrayLike, max_points: int = MAX_POINTS
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """A long series as ``max_points`` bins: each bin's first time and the minimum, mean
    and maximum of its samples (a one-sample spike still shows); a short one passes."""
    t = np.asarray(time_s, dtype=np.float64).ravel()
    y = np.asarray(values, dtype=np.float64).ravel()
    if t.size <= max_points:
        return t, y, y, y
    edges = np.linspace(0, t.size, max(max_points, 1) + 1).astype(np.int64)
    starts = np.unique(edges[:-1])
    counts = np.diff(np.r_[starts, t.size])
    means = np.add.reduceat(y, starts) / counts
    lows = np.minimum.reduceat(y, starts)
    highs = np.maximum.reduceat(y, starts)
    return t[starts], lows, means, highs


def title_figure(fig: Figure, title: str, caption: str, fontsize: float = 13) -> None:
    """``title`` at the top of ``fig`` and ``caption`` (what ran and what priced it) under it,
    at fixed heights in inches (the margins leave room for both)."""
    height_in = fig.get_figheight()
    if title:
        fig.suptitle(title, fontsize=fontsize, y=1 - SUPTITLE_TOP_IN / height_in, va="top")
    if caption:
        top_in = CAPTION_TOP_IN if title else SUPTITLE_TOP_IN
        fig.text(0.5, 1 - top_in / height_in, caption, **_CAPTION)


def _no_data(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="gray")


def _use_log_scale(values_ms: FloatArray) -> bool:
    """Log x when the bulk spans more than ~1.5 decades (e.g. TTFT under queueing)."""
    if values_ms.size < 2 or values_ms.min() <= 0:
        return False
    p1, p99 = np.percentile(values_ms, [1, 99])
    return bool(p99 > 30 * p1)


def _cdf_panel(ax: Axes, values_ms: FloatArray, xlabel: str, slo_ms: float | None) -> None:
    """A CDF panel's data, on an axes of ``_cdf_figure``."""
    if values_ms.size == 0:
        _no_data(ax, "no samples")
        return
    x, y = cdf_points(values_ms)
    # Start the staircase at 0 so a small sample reads as an empirical CDF.
    ax.plot(np.r_[x[0], x], np.r_[0.0, y], drawstyle="steps-post", color="tab:blue", lw=1.6)
    for p, value in zip(
        _MARK_PERCENTILES, np.percentile(values_ms, _MARK_PERCENTILES), strict=True
    ):
        ax.plot([value], [p / 100], "o", color="black", ms=5, zorder=3)
        ax.annotate(
            f"p{p} = {value:,.1f} ms",
            (value, p / 100),
            xytext=(8, -14 if p == 99 else 6),
            textcoords="offset points",
            fontsize=9,
        )
    if slo_ms is not None:
        met = float(np.mean(values_ms <= slo_ms))
        ax.axvline(
            slo_ms, color=SLO_COLOR, ls="--", lw=1.2, label=f"SLO {slo_ms:g} ms ({met:.1%} met)"
        )
        ax.legend(loc="lower right", fontsize=9)
    if _use_log_scale(values_ms):
        ax.set_xscale("log")
        ax.set_xlabel(f"{xlabel}, log scale")


def _cdf_figure() -> tuple[Figure, list[Axes]]:
    """The latency CDFs' figure up to its data: panels, titles, labels, grid."""
    # Top: the title and the panel titles; between the panels: the right one's y labels.
    fig = agg_figure(12, 4.8, Margins(top_in=0.75 + CAPTION_IN, gap_w_in=0.85), num_cols=2)
    axes = list(fig.subplots(1, 2))
    for ax, (title, xlabel) in zip(axes, _CDF_PANELS, strict=True):
        ax.set_title(title, y=TITLE_Y)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("Fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
    return fig, axes


def _timeseries_figure() -> tuple[Figure, list[Axes]]:
    """The time series' figure up to its data: stacked panels, titles, labels, grid."""
    # Top: the title and the first panel's titles; between panels: the next one's titles.
    margins = Margins(top_in=0.75 + CAPTION_IN, gap_h_in=0.4)
    fig = agg_figure(11, 8, margins, num_rows=len(TIMESERIES_PANELS))
    axes = list(fig.subplots(len(TIMESERIES_PANELS), 1, sharex=True))
    for ax, (title, unit) in zip(axes, TIMESERIES_PANELS, strict=True):
        ax.set_title(title, loc="left", fontsize=11, y=TITLE_Y)
        ax.set_ylabel(unit)
        ax.grid(True, alpha=0.3)
    return fig, axes


def make_ticks(fig: Figure, num_x: int, num_y: int) -> None:
    """Make each axes' first major tick objects now (a draw makes any it lacks and
    leaves the rest unused): ~1 ms each, the largest data-free part of a draw."""
    for ax in fig.axes:
        ax.xaxis.get_major_ticks(num_x)
        ax.yaxis.get_major_ticks(num_y)


def prebuild() -> None:
    """Make every figure of a run up to its data, ticks included (a waterfall of
    ``NUM_WATERFALL_REQUESTS``, a tick for each row); the next draw of each takes
    its own (once). The figure process does this while the run simulates (issue 16):
    drawn, they are the same to the byte."""
    for name, make in (("cdf", _cdf_figure), ("timeseries", _timeseries_figure)):
        fig, axes = make()
        make_ticks(fig, PREBUILT_TICKS, PREBUILT_TICKS)
        _prebuilt[name] = (fig, axes)
    fig, ax = _waterfall_figure(NUM_WATERFALL_REQUESTS)
    make_ticks(fig, PREBUILT_TICKS, NUM_WATERFALL_REQUESTS)
    _prebuilt_waterfalls[NUM_WATERFALL_REQUESTS] = (fig, ax)


def draw_latency_cdfs(data: CdfData, path: str | Path, caption: str = "") -> Path:
    """TTFT and TPOT empirical CDFs side by side (ms, p50 and p99 marked, SLO lines),
    written to ``path`` (returned)."""
    built = _prebuilt.pop("cdf", None)
    fig, (ax_ttft, ax_tpot) = built if built is not None else _cdf_figure()
    _cdf_panel(ax_ttft, data.ttft_ms, _CDF_PANELS[0][1], data.ttft_slo_ms)
    _cdf_panel(ax_tpot, data.tpot_ms, _CDF_PANELS[1][1], data.tpot_slo_ms)
    title_figure(fig, f"Latency CDFs of {data.num_done:,} completed requests", caption)
    return save_png(fig, path)


def window_means(
    time_s: FloatArray, values: FloatArray, num_windows: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """A series held until its next sample (a step function) over ``num_windows`` equal
    windows from the first sample to the last: each window's start (s), time-weighted
    mean and maximum. The integral of a step function is piecewise linear between
    samples, so ``np.interp`` of its running sum at the window edges is exact."""
    if time_s.size < 2 or time_s[-1] <= time_s[0]:
        return time_s, values, values
    area = np.r_[0.0, np.cumsum(values[:-1] * np.diff(time_s))]  # integral up to each sample
    edges = np.linspace(time_s[0], time_s[-1], num_windows + 1)
    means = np.diff(np.interp(edges, time_s, area)) / np.diff(edges)
    # A window holds the sample in effect at its start and those that start inside it.
    first = np.searchsorted(time_s, edges[:-1], side="right") - 1
    stop = np.maximum(np.searchsorted(time_s, edges[1:], side="left"), first + 1)
    bounds = np.column_stack([first, stop]).ravel()
    highs = np.maximum.reduceat(np.r_[values, 0.0], bounds)[::2]
    return edges[:-1], means, highs


def draw_timeseries(data: TimeseriesData, path: str | Path, caption: str = "") -> Path:
    """Queue length, running batch size and KV-cache usage (%) as step plots on one time
    axis, written to ``path`` (returned). A queue that changes more than ``QUEUE_WINDOWS``
    times (a barcode otherwise) is its per-window max band and time-weighted mean; the KV
    axis ends at 1.1 x the peak (100 % flattened it), the pool said in its title.
    """
    time_s = data.time_s
    built = _prebuilt.pop("timeseries", None)
    fig, axes = built if built is not None else _timeseries_figure()
    for index, (ax, values) in enumerate(zip(axes, data.series, strict=True)):
        if values is None or time_s.size == 0:
            _no_data(ax, "no samples")
            continue
        if index == 0 and int(np.count_nonzero(np.diff(values))) > QUEUE_WINDOWS:
            _queue_panel(ax, time_s, values)
        else:
            _step_panel(ax, time_s, values)
        if index < len(axes) - 1:  # counts: whole-number ticks
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(0, max(1.0, float(np.max(values))) * 1.1)
    kv = data.series[-1]
    if kv is not None and kv.size:
        peak = float(np.max(kv))
        axes[-1].set_ylim(0, min(100.0, max(peak, 1.0) * 1.1))
        axes[-1].set_title(
            f"peak {peak:.1f} % of the pool (100 % = all KV blocks); y axis to 1.1 x the peak",
            loc="right",
            y=TITLE_Y,
            **_NOTE,
        )
    else:
        axes[-1].set_ylim(0, 100)
    axes[-1].set_xlabel("Simulated time (s)")
    title_figure(fig, "Scheduler state over time", caption)
    return save_png(fig, path)


def _step_panel(ax: Axes, time_s: FloatArray, values: FloatArray) -> None:
    """A series as a step plot; binned to ``MAX_POINTS`` with its min-max band when longer."""
    t, low, mean, high = envelope(time_s, values)
    if t.size < time_s.size:  # binned: a light min-max band behind the bin means
        ax.fill_between(t, low, high, step="post", color=_SERIES_COLOR, alpha=0.25, lw=0)
        ax.plot(t, mean, drawstyle="steps-post", lw=0.9, color=_SERIES_COLOR)
        note = f"~{time_s.size // t.size:,} samples per bin: line = mean, band = min to max"
        ax.set_title(note, loc="right", y=TITLE_Y, **_NOTE)
    else:
        ax.plot(t, mean, drawstyle="steps-post", lw=1.0, color=_SERIES_COLOR)


def _queue_panel(ax: Axes, time_s: FloatArray, values: FloatArray) -> None:
    """A fast-changing queue per window: its maximum as a light band, its time-weighted
    mean as a step line."""
    start_s, mean, high = window_means(time_s, values, QUEUE_WINDOWS)
    window_s = (time_s[-1] - time_s[0]) / QUEUE_WINDOWS
    t = np.r_[start_s, time_s[-1]]
    ax.fill_between(
        t,
        0,
        np.r_[high, high[-1:]],
        step="post",
        color=_SERIES_COLOR,
        alpha=0.2,
        lw=0,
        label=f"max in each {window_s:.3g} s window",
    )
    ax.plot(
        t,
        np.r_[mean, mean[-1:]],
        drawstyle="steps-post",
        lw=1.4,
        color=_SERIES_COLOR,
        label=f"time-weighted mean over each {window_s:.3g} s window",
    )
    ax.legend(loc="upper right", fontsize=8)


def _waterfall_figure(num_rows: int) -> tuple[Figure, Axes]:
    """The waterfall's figure and axes for ``num_rows`` requests, before its data."""
    height_in = min(2.0 + 0.22 * num_rows, 14.0)
    # Right: the legend, outside the axes (its longest label, "first token (TTFT)", at 8 pt).
    margins = Margins(left_in=0.7, right_in=1.55, top_in=0.4 + CAPTION_IN)
    fig = agg_figure(11, height_in, margins, dpi=DPI)
    return fig, fig.add_subplot()


def draw_waterfall_figure(data: WaterfallData, path: str | Path, caption: str = "") -> Path:
    """The waterfall of ``data`` in a figure of its own, ``caption`` at its top, written
    to ``path`` (returned)."""
    num_rows = len(data.ids)
    built = _prebuilt_waterfalls.pop(num_rows, None)
    fig, ax = built if built is not None else _waterfall_figure(num_rows)
    draw_waterfall_axes(ax, data)
    title_figure(fig, "", caption)
    return save_png(fig, path)


def widen_phases(data: WaterfallData, floor_s: float) -> tuple[WaterfallData, bool]:
    """``data`` with each phase of positive length at least ``floor_s`` wide: a row's
    phases in time order, one shorter than ``floor_s`` is widened to it and the rest of
    its row (phases and first-token tick) shifted right by what it gained, so the
    phases stay in order and none covers another. Also whether any was widened."""
    spans = [
        (int(row), float(start), float(end), index, k)
        for index, bars in enumerate(data.bars)
        for k, (row, start, end) in enumerate(zip(bars.rows, bars.start_s, bars.end_s, strict=True))
    ]
    spans.sort(key=lambda span: (span[0], span[1], span[2]))
    starts = [bars.start_s.copy() for bars in data.bars]
    ends = [bars.end_s.copy() for bars in data.bars]
    firsts = data.first_token_s.copy()
    widened = False
    shift_s = 0.0  # what the row's earlier phases gained
    for position, (row, start, end, index, k) in enumerate(spans):
        if position == 0 or spans[position - 1][0] != row:
            shift_s = 0.0
        starts[index][k] = start + shift_s
        gain_s = max(0.0, floor_s - (end - start)) if end > start else 0.0
        widened = widened or gain_s > 0
        shift_s += gain_s
        ends[index][k] = end + shift_s
        if 0 <= row < firsts.size and end <= data.first_token_s[row]:
            # The tick comes after this phase: it moves with it.
            firsts[row] = data.first_token_s[row] + shift_s
    bars = tuple(
        replace(old, start_s=start, end_s=end)
        for old, start, end in zip(data.bars, starts, ends, strict=True)
    )
    return replace(data, bars=bars, first_token_s=firsts), widened


def _phase_floor_s(ax: Axes, data: WaterfallData) -> float:
    """``MIN_PHASE_PX`` in seconds on ``ax``: its width in pixels over the time it
    spans, the bars' extent and matplotlib's margins on either side."""
    if not data.bars:
        return 0.0
    low_s = min(float(bars.start_s.min(initial=np.inf)) for bars in data.bars)
    high_s = max(float(bars.end_s.max(initial=-np.inf)) for bars in data.bars)
    if not np.isfinite(low_s) or not np.isfinite(high_s) or high_s <= low_s:
        return 0.0
    width_px = ax.bbox.width  # display units: pixels at the figure's dpi
    return MIN_PHASE_PX * (high_s - low_s) * (1 + 2 * ax.get_xmargin()) / width_px


def draw_waterfall_axes(ax: Axes, data: WaterfallData) -> None:
    """The waterfall of ``data`` on ``ax``, each phase at least ``MIN_PHASE_PX`` wide
    (``widen_phases``; the x label says so): TTFT's waiting and prefill, a few ms
    next to seconds of decode, were thinner than a pixel."""
    ids = data.ids
    if not ids:
        ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
    # Twice: widening stretches the time axis, which narrows a pixel's seconds a little.
    shown_data, widened = widen_phases(data, _phase_floor_s(ax, data))
    shown_data, widened = widen_phases(data, _phase_floor_s(ax, shown_data))
    for bars in shown_data.bars:
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
    firsts = shown_data.first_token_s
    shown = np.isfinite(firsts)
    rows = np.arange(len(ids))[shown]
    ax.scatter(firsts[shown], rows, marker="|", s=120, color="black", zorder=3)
    handles: list[Any] = [Patch(color=PHASE_COLORS[p], label=p) for p in data.present]
    handles.append(ax.scatter([], [], marker="|", s=120, color="black", label="first token (TTFT)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_yticks(range(len(ids)), [str(i) for i in ids], fontsize=7)
    if ids:
        ax.set_ylim(len(ids) - 0.5, -0.5)  # request 0 on top
    xlabel = "Simulated time (s)"
    if widened:
        xlabel += (
            f"; phases shorter than {MIN_PHASE_PX:g} px drawn {MIN_PHASE_PX:g} px wide,"
            " the rest of their row shifted right"
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("request id")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"Life of the first {len(ids)} requests, phase by phase", loc="left", y=TITLE_Y)


def draw_prepared(figures: Figures, names: Collection[str] | None = None) -> list[Path]:
    """Draw the figures of ``figures`` (only those of ``names`` when given) into its
    folder, which must exist; return their paths, in ``Figures.names`` order."""
    out = Path(figures.out_dir)
    written = []
    for name in figures.names():
        if names is not None and name not in names:
            continue
        if name == LATENCY_CDF_PNG:
            written.append(draw_latency_cdfs(figures.cdf, out / name, caption=figures.caption))
        elif name == TIMESERIES_PNG:
            written.append(draw_timeseries(figures.timeseries, out / name, caption=figures.caption))
        elif figures.waterfall is not None:
            written.append(
                draw_waterfall_figure(figures.waterfall, out / name, caption=figures.caption)
            )
    return written
