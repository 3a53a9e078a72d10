"""The page's plots as plotly figure JSON, from the arrays ``servesim run``'s PNGs use.

Each figure is built from ``sim.metrics.figure_data`` (what the PNGs draw), so the
page and the PNG files share one data path; plotly.js draws the plain dicts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sim.lab.runs import Knee
from sim.metrics.figure_data import PHASE_COLORS, CdfData, TimeseriesData, WaterfallData
from sim.metrics.plots import TIMESERIES_COLUMNS
from sim.metrics.report import jsonable

Figure = dict[str, Any]

# Matplotlib's tab colours by name, as the PNGs name them (figure_data.PHASE_COLORS).
_TAB = {
    "tab:gray": "#7f7f7f",
    "gold": "#ffd700",
    "tab:orange": "#ff7f0e",
    "tab:blue": "#1f77b4",
    "tab:red": "#d62728",
    "tab:purple": "#9467bd",
    "tab:brown": "#8c564b",
    "tab:green": "#2ca02c",
}
MAX_SERIES_POINTS = 1500  # a time series' samples sent to the page (a bin's peak each)
# A waterfall span narrower than this share of the plotted time also gets a marker, a
# few pixels wide at any zoom (a 5 ms prefill in a 200 s run is 0.003 % of the axis).
THIN_SPAN_SHARE = 0.005
_MARGIN = {"l": 60, "r": 20, "t": 56, "b": 45}
_RED, _GREEN = _TAB["tab:red"], _TAB["tab:green"]  # an SLO; the capacity under the SLOs


def _layout(title: str, **axes: Any) -> dict[str, Any]:
    return {"title": {"text": title, "font": {"size": 14}}, "margin": _MARGIN, **axes}


def _rule(at: float, colour: str, axis: str = "x") -> dict[str, Any]:
    """A dashed line across the plot at ``at`` on ``axis`` ("x": upright, "y": level)."""
    across = "y" if axis == "x" else "x"
    return {
        "type": "line",
        "xref": "x" if axis == "x" else "paper",
        "yref": "paper" if axis == "x" else "y",
        f"{axis}0": at,
        f"{axis}1": at,
        f"{across}0": 0,
        f"{across}1": 1,
        "line": {"color": colour, "dash": "dash"},
    }


def _label(x: float, text: str, colour: str, y: float = 1) -> dict[str, Any]:
    """``text`` beside an upright line at ``x`` on a log axis (plotly places a shape at
    the value, an annotation at its log10)."""
    return {
        "x": math.log10(x),
        "y": y,
        "xref": "x",
        "yref": "paper",
        "text": text,
        "showarrow": False,
        "xanchor": "left",
        "yanchor": "top",
        "font": {"color": colour},
    }


def cdf_figure(data: CdfData, metric: str) -> Figure:
    """``metric`` ("ttft" or "tpot")'s CDF over completed requests, with its SLO line."""
    values = np.sort(data.ttft_ms if metric == "ttft" else data.tpot_ms)
    slo = data.ttft_slo_ms if metric == "ttft" else data.tpot_slo_ms
    fraction = np.arange(1, values.size + 1) / max(values.size, 1)
    layout = _layout(
        f"{metric.upper()} CDF ({values.size} requests)",
        xaxis={"title": {"text": f"{metric.upper()} (ms)"}, "type": "log"},
        yaxis={"title": {"text": "fraction of requests"}, "range": [0, 1.02]},
        showlegend=False,
    )
    if slo is not None:
        layout["shapes"] = [_rule(slo, _RED)]
        layout["annotations"] = [_label(slo, f" SLO {slo:g} ms", _RED)]
    trace = {"x": values.tolist(), "y": fraction.tolist(), "mode": "lines", "name": metric}
    return {"data": [trace], "layout": layout}


def _thinned(time_s: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most ``MAX_SERIES_POINTS`` samples: each bin's first time and its peak value,
    so that a spike of the queue survives (a stride would drop it)."""
    if time_s.size <= MAX_SERIES_POINTS:
        return time_s, values
    starts = np.linspace(0, time_s.size, MAX_SERIES_POINTS, endpoint=False).astype(np.int64)
    return time_s[starts], np.maximum.reduceat(values, starts)


def timeseries_figure(data: TimeseriesData) -> Figure:
    """The waiting queue (and running batch) and the KV cache's use over time, as steps."""
    by_column = {
        column: series for (column, _), series in zip(TIMESERIES_COLUMNS, data.series, strict=True)
    }
    traces = []
    for column, name, axis, colour in (
        ("num_waiting", "waiting", "y", _TAB["tab:orange"]),
        ("num_running", "running", "y", _TAB["tab:blue"]),
        ("kv_cache_usage", "KV use %", "y2", _TAB["tab:green"]),
    ):
        values = by_column.get(column)
        if values is None:
            continue
        time_s, shown = _thinned(data.time_s, values)
        traces.append(
            {
                "x": time_s.tolist(),
                "y": shown.tolist(),
                "name": name,
                "yaxis": axis,
                "mode": "lines",
                "line": {"shape": "hv", "color": colour, "width": 1.2},
            }
        )
    layout = _layout(
        "Queue and KV cache over time",
        xaxis={"title": {"text": "time (s)"}, "anchor": "y2"},  # under the lower panel
        yaxis={"title": {"text": "requests"}, "domain": [0.55, 1], "rangemode": "tozero"},
        yaxis2={"title": {"text": "KV use (%)"}, "domain": [0, 0.42], "range": [0, 105]},
        legend={"orientation": "h", "y": -0.28},
    )
    return {"data": traces, "layout": layout}


def waterfall_figure(data: WaterfallData | None) -> Figure:
    """The first requests' phases as horizontal bars, one row each, first token ticked;
    spans too thin to see also get a marker, a few pixels wide at any zoom."""
    traces: list[dict[str, Any]] = []
    if data is not None and data.bars:
        span_s = max(float(b.end_s.max()) for b in data.bars) - min(
            float(b.start_s.min()) for b in data.bars
        )
        for bars in data.bars:
            colour = _TAB.get(PHASE_COLORS.get(bars.phase, ""), "#444444")
            width_s = bars.end_s - bars.start_s
            traces.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "name": bars.phase,
                    "legendgroup": bars.phase,
                    "y": bars.rows.tolist(),
                    "x": width_s.tolist(),
                    "base": bars.start_s.tolist(),
                    "marker": {"color": colour},
                    "width": 0.8,
                    "hovertemplate": f"{bars.phase}: %{{x:.4f}} s<extra></extra>",
                }
            )
            thin = width_s < THIN_SPAN_SHARE * span_s
            if thin.any():
                traces.append(
                    {
                        "type": "scatter",
                        "mode": "markers",
                        "name": bars.phase,
                        "legendgroup": bars.phase,
                        "showlegend": False,
                        "x": ((bars.start_s + bars.end_s) / 2)[thin].tolist(),
                        "y": bars.rows[thin].tolist(),
                        "marker": {
                            "symbol": "line-ns",
                            "size": 11,
                            "line": {"width": 4, "color": colour},
                        },
                        "hoverinfo": "skip",
                    }
                )
        first = np.isfinite(data.first_token_s)
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "first token",
                "x": data.first_token_s[first].tolist(),
                "y": np.arange(len(data.ids), dtype=float)[first].tolist(),
                "marker": {"symbol": "line-ns", "size": 14, "line": {"width": 2, "color": "black"}},
            }
        )
    ids = [] if data is None else list(data.ids)
    layout = _layout(
        f"The first {len(ids)} requests' phases",
        barmode="overlay",
        xaxis={"title": {"text": "time (s)"}},
        yaxis={
            "title": {"text": "request"},
            "autorange": "reversed",
            # A request id every fifth row: forty labels overlap.
            "tickvals": list(range(0, len(ids), 5)),
            "ticktext": [str(i) for i in ids[::5]],
        },
        legend={"orientation": "h", "y": -0.28},
    )
    return {"data": traces, "layout": layout}


def knee_figure(
    knee: Knee, rate_per_s: float, p50_ms: float, p99_ms: float, ttft_slo_ms: float | None
) -> Figure:
    """p50 and p99 TTFT against the offered rate, the current run marked, the SLO and
    the capacity under the SLOs drawn."""
    traces: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    title = "Load–latency knee: TTFT against offered load"
    for name, values, dash in (
        ("p50 TTFT", knee.p50_ttft_ms, "dot"),
        ("p99 TTFT", knee.p99_ttft_ms, "solid"),
    ):
        traces.append(
            {
                "x": list(knee.rates_per_s),
                "y": jsonable(values),
                "name": name,
                "mode": "lines+markers",
                "line": {"dash": dash},
                "text": list(knee.status),
                "hovertemplate": "%{x:.3g} req/s: %{y:.4g} ms (%{text})",
            }
        )
    capacity = knee.capacity_rate_per_s
    if capacity is not None:
        bound = "≥ " if knee.capacity_beyond else "≈ "
        label = f"capacity {bound}{capacity:.3g} req/s"
        title += f"<br><sub>{label} under {', '.join(knee.targets) or 'the served check'}</sub>"
        shapes.append(_rule(capacity, _GREEN))
        notes.append(_label(capacity, f" {label}", _GREEN, 0.98))
    else:
        notes.append(
            {
                "x": 0.02,
                "y": 0.98,
                "xref": "paper",
                "yref": "paper",
                "showarrow": False,
                "text": "no rate of the grid meets the SLOs",
                "xanchor": "left",
                "font": {"color": _RED},
            }
        )
    traces.append(
        {
            "x": [rate_per_s, rate_per_s],
            "y": jsonable([p50_ms, p99_ms]),  # NaN or inf: null, no point drawn
            "name": "this run",
            "mode": "markers",
            "marker": {"size": 13, "color": _RED, "symbol": "diamond"},
        }
    )
    if ttft_slo_ms is not None:
        shapes.append(_rule(ttft_slo_ms, _RED, "y"))
    # The grid and this run, a little wider (a log axis's range is in log10); else
    # plotly's autorange reaches for the capacity's label and squeezes the curve.
    shown = [rate_per_s, *knee.rates_per_s]
    x_range = [math.log10(min(shown) / 1.25), math.log10(max(shown) * 1.25)]
    layout = _layout(
        title,
        xaxis={"title": {"text": "offered load (req/s)"}, "type": "log", "range": x_range},
        yaxis={"title": {"text": "TTFT (ms)"}, "type": "log"},
        shapes=shapes,
        annotations=notes,
        legend={"orientation": "h", "y": -0.28},
    )
    return {"data": traces, "layout": layout}
