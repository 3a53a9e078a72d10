"""Figures of a sweep (docs/capacity.md): latency against load, throughput against p99 TTFT.

``latency_vs_load.png`` is the hockey stick; for batch-size-1 configurations under
Poisson arrivals a third panel sets the simulated mean TTFT against the M/G/1
prediction from the service times the simulation measured (:mod:`sim.metrics.analytic`).
Drawn on an Agg canvas (no pyplot state), each figure under ``sweep_caption``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from sim.cost.label import cost_model_tag
from sim.metrics.analytic import mg1_wait_s
from sim.metrics.figure_data import caption_line, wrap_caption
from sim.metrics.figure_draw import DPI, SLO_COLOR
from sim.metrics.slo_targets import SloTarget
from sim.planning.sweep_report import LATENCY, THROUGHPUT, cheapest, pareto_mask

# A caption lists up to this many distinct values of a column a sweep varies, else counts them.
MAX_CAPTION_VALUES = 3


def _values(table: pd.DataFrame, column: str, plural: str, tag: bool = False) -> str:
    """The distinct values of ``column`` in run order, as a caption says them; more
    than ``MAX_CAPTION_VALUES`` are counted (``plural``: what they are)."""
    if column not in table:
        return "?"
    values = [str(v) for v in dict.fromkeys(table[column].dropna().tolist())]
    if tag:
        values = list(dict.fromkeys(cost_model_tag(v) for v in values))
    if not values:
        return "?"
    if len(values) > MAX_CAPTION_VALUES:
        return f"{len(values)} {plural}"
    return " | ".join(values)


def sweep_caption(table: pd.DataFrame) -> str:
    """The caption of a sweep's figures from its table (one row per run, the summary's
    header keys): scenario, model, GPU and cost model, each value the runs had."""
    scenarios = _values(table, "scenario", "scenarios")
    return caption_line(
        scenarios if scenarios[0].isdigit() else f"scenario {scenarios}",
        _values(table, "model", "models"),
        _values(table, "hardware", "GPUs"),
        _values(table, "cost_model", "cost models", tag=True),
    )


def top_caption(fig: Figure, caption: str) -> None:
    """``caption`` at the top of ``fig`` (``tight_layout`` then leaves room for it)."""
    if caption:
        fig.suptitle(wrap_caption(caption, fig.get_figwidth()), fontsize=8.5, color="dimgray")


def load_axis(points: pd.DataFrame, load_key: str | None) -> tuple[str, str]:
    """Column and label of the x axis: offered rate when the sweep sets it."""
    offered = "offered_rate_per_s"
    if (
        load_key in ("workload.arrival.rate_per_s", "workload.time_scale")
        and offered in points
        and points[offered].notna().all()
    ):
        return offered, "offered load (req/s)"
    return THROUGHPUT, "request throughput (req/s)"


def mg1_curve(
    rows: pd.DataFrame, max_rate_per_s: float, num: int = 200
) -> tuple[np.ndarray, np.ndarray] | None:
    """Mean TTFT (ms) predicted by M/G/1 for one batch-size-1 configuration, from its
    runs' service-time moments and load-independent TTFT, weighted by completed
    requests; ``None`` if the configuration is not such a queue."""
    needed = ["service_mean_s", "service_m2_s2", "ttft_excl_queue_mean_s", "completed"]
    if any(c not in rows for c in needed) or rows[needed].isna().any().any():
        return None
    if "arrival_kind" in rows and not (rows["arrival_kind"] == "poisson").all():
        return None
    weights = rows["completed"].to_numpy(float)
    if weights.sum() <= 0:
        return None
    mean_s = float(np.average(rows["service_mean_s"], weights=weights))
    m2_s2 = max(float(np.average(rows["service_m2_s2"], weights=weights)), mean_s**2)
    base_s = float(np.average(rows["ttft_excl_queue_mean_s"], weights=weights))
    top = min(max_rate_per_s, 0.98 / mean_s)
    rates = np.linspace(0.0, top, num)
    ttft_ms = np.array([1000.0 * (base_s + mg1_wait_s(r, mean_s, m2_s2)) for r in rates])
    return rates, ttft_ms


def _slo_line(ax: Axes, targets: tuple[SloTarget, ...], key: str, horizontal: bool) -> None:
    for target in targets:
        if target.summary_key == key:
            draw = ax.axhline if horizontal else ax.axvline
            draw(target.limit_ms, color=SLO_COLOR, ls="--", lw=1, label=f"SLO {target}")


def _plain_log_ticks(ax: Axes, axis: str) -> None:
    """Label a log axis 100, 200, 500, 1000 rather than in scientific notation."""

    target = ax.xaxis if axis == "x" else ax.yaxis

    def label(value: float, _: int) -> str:
        low, high = target.get_view_interval()
        if low > 0 and high / low < 10:  # under a decade: label every tick
            return f"{value:.3g}"
        mantissa = value / 10 ** np.floor(np.log10(value)) if value > 0 else 0
        return f"{value:g}" if round(mantissa, 6) in (1.0, 2.0, 5.0) else ""

    target.set_major_formatter(FuncFormatter(label))
    target.set_minor_formatter(FuncFormatter(label))


def save_figure(fig: Figure, path: Path) -> Path:
    """``fig`` on an Agg canvas, written to ``path`` at ``DPI``."""
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI)
    return path


def plot_latency_vs_load(
    points: pd.DataFrame,
    table: pd.DataFrame,
    targets: tuple[SloTarget, ...],
    load_key: str | None,
    path: Path,
    caption: str = "",
) -> Path:
    """The hockey-stick figure (see module docstring), ``caption`` at its top."""
    x_col, x_label = load_axis(points, load_key)
    analytic = {}
    if x_col == "offered_rate_per_s":
        top = float(points[x_col].max())
        for config, rows in table.groupby("config", sort=False):
            curve = mg1_curve(rows, top)
            if curve is not None:
                analytic[config] = curve
    panels = [(LATENCY, "p99 TTFT (ms)"), ("p99_tpot_ms", "p99 TPOT (ms)")]
    if analytic:
        panels.append(("mean_ttft_ms", "mean TTFT (ms): simulated vs M/G/1"))
    fig = Figure(figsize=(5.2 * len(panels), 4.4))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (y_col, title) in zip(axes, panels, strict=True):
        for index, (config, rows) in enumerate(points.groupby("config", sort=False)):
            rows = rows.sort_values(x_col)
            color = f"C{index % 10}"
            ax.plot(rows[x_col], rows[y_col], "o-", ms=3, color=color, label=str(config))
            if y_col == "mean_ttft_ms" and config in analytic:
                rates, ttft_ms = analytic[config]
                ax.plot(rates, ttft_ms, "--", color=color, lw=1, label=f"M/G/1: {config!s}")
        _slo_line(ax, targets, y_col, horizontal=True)
        ax.set_yscale("log")
        _plain_log_ticks(ax, "y")
        ax.set_ylabel("ms, log scale")  # the hockey stick spans decades: say the axis is log
        ax.set_xlabel(x_label)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    if analytic:
        axes[-1].legend(fontsize=7)
    top_caption(fig, caption)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_throughput_vs_latency(
    points: pd.DataFrame, targets: tuple[SloTarget, ...], path: Path, caption: str = ""
) -> Path:
    """Throughput against p99 TTFT, Pareto front joined, cheapest point starred,
    ``caption`` at the top."""
    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    for index, (config, rows) in enumerate(points.groupby("config", sort=False)):
        ax.scatter(rows[LATENCY], rows[THROUGHPUT], s=18, color=f"C{index % 10}", label=str(config))
    front = points[pareto_mask(points[THROUGHPUT].to_numpy(float), points[LATENCY].to_numpy(float))]
    front = front.sort_values(LATENCY)
    ax.plot(front[LATENCY], front[THROUGHPUT], "k-", lw=1, drawstyle="steps-post")
    ax.scatter(
        front[LATENCY],
        front[THROUGHPUT],
        s=60,
        facecolors="none",
        edgecolors="k",
        label="Pareto front",
    )
    best, _, _ = cheapest(points)
    if best is not None:
        ax.scatter(
            [best[LATENCY]],
            [best[THROUGHPUT]],
            marker="*",
            s=250,
            color="gold",
            edgecolors="k",
            zorder=5,
            label="cheapest meeting SLOs",
        )
    _slo_line(ax, targets, LATENCY, horizontal=False)
    ax.set_xscale("log")
    _plain_log_ticks(ax, "x")
    ax.set_xlabel("p99 TTFT (ms)")
    ax.set_ylabel("request throughput (req/s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    top_caption(fig, caption)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_sweep(
    points: pd.DataFrame,
    table: pd.DataFrame,
    targets: tuple[SloTarget, ...],
    load_key: str | None,
    out_dir: str | Path,
) -> list[Path]:
    """Both figures into ``out_dir``, captioned from ``table`` (``sweep_caption``);
    nothing when no point completed a request."""
    out = Path(out_dir)
    usable = points.dropna(subset=[THROUGHPUT, LATENCY])
    if usable.empty:
        return []
    caption = sweep_caption(table)
    return [
        plot_latency_vs_load(
            usable, table, targets, load_key, out / "latency_vs_load.png", caption
        ),
        plot_throughput_vs_latency(usable, targets, out / "throughput_vs_ttft.png", caption),
    ]
