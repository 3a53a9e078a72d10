"""Issue 42 item 3: a run's figures read as pictures, not only as files that exist.

Each test draws a figure from hand-made data and checks its artists: the queue a
step line readable at thousands of samples, the KV axis fitted to the curve, every
waterfall phase at least a few pixels wide, one colour per source in validate's CDFs.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sim.metrics import figure_draw
from sim.metrics.figure_data import PHASE_COLORS, PhaseBars, TimeseriesData, WaterfallData
from sim.validation.predict import Latencies
from sim.validation.report import plot_cdfs


def _timeseries_axes(data: TimeseriesData, tmp_path: Path) -> list[Axes]:
    fig, axes = figure_draw._timeseries_figure()
    figure_draw._prebuilt["timeseries"] = (fig, axes)  # the draw takes this one
    figure_draw.draw_timeseries(data, tmp_path / "timeseries.png")
    return axes


def _flipping_queue(num_samples: int) -> TimeseriesData:
    # A queue flipping 0, 1, 0, 1 every 0.1 s (as at 2,000 chat requests: a barcode
    # drawn raw), a batch of 8 and a KV use between 2 % and 10 % of the pool.
    time_s = np.arange(num_samples, dtype=np.float64) * 0.1
    queue = (np.arange(num_samples) % 2).astype(np.float64)
    running = np.full(num_samples, 8.0)
    kv_pct = 2.0 + 8.0 * (np.arange(num_samples) % 7) / 6
    return TimeseriesData(time_s, (queue, running, kv_pct))


def test_a_flipping_queue_is_drawn_as_its_windowed_mean(tmp_path: Path) -> None:
    # Half the time at 1, half at 0: each window's time-weighted mean is 0.5 (a
    # window of ~2 s holds ~20 samples, so its edges move it by at most ~1/20).
    axes = _timeseries_axes(_flipping_queue(4000), tmp_path)
    mean_line = axes[0].get_lines()[0]
    y = np.asarray(mean_line.get_ydata(), dtype=float)
    assert len(y) <= 1000  # a line of means, not the 4,000 flips
    assert np.all(np.abs(y - 0.5) <= 0.06)
    assert axes[0].get_legend() is not None
    # Held until the next sample: every line of the counts is a step line.
    for ax in axes[:2]:
        assert all(line.get_drawstyle() == "steps-post" for line in ax.get_lines())


def test_window_means_of_a_step_function_by_hand() -> None:
    # 0 on [0, 1), 4 on [1, 3), 1 on [3, 4]: windows [0, 2) and [2, 4] have means
    # (0*1 + 4*1)/2 = 2 and (4*1 + 1*1)/2 = 2.5, maxima 4 and 4.
    time_s = np.array([0.0, 1.0, 3.0, 4.0])
    values = np.array([0.0, 4.0, 1.0, 1.0])
    start_s, mean, high = figure_draw.window_means(time_s, values, 2)
    np.testing.assert_allclose(start_s, [0.0, 2.0])
    np.testing.assert_allclose(mean, [2.0, 2.5])
    np.testing.assert_allclose(high, [4.0, 4.0])


def test_the_kv_axis_fits_the_used_range_not_the_pool(tmp_path: Path) -> None:
    axes = _timeseries_axes(_flipping_queue(300), tmp_path)
    bottom, top = axes[-1].get_ylim()
    # Peak 10 % of the pool: the axis ends at 1.1 x 10 = 11 %, not at 100 %.
    assert bottom == 0 and top == 11.0
    assert "peak 10.0 %" in axes[-1].get_title(loc="right")


# What a reader sees as a bar: the waterfall draws MIN_PHASE_PX (3 px), a hair less
# after its axis stretches by what the widening added.
MIN_VISIBLE_PX = 2.0


def _one_request_waterfall() -> WaterfallData:
    # TTFT of 10 ms (1 + 2 + 7 ms of way in, waiting, prefill) next to ~10 s of
    # decode: on a ~1,000 px axis a pixel is ~11 ms, so each was under a pixel.
    phases = (
        ("way_in", 0.0, 0.001),
        ("waiting", 0.001, 0.003),
        ("prefill", 0.003, 0.010),
        ("decode", 0.010, 10.0),
    )
    bars = tuple(
        PhaseBars(phase, np.array([0.0]), np.array([start_s]), np.array([end_s]))
        for phase, start_s, end_s in phases
    )
    present = tuple(phase for phase, _, _ in phases)
    return WaterfallData((0,), bars, np.array([0.010]), present)


def _waterfall_axes(tmp_path: Path) -> Axes:
    fig, ax = figure_draw._waterfall_figure(1)
    figure_draw._prebuilt_waterfalls[1] = (fig, ax)  # the draw takes this one
    figure_draw.draw_waterfall_figure(_one_request_waterfall(), tmp_path / "waterfall.png")
    return ax


def _bars_px(ax: Axes) -> dict[str, tuple[float, float]]:
    """Each phase's bar, left and right edge in pixels, by its face colour's phase."""
    by_color = {PHASE_COLORS[p]: p for p in PHASE_COLORS}
    bars = {}
    for collection in ax.collections:
        if not isinstance(collection, PolyCollection):
            continue
        rgba = collection.get_facecolor()[0]
        phase = next(p for c, p in by_color.items() if np.allclose(to_rgba(c), rgba))
        path = collection.get_paths()[0]
        x_px = ax.transData.transform(path.vertices)[:, 0]
        bars[phase] = (float(x_px.min()), float(x_px.max()))
    return bars


def test_every_waterfall_phase_is_a_few_pixels_wide(tmp_path: Path) -> None:
    ax = _waterfall_axes(tmp_path)
    bars = _bars_px(ax)
    assert set(bars) == {"way_in", "waiting", "prefill", "decode"}
    for phase, (left, right) in bars.items():
        assert right - left >= MIN_VISIBLE_PX, phase
    # In order, none covering the next.
    order = [bars[p] for p in ("way_in", "waiting", "prefill", "decode")]
    for (_, right), (left, _) in itertools.pairwise(order):
        assert left >= right - 1e-6
    assert "px wide" in ax.get_xlabel()


def test_the_first_token_tick_moves_with_its_phases(tmp_path: Path) -> None:
    ax = _waterfall_axes(tmp_path)
    # The first token comes as prefill ends: the tick sits at the prefill's drawn end.
    ticks = [
        c for c in ax.collections if isinstance(c, PathCollection) and np.size(c.get_offsets())
    ]
    (tick_x,) = ax.transData.transform(np.asarray(ticks[0].get_offsets()))[:, 0]
    assert abs(tick_x - _bars_px(ax)["prefill"][1]) < 0.5


def _validation_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Figure:
    figures: list[Figure] = []
    monkeypatch.setattr(plt, "close", figures.append)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({k: rng.uniform(0.01, 0.2, 50) for k in ("ttft_s", "tpot_s", "e2el_s")})
    # A measured run without token times has no ITL gaps: its ITL panel holds the
    # predictions only, which took the first colour of the cycle, the measured one's.
    runs = {"measured": Latencies(frame, np.empty(0))}
    runs["predicted: micro"] = Latencies(frame * 1.1, rng.uniform(0.01, 0.02, 200))
    runs["predicted: micro x drift"] = Latencies(frame * 1.2, rng.uniform(0.01, 0.02, 200))
    plot_cdfs(runs, tmp_path / "cdf.png", "t")
    return figures[0]


def test_validate_cdfs_give_each_source_one_colour_in_every_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fig = _validation_figure(tmp_path, monkeypatch)
    color_of: dict[str, tuple[float, ...]] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            rgba = to_rgba(line.get_color())
            assert color_of.setdefault(str(line.get_label()), rgba) == rgba, line.get_label()
    assert len(color_of) == 3 and len(set(color_of.values())) == 3
    # The one legend names every source, in the colour of its lines.
    (legend,) = fig.legends
    legend_colors = {
        text.get_text(): to_rgba(handle.get_color())
        for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
        if isinstance(handle, Line2D)
    }
    assert legend_colors == color_of
    plt.close(fig)
