"""What a run's figures are drawn from, as plain arrays: no pandas, no matplotlib.

``sim.metrics.plots`` cuts these out of a run's tables and ``sim.metrics.figure_draw``
draws them; between the two they cross a pipe to ``servesim run``'s figure process
(``sim.cli.figures``), a few tens of kB instead of the run's request table.
``figure_caption`` is the line under every figure's title: the scenario, the model
on its GPU, and the cost model as a reader must take it (measured or a guess).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sim.cost.label import cost_model_tag

if TYPE_CHECKING:  # a name for annotations only: sim.config loads pydantic, which the
    # figure process must not (tests/test_cli_figure_data.py)
    from sim.config import FloatArray

LATENCY_CDF_PNG = "latency_cdf.png"
TIMESERIES_PNG = "timeseries.png"
WATERFALL_PNG = "waterfall.png"
# Requests in the waterfall (the first ones of the run).
NUM_WATERFALL_REQUESTS = 40
# The waterfall's colour of each phase (``sim.metrics.lifecycle.PHASES``).
PHASE_COLORS = {
    "way_in": "tab:gray",
    "waiting": "gold",
    "prefill": "tab:orange",
    "decode": "tab:blue",
    "preempted": "tab:red",
    "swapped": "tab:purple",
    "kv_transfer": "tab:brown",
    "detokenize": "tab:green",
}


def caption_line(scenario: str, model: str, hardware: str, cost: str) -> str:
    """The line every figure of servesim carries: ``scenario`` (worded: "scenario chat"),
    model on GPU, cost model (``sim.cost.label.cost_model_tag``)."""
    return f"{scenario} · {model} on {hardware} · {cost}"


# Characters of a caption per inch of figure width at its 8.5-9 pt (a little under).
CAPTION_CHARS_PER_IN = 13


def wrap_caption(caption: str, width_in: float) -> str:
    """``caption`` cut into lines that fit a figure ``width_in`` wide, at its " · " breaks
    first (a sweep's caption, listing several models or cost models, can be long)."""
    width = max(40, int(CAPTION_CHARS_PER_IN * width_in))
    lines: list[str] = []
    for part in caption.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def figure_caption(summary: Mapping[str, object]) -> str:
    """``caption_line`` of a run from its summary (``Result.summary``, summary.json,
    a sweep's or capacity search's row): the keys ``summary_header`` writes."""

    def text(key: str) -> str:
        value = summary.get(key)
        return "?" if value is None else str(value)

    cost = summary.get("cost_model")
    tag = cost_model_tag(str(cost)) if cost is not None else "?"
    return caption_line(f"scenario {text('scenario')}", text("model"), text("hardware"), tag)


@dataclass(frozen=True)
class CdfData:
    """``latency_cdf.png``: TTFT and TPOT (ms, finite) of the ``num_done`` completed
    requests, and the SLO lines to draw (None: no line)."""

    ttft_ms: FloatArray
    tpot_ms: FloatArray
    num_done: int
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None


@dataclass(frozen=True)
class TimeseriesData:
    """``timeseries.png``: sample times (s, sorted) and one series per panel, already
    scaled (KV usage in %); None for a panel whose column the run did not record."""

    time_s: FloatArray
    series: tuple[FloatArray | None, ...]


@dataclass(frozen=True)
class PhaseBars:
    """One phase's bars in the waterfall: row index, start and end (s) of each span."""

    phase: str
    rows: FloatArray
    start_s: FloatArray
    end_s: FloatArray


@dataclass(frozen=True)
class WaterfallData:
    """``waterfall.png``: request ids top to bottom, each phase's bars (in the order
    the spans list them), each row's first token time (s, NaN: none) and the phases
    present, in lifecycle order (the legend)."""

    ids: tuple[int, ...]
    bars: tuple[PhaseBars, ...]
    first_token_s: FloatArray
    present: tuple[str, ...]


@dataclass(frozen=True)
class Figures:
    """A run's figures as data and the folder they go to (``report.prepare_figures``)."""

    out_dir: Path
    cdf: CdfData
    timeseries: TimeseriesData
    waterfall: WaterfallData | None = None
    caption: str = ""  # ``figure_caption`` of the run: under every figure's title

    def names(self) -> list[str]:
        """The files drawn from this, in order: no waterfall without its data."""
        names = [LATENCY_CDF_PNG, TIMESERIES_PNG]
        return [*names, WATERFALL_PNG] if self.waterfall is not None else names
