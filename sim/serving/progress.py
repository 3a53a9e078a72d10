"""A run's progress bar: shown only once the run has taken a while (``BAR_DELAY_S``)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

BAR_DELAY_S = 2.0  # wall seconds before a run shows its progress bar


class Progress:
    """A bar of ``total`` requests (or other ``unit``s), updated from ``done()`` (which
    may count other processes' requests) at each ``tick``."""

    def __init__(
        self, total: int, enabled: bool, done: Callable[[], int], unit: str = "req"
    ) -> None:
        self.total = total
        self.done = done
        self.unit = unit
        self._bar: Any = None
        self._show_at_s = time.monotonic() + BAR_DELAY_S if enabled else math.inf

    def tick(self) -> None:
        bar = self._bar
        if bar is not None:
            bar.update(self.done() - bar.n)
        elif time.monotonic() >= self._show_at_s:
            self._bar = tqdm(total=self.total, unit=self.unit, initial=self.done())

    def close(self) -> None:
        bar = self._bar
        if bar is not None:
            bar.update(self.done() - bar.n)
            bar.close()
            self._bar = None
