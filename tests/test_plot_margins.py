"""Fixed figure margins (``sim.metrics.figure_draw.agg_figure``): placed as asked, nothing clipped.

The run's figures use fixed margins in inches instead of matplotlib's
constrained layout (issue 16: it doubles the drawing time). These tests check
the arithmetic by hand, and that with large values (six-digit queue lengths,
six-digit request ids, hour-long latencies) every title, label and tick label
still lies inside the figure and no two panels' labels collide.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox
from test_plots import requests_frame, timeseries_frame

from sim.engine.records import RequestTable
from sim.metrics import figure_draw, plots
from sim.metrics.figure_draw import Margins, agg_figure
from sim.metrics.stats import Slo

TOLERANCE_PX = 1.0


def test_side_by_side_panels_sit_where_the_inches_say() -> None:
    # 10 x 5 in; 1 in left, 0.5 in right, 1 in between: each panel (10-1.5-1)/2 = 3.75 in wide.
    margins = Margins(left_in=1.0, right_in=0.5, bottom_in=0.5, top_in=1.0, gap_w_in=1.0)
    fig = agg_figure(10, 5, margins, num_cols=2)
    left, right = fig.subplots(1, 2)
    assert left.get_position().bounds == pytest.approx((0.1, 0.1, 0.375, 0.7))
    assert right.get_position().bounds == pytest.approx((0.575, 0.1, 0.375, 0.7))


def test_stacked_panels_sit_where_the_inches_say() -> None:
    # 8 x 9 in; 3 rows, 0.5 in apart, 1 in top and bottom: each (9-2-1)/3 = 2 in tall.
    margins = Margins(bottom_in=1.0, top_in=1.0, gap_h_in=0.5)
    fig = agg_figure(8, 9, margins, num_rows=3)
    axes = fig.subplots(3, 1)
    bottoms_in = [ax.get_position().y0 * 9 for ax in axes]
    heights_in = [ax.get_position().height * 9 for ax in axes]
    assert bottoms_in == pytest.approx([6.0, 3.5, 1.0])
    assert heights_in == pytest.approx([2.0, 2.0, 2.0])


@settings(max_examples=30, deadline=None)
@given(
    width_in=st.floats(4, 20),
    height_in=st.floats(3, 15),
    num_rows=st.integers(1, 4),
    num_cols=st.integers(1, 3),
    gap_in=st.floats(0, 0.8),
)
def test_the_grid_fills_the_figure_less_the_margins(
    width_in: float, height_in: float, num_rows: int, num_cols: int, gap_in: float
) -> None:
    margins = Margins(gap_w_in=gap_in, gap_h_in=gap_in)
    fig = agg_figure(width_in, height_in, margins, num_rows=num_rows, num_cols=num_cols)
    axes = np.atleast_2d(fig.subplots(num_rows, num_cols, squeeze=False))
    first, last = axes[0, 0].get_position(), axes[-1, -1].get_position()
    assert first.x0 * width_in == pytest.approx(margins.left_in)
    assert (1 - last.x1) * width_in == pytest.approx(margins.right_in)
    assert (1 - first.y1) * height_in == pytest.approx(margins.top_in)
    assert last.y0 * height_in == pytest.approx(margins.bottom_in)
    if num_cols > 1:
        gap = (axes[0, 1].get_position().x0 - first.x1) * width_in
        assert gap == pytest.approx(gap_in, abs=1e-9)
    if num_rows > 1:
        gap = (first.y0 - axes[1, 0].get_position().y1) * height_in
        assert gap == pytest.approx(gap_in, abs=1e-9)


def test_the_figure_has_its_own_canvas_and_the_asked_resolution() -> None:
    fig = agg_figure(6, 4, Margins(), dpi=50)
    assert fig.canvas.figure is fig
    assert tuple(fig.get_size_inches()) == (6, 4) and fig.dpi == 50
    assert fig.get_layout_engine() is None  # the point: no measuring pass before drawing


# --- the run's figures: every text inside the figure -----------------------------------------


def _capture(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Record every figure the run's plots make through ``agg_figure``."""
    made: list[Figure] = []

    def recording(*args: Any, **kwargs: Any) -> Figure:
        made.append(agg_figure(*args, **kwargs))
        return made[-1]

    # The figures are made where they are drawn (figure_draw).
    monkeypatch.setattr(figure_draw, "agg_figure", recording)
    return made


def _boxes(fig: Figure) -> list[tuple[str, Bbox]]:
    """What the margins must hold: each axis (its drawn tick labels and label), the
    titles, legends and the figure's title, as drawn (pixels)."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    fig.canvas.draw()
    found: list[tuple[str, Bbox]] = []
    texts = [t for t in fig.get_children() if isinstance(t, Text)]  # the figure's title
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            box = axis.get_tightbbox(renderer)
            if box is not None:
                found.append((f"{axis.axis_name} axis of {ax.get_title()!r}", box))
        # Its titles (left, centre, right); annotations follow the data, not the margins.
        texts += [
            t for t in ax.get_children() if isinstance(t, Text) and not isinstance(t, Annotation)
        ]
        legend = ax.get_legend()
        if legend is not None:
            found.append(("legend", legend.get_window_extent(renderer)))
    found += [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]
    return found


def _assert_inside(fig: Figure) -> None:
    frame = fig.bbox
    outside = [
        label
        for label, box in _boxes(fig)
        if box.x0 < frame.x0 - TOLERANCE_PX
        or box.y0 < frame.y0 - TOLERANCE_PX
        or box.x1 > frame.x1 + TOLERANCE_PX
        or box.y1 > frame.y1 + TOLERANCE_PX
    ]
    assert outside == []


def _assert_no_axis_label_on_a_neighbour(fig: Figure) -> None:
    """Each axes' y label lies left of its own axes and clear of every other axes."""
    for ax in fig.axes:
        label_box = ax.yaxis.label.get_window_extent(fig.canvas.get_renderer())  # type: ignore[attr-defined]
        for other in fig.axes:
            if other is not ax:
                assert not label_box.overlaps(other.get_window_extent())


def test_latency_cdfs_fit_with_long_latencies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _capture(monkeypatch)
    requests = requests_frame(2000)
    # Hour-long TTFTs (wide tick labels), the decode after it as before.
    requests["first_token_s"] += 3600.0
    requests["finish_s"] += 3600.0
    figure_draw.draw_latency_cdfs(
        plots.cdf_data(RequestTable.from_frame(requests), Slo(ttft_ms=500, tpot_ms=50)),
        tmp_path / "cdf.png",
    )
    (fig,) = made
    _assert_inside(fig)
    _assert_no_axis_label_on_a_neighbour(fig)


def test_timeseries_fit_with_six_digit_queues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _capture(monkeypatch)
    frame = timeseries_frame(20_000)
    frame["num_waiting"] = np.linspace(0, 250_000, len(frame)).round()
    figure_draw.draw_timeseries(plots.timeseries_data(frame), tmp_path / "ts.png")
    (fig,) = made
    _assert_inside(fig)
    _assert_no_axis_label_on_a_neighbour(fig)
    titles = [ax.title.get_window_extent(fig.canvas.get_renderer()) for ax in fig.axes]  # type: ignore[attr-defined]
    for upper, lower in zip(fig.axes, fig.axes[1:], strict=False):
        # A panel's title sits in the gap, clear of the panel above it.
        assert not titles[fig.axes.index(lower)].overlaps(upper.get_window_extent())


@pytest.mark.parametrize("first_id", [0, 99_960])
def test_the_waterfall_fits_its_legend_and_long_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_id: int
) -> None:
    made = _capture(monkeypatch)
    ids = np.arange(first_id, first_id + 40)
    spans = pd.DataFrame(
        {
            "request_id": np.repeat(ids, 2),
            "phase": ["prefill", "decode"] * len(ids),
            "start_s": np.repeat(ids - first_id, 2) + np.tile([0.0, 0.5], len(ids)),
            "end_s": np.repeat(ids - first_id, 2) + np.tile([0.5, 3.0], len(ids)),
        }
    )
    requests = RequestTable({"request_id": ids, "first_token_s": ids - first_id + 0.5}, {})
    figure_draw.draw_waterfall_figure(plots.waterfall_data(spans, requests), tmp_path / "wf.png")
    (fig,) = made
    _assert_inside(fig)
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert legend is not None
    assert not legend.get_window_extent().overlaps(ax.get_window_extent())


def test_the_waterfall_draws_one_rectangle_per_span(tmp_path: Path) -> None:
    from matplotlib.collections import PolyCollection

    spans = pd.DataFrame(
        {
            "request_id": [0, 0, 1, 2],
            "phase": ["prefill", "decode", "decode", "decode"],
            "start_s": [0.0, 1.0, 0.5, 2.0],
            "end_s": [1.0, 4.0, 2.5, 3.0],
        }
    )
    first_token_s = np.array([1.0, 0.7, 2.2])
    requests = RequestTable({"request_id": np.arange(3), "first_token_s": first_token_s}, {})
    fig = agg_figure(8, 4, Margins())
    ax = fig.add_subplot()
    plots.draw_waterfall(ax, spans, requests)
    corners = np.array(
        [
            np.asarray(path.vertices, dtype=np.float64)[:4]  # the 5th closes the polygon
            for c in ax.collections
            if isinstance(c, PolyCollection)
            for path in c.get_paths()
        ]
    )
    xs, ys = corners[:, :, 0], corners[:, :, 1]
    rectangles = sorted(
        zip(xs.min(axis=1), xs.max(axis=1), (ys.min(axis=1) + ys.max(axis=1)) / 2, strict=True)
    )
    # (start, end, row centre): request 0 in row 0, 1 in row 1, 2 in row 2.
    expected = [(0.0, 1.0, 0.0), (0.5, 2.5, 1.0), (1.0, 4.0, 0.0), (2.0, 3.0, 2.0)]
    np.testing.assert_allclose(np.array(rectangles), np.array(expected))
    np.testing.assert_allclose(ys.max(axis=1) - ys.min(axis=1), 0.8)  # bars 0.8 rows tall
    x0, x1 = ax.get_xlim()
    assert x0 <= 0.0 and x1 >= 4.0  # the axes were rescaled to the bars
