"""The step log: one row per engine step, written straight into numpy chunks.

Every token time and inter-token gap is derived from it (``sim.tokens``), so
nothing is stored per token. A skip-ahead run of k decode steps is written
with a few slice assignments.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.columns import CHUNK_ROWS, Columns
from sim.cost.base import FloatArray

STEP_COLUMNS = {
    "start_s": "f8",
    "end_s": "f8",
    "num_prefill_tokens": "i4",
    "num_decode_seqs": "i4",
    "num_itl_tokens": "i4",
}


class StepLog(Columns):
    """``start_s``, ``end_s`` and token counts of each step, in order.

    ``num_itl_tokens`` counts the tokens emitted in the step by requests that
    also emitted one in the step before: each such token is one inter-token
    gap equal to the step's duration (a decoding request never sees the
    engine idle).
    """

    def __init__(self) -> None:
        super().__init__(STEP_COLUMNS)

    def add_decode_run(
        self,
        start_s: float,
        ends_s: Sequence[float] | FloatArray,
        num_decode_seqs: int,
        num_itl_first: int,
        num_itl_rest: int,
    ) -> None:
        """Log k decode-only steps back to back; the first starts at ``start_s``."""
        chunk = self._chunk
        total = len(ends_s)
        done = 0
        while done < total:
            if self._fill == CHUNK_ROWS:
                self._flush()
            i = self._fill
            take = min(total - done, CHUNK_ROWS - i)
            part = ends_s[done : done + take]
            chunk["end_s"][i : i + take] = part
            starts = chunk["start_s"]
            starts[i] = start_s if done == 0 else ends_s[done - 1]
            starts[i + 1 : i + take] = part[:-1]
            chunk["num_prefill_tokens"][i : i + take] = 0
            chunk["num_decode_seqs"][i : i + take] = num_decode_seqs
            chunk["num_itl_tokens"][i : i + take] = num_itl_rest
            if done == 0:
                chunk["num_itl_tokens"][i] = num_itl_first
            self._fill = i + take
            done += take
        self.num_rows += total
