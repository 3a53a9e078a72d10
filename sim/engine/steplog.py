"""The step log: every engine step's times and token counts, stored by runs.

Every token time and inter-token gap is derived from it (``sim.engine.tokens``), so
nothing is stored per token. Only each step's end time is stored per step (8
bytes). Everything else is stored once per *segment*: one ``add_step``, or one
skip-ahead run of k decode steps of one shape (``add_decode_run``), whose
steps each start where the one before ended. A million base requests log ~14
million steps in ~4 million segments: ~230 MB instead of ~460 MB of rows.
``StepRuns.frame`` expands it to one row per step (``STEP_COLUMNS``) when asked.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from sim.engine.columns import Columns
from sim.engine.step_runs import SEGMENT_COLUMNS, STEP_COLUMNS, StepRuns

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

__all__ = ["SEGMENT_COLUMNS", "STEP_COLUMNS", "StepLog", "StepRuns"]


class StepLog:
    """``start_s``, ``end_s`` and token counts of each step, in order.

    ``num_itl_tokens`` counts the tokens emitted in the step by requests that
    also emitted one in the step before: each such token is one inter-token
    gap equal to the step's duration (a decoding request never sees the
    engine idle). ``num_outputs`` counts the requests that got output in the
    step (a token, or several with speculation): the frontend's work for the
    step (``sim.serving.frontend``).
    """

    def __init__(self) -> None:
        self._ends = array("d")
        self.segments = Columns(SEGMENT_COLUMNS)
        # One call per dtype and segment: this runs once per event.
        self._start = self.segments.group("f8", ("start_s",)).append
        self._counts = self.segments.group(
            "i4",
            ("num_steps", "num_prefill_tokens", "num_decode_seqs", "num_itl_tokens", "num_outputs"),
        ).extend

    @property
    def num_rows(self) -> int:
        """Steps logged (rows of ``frame()``)."""
        return len(self._ends)

    def add_step(
        self,
        start_s: float,
        end_s: float,
        num_prefill_tokens: int,
        num_decode_seqs: int,
        num_itl_tokens: int,
        num_outputs: int,
    ) -> None:
        """Log one step."""
        self._ends.append(end_s)
        self._start(start_s)
        self._counts((1, num_prefill_tokens, num_decode_seqs, num_itl_tokens, num_outputs))

    def add_decode_run(
        self,
        start_s: float,
        ends_s: list[float],
        num_decode_seqs: int,
        num_itl_tokens: int,
    ) -> None:
        """Log k decode-only steps back to back; the first starts at ``start_s``.

        Every request of the run continues its tokens in each of them, so it
        is both an inter-token gap and an output. One segment, whatever k.
        """
        if not ends_s:
            return
        self._ends.extend(ends_s)
        self._start(start_s)
        self._counts((len(ends_s), 0, num_decode_seqs, num_itl_tokens, num_itl_tokens))

    @property
    def ends(self) -> array[float]:
        """Each step's end time (s): the log's own array, for a writer that logs steps
        elsewhere and adds their segments to ``segments``."""
        return self._ends

    def runs(self, replica: int = 0) -> StepRuns:
        """The log as numpy arrays sharing memory with it (no copy), tagged ``replica``."""
        return StepRuns.of(self._ends, self.segments, replica)

    def frame(self) -> pd.DataFrame:
        """One row per step (``STEP_COLUMNS``); ``end_s`` shares memory with the log."""
        return self.runs().frame()
