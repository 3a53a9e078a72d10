"""The validation report: a markdown table per prediction, and CDF overlay plots.

``render_markdown`` takes the output of ``sim.validation.predict.compare`` for each
prediction (and optionally for a second measured run, the noise floor) and
writes, per metric, measured vs predicted mean/p50/p90/p99 with % error,
the paired per-request error and the KS distance. ``plot_cdfs`` overlays the
empirical CDFs of the measured and predicted latencies, one panel per metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.typing import LineStyleType

from sim.metrics.figure_data import wrap_caption
from sim.validation.predict import METRICS, STATS, Latencies

Comparison = dict[str, dict[str, Any]]
_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}{suffix}" if suffix == "%" else f"{value:.{digits}f}{suffix}"


def metric_table(name: str, comparison: Comparison, noise: Comparison | None = None) -> str:
    """One markdown table: rows are metrics, columns the statistics and their errors."""
    head = "| metric | " + " | ".join(f"{s} meas / pred (ms), err" for s in STATS)
    head += " | paired err p50 / p90 | KS |"
    if noise is not None:
        head += " noise: p50 / p90 / p99 err, KS |"
    cols = head.count("|") - 1
    lines = [f"**{name}**", "", head, "|" + "---|" * cols]
    for metric in METRICS:
        c = comparison[metric]
        cells = [
            f"{_fmt(c['measured_ms'][s])} / {_fmt(c['predicted_ms'][s])}, "
            f"{_fmt(c['error_pct'][s], suffix='%')}"
            for s in STATS
        ]
        paired = c["paired"]
        pair = (
            f"{_fmt(100 * paired['median'])}% / {_fmt(100 * paired['p90'])}%"
            if paired and paired["median"] is not None
            else "–"
        )
        row = f"| {_NAMES[metric]} | " + " | ".join(cells) + f" | {pair} | {_fmt(c['ks'], 3)} |"
        if noise is not None:
            n = noise[metric]["error_pct"]
            row += (
                f" {_fmt(n['p50'], suffix='%')} / {_fmt(n['p90'], suffix='%')} / "
                f"{_fmt(n['p99'], suffix='%')}, {_fmt(noise[metric]['ks'], 3)} |"
            )
        lines.append(row)
    return "\n".join(lines)


def render_markdown(
    title: str,
    facts: Mapping[str, object],
    comparisons: Mapping[str, Comparison],
    noise: Comparison | None = None,
    notes: str = "",
) -> str:
    """The whole report: facts, one table per prediction, the noise floor, notes."""
    parts = [f"# {title}", ""]
    parts += [f"- **{key}**: {value}" for key, value in facts.items()]
    parts.append("")
    parts.append(
        "Errors are (predicted − measured) / measured. Paired error: |pred − meas| / meas per "
        "request (median / p90). KS: largest gap between the two CDFs (0 = identical)."
    )
    if noise is not None:
        parts.append(
            "Noise floor: the same statistics between two measured runs of the same "
            "requests (run 2 vs run 1) — what a perfect prediction could be expected to miss by."
        )
    parts.append("")
    for name, comparison in comparisons.items():
        parts += [metric_table(name, comparison, noise), ""]
    if notes:
        parts += [notes, ""]
    return "\n".join(parts)


# Colours of the CDF overlay's sources: a measured run in black (its repeat grey), each
# prediction its own colour, in the order given; the same in every panel, even one where
# a source has no samples (a measured run without token times has no ITL).
_MEASURED_COLORS = ("black", "dimgray")
_PREDICTED_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown")


def source_colors(labels: list[str]) -> dict[str, str]:
    """Each source's colour in ``plot_cdfs``: measured runs (labels starting with
    "measured") from ``_MEASURED_COLORS``, the others from ``_PREDICTED_COLORS``."""
    colors: dict[str, str] = {}
    num_measured = num_predicted = 0
    for label in labels:
        if label.startswith("measured"):
            colors[label] = _MEASURED_COLORS[num_measured % len(_MEASURED_COLORS)]
            num_measured += 1
        else:
            colors[label] = _PREDICTED_COLORS[num_predicted % len(_PREDICTED_COLORS)]
            num_predicted += 1
    return colors


def plot_cdfs(
    runs: Mapping[str, Latencies], path: str | Path, title: str = "", caption: str = ""
) -> Path:
    """Overlay the CDFs of every run (label -> latencies), one panel per metric, one
    colour and line style per run in every panel (``source_colors``) and one legend for
    all; ``caption`` (``sim.metrics.figure_data.caption_line``: scenario, model, GPU,
    cost model) under the title, so a prediction from a guess cannot pass for one
    from measured kernels."""
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    styles: list[LineStyleType] = ["-", "--", ":", "-."]
    colors = source_colors(list(runs))
    handles = [
        Line2D([], [], color=colors[label], linestyle=styles[i % len(styles)], label=label)
        for i, label in enumerate(runs)
    ]
    for ax, metric in zip(axes, METRICS, strict=True):
        missing = []
        for i, (label, lat) in enumerate(runs.items()):
            v = np.sort(lat.values(metric)) * 1e3
            if v.size == 0:
                missing.append(label)
                continue
            y = np.arange(1, v.size + 1) / v.size
            style = styles[i % len(styles)]
            ax.step(v, y, where="post", linestyle=style, color=colors[label], label=label)
        if missing:
            ax.text(
                0.98,
                0.04,
                "no samples: " + ", ".join(missing),
                transform=ax.transAxes,
                ha="right",
                va="bottom",
                fontsize=7,
                color="dimgray",
            )
        ax.set_xlabel(f"{_NAMES[metric]} (ms)")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("CDF")
    # One legend below the panels, every source in it: inside a panel it covered the
    # TTFT curves, and taken from one panel it missed a source absent there.
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=max(1, len(handles)))
    heading = "\n".join(t for t in (title, wrap_caption(caption, 16.0) if caption else "") if t)
    if heading:
        fig.suptitle(heading, fontsize=10)
    fig.tight_layout(rect=(0.0, 0.1, 1.0, 1.0))
    out = Path(path)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out
