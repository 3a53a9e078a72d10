"""What a run's figures are drawn from, as plain arrays: no pandas, no matplotlib.

``sim.metrics.plots`` cuts these out of a run's tables, and
``sim.metrics.figure_draw`` draws them (matplotlib). Between the two they can
cross a pipe: ``servesim run``'s figure process (``sim.cli.figures``) forks
before the simulator imports pandas and never imports it (issue 16: ~0.3 s it
need not spend), and the pickled data is a few tens of kB instead of the run's
whole request table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

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

    def names(self) -> list[str]:
        """The files drawn from this, in order: no waterfall without its data."""
        names = [LATENCY_CDF_PNG, TIMESERIES_PNG]
        return [*names, WATERFALL_PNG] if self.waterfall is not None else names
