"""Which requests of a trace are replayed, and when: the window every trace format shares.

Steps, in this order: sort rows by timestamp (stable, so ties keep file
order); keep those whose time since the first row lies in
``[start_offset_s, start_offset_s + duration_s)`` (trace seconds, before
scaling); shift so the first kept request arrives at 0; keep the first
``max_requests``; then rescale time, either by ``time_scale`` (0.5 replays
twice as fast) or to a mean rate of ``rate_per_s`` requests per second
(``(n - 1) / span`` after rescaling: the same gaps, stretched or squeezed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sim.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """The window and rescaling options of a replay (see the module docstring)."""

    time_scale: float = 1.0
    rate_per_s: float | None = None
    max_requests: int | None = None
    start_offset_s: float = 0.0
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.time_scale <= 0 or self.start_offset_s < 0:
            raise ValueError("time_scale must be > 0 and start_offset_s >= 0")
        if self.rate_per_s is not None and (self.rate_per_s <= 0 or self.time_scale != 1.0):
            raise ValueError("rate_per_s must be > 0 and excludes time_scale")


def select(times_s: FloatArray, window: TraceWindow, path: Path) -> tuple[IntArray, FloatArray]:
    """Row indices of the replayed requests, in arrival order, and their arrival times."""
    order = np.argsort(times_s, kind="stable")
    relative_s = times_s[order] - (float(times_s[order[0]]) if order.size else 0.0)
    keep = relative_s >= window.start_offset_s
    if window.duration_s is not None:
        keep &= relative_s < window.start_offset_s + window.duration_s
    order, relative_s = order[keep], relative_s[keep]
    if order.size == 0:
        raise ConfigError(
            f"{path}: no request in the window starting {window.start_offset_s} s "
            f"after the first row (duration {window.duration_s} s)"
        )
    arrival_s = (relative_s - relative_s[0]) * window.time_scale
    if window.max_requests is not None:
        order, arrival_s = order[: window.max_requests], arrival_s[: window.max_requests]
    if window.rate_per_s is not None:
        span_s = float(arrival_s[-1])
        if order.size < 2 or span_s <= 0:
            raise ConfigError(f"{path}: rate_per_s needs a window of requests spanning time")
        arrival_s = arrival_s * ((order.size - 1) / span_s / window.rate_per_s)
    return order.astype(np.int64), arrival_s
