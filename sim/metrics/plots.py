"""A run's figures from its tables: latency CDFs, the scheduler's time series, the waterfall.

``cdf_data``, ``timeseries_data`` and ``waterfall_data`` cut the arrays a figure
draws (``sim.metrics.figure_data``) out of a run's tables, frames or (without
pandas, for ``servesim run``'s figure process) its columns and span rows.
``draw_waterfall`` and ``caption_figure`` serve a notebook's own figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray
from sim.engine.records import RequestTable, completed_mask, floats
from sim.metrics.figure_data import CdfData, PhaseBars, TimeseriesData, WaterfallData, wrap_caption
from sim.metrics.lifecycle import PHASES, SpanRow
from sim.metrics.stats import Slo, latency_columns
from sim.serving.cluster import total_over_replicas

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_WATERFALL_COLUMNS = ["request_id", "phase", "start_s", "end_s"]

# The time series' panels, top to bottom: column and scale (KV usage, a fraction, in %).
TIMESERIES_COLUMNS = (("num_waiting", 1.0), ("num_running", 1.0), ("kv_cache_usage", 100.0))


def cdf_data(requests: RequestTable, slo: Slo | None = None) -> CdfData:
    """TTFT and TPOT (ms) of completed requests; TPOT over requests with at least
    two output tokens, as in the summary; the TTFT/TPOT SLOs of ``slo``."""
    done = completed_mask(requests)
    latencies = latency_columns(requests)
    ttft_ms = latencies["ttft_s"][done] * 1000.0
    tpot_ms = latencies["tpot_s"][done] * 1000.0
    return CdfData(
        ttft_ms[np.isfinite(ttft_ms)],
        tpot_ms[np.isfinite(tpot_ms)],
        int(done.sum()),
        slo.ttft_ms if slo else None,
        slo.tpot_ms if slo else None,
    )


def timeseries_data(timeseries: pd.DataFrame | Mapping[str, npt.NDArray[Any]]) -> TimeseriesData:
    """Sample times in order and each panel's values (``TIMESERIES_COLUMNS``), from a
    frame or a run's columns (``RawResult.series``); several replicas are drawn as
    one: queues summed, KV usage averaged."""
    columns: Any = timeseries
    replica = np.asarray(timeseries["replica"]) if "replica" in timeseries else None
    if replica is not None and len(replica) and bool((replica != replica[0]).any()):
        import pandas as pd  # several replicas: pandas aligns their samples

        columns = total_over_replicas(pd.DataFrame(timeseries, copy=False))
    time_s = floats(columns["time_s"]) if "time_s" in columns else np.empty(0)
    order = None
    if time_s.size > 1 and not bool(np.all(time_s[1:] >= time_s[:-1])):
        order = np.argsort(time_s, kind="stable")
        time_s = time_s[order]
    series: list[FloatArray | None] = []
    for column, scale in TIMESERIES_COLUMNS:
        if column not in columns:
            series.append(None)
            continue
        values = floats(columns[column])
        series.append((values if order is None else values[order]) * scale)
    return TimeseriesData(time_s, tuple(series))


def waterfall_data(
    spans: pd.DataFrame | Sequence[SpanRow], requests: RequestTable
) -> WaterfallData:
    """The bars of each request of ``spans`` (``sim.metrics.lifecycle``: a frame or its
    rows), in rows by request id, and each one's first token time from ``requests``."""
    # (request id, phase, start, end) of each span, from a frame (which needs only
    # those columns; an empty one may lack them) or from span rows.
    quads: list[tuple[int, str, float, float]]
    if isinstance(spans, Sequence):
        quads = [(span[0], span[2], span[3], span[4]) for span in spans]
    elif len(spans):
        quads = list(spans[_WATERFALL_COLUMNS].itertuples(index=False, name=None))
    else:
        quads = []
    ids = sorted({int(quad[0]) for quad in quads})
    row_of = {request_id: row for row, request_id in enumerate(ids)}
    by_phase: dict[str, list[tuple[int, str, float, float]]] = {}  # in order of first appearance
    for quad in quads:
        by_phase.setdefault(str(quad[1]), []).append(quad)
    bars = []
    for phase, group in by_phase.items():
        rows = np.array([row_of[int(quad[0])] for quad in group], dtype=np.float64)
        start_s = np.array([quad[2] for quad in group], dtype=np.float64)
        end_s = np.array([quad[3] for quad in group], dtype=np.float64)
        bars.append(PhaseBars(phase, rows, start_s, end_s))
    firsts = _first_token_s(requests, ids)
    present = [p for p in PHASES if p in by_phase]
    return WaterfallData(tuple(ids), tuple(bars), firsts, tuple(present))


def _first_token_s(requests: RequestTable, ids: list[int]) -> FloatArray:
    """``first_token_s`` of each of ``ids`` (NaN for an id not in ``requests``)."""
    rows, found = requests.find(np.array(ids, dtype=np.int64))
    out = np.full(len(ids), np.nan)
    out[found] = requests["first_token_s"][rows[found]]
    return out


def draw_waterfall(ax: Axes, spans: pd.DataFrame, requests: RequestTable) -> None:
    """The waterfall on ``ax`` (a notebook's own axes, say); ``requests`` (a run's
    ``raw.records``) gives first tokens."""
    # Imported here: figure_draw brings matplotlib, which servesim run's main process,
    # cutting the figures' arrays with this module, never loads (its figure process does).
    from sim.metrics.figure_draw import draw_waterfall_axes

    draw_waterfall_axes(ax, waterfall_data(spans, requests))


def caption_figure(fig: Figure, caption: str) -> None:
    """``caption`` (``figure_data.figure_caption``: scenario, model, GPU, cost model) as
    the title of a notebook's figure, above its axes' titles: a figure without a layout
    engine gets matplotlib's constrained layout, which makes room for it."""
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("constrained")
    fig.suptitle(wrap_caption(caption, fig.get_figwidth()), fontsize=9, color="dimgray")
