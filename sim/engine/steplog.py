"""The step log: one row per engine step.

Every token time and inter-token gap is derived from it (``sim.engine.tokens``), so
nothing is stored per token. A skip-ahead run of k decode steps is written
with one bulk append per column.
"""

from __future__ import annotations

from sim.engine.columns import Columns

STEP_COLUMNS = {
    "start_s": "f8",
    "end_s": "f8",
    "num_prefill_tokens": "i4",
    "num_decode_seqs": "i4",
    "num_itl_tokens": "i4",
    "num_outputs": "i4",
}


class StepLog(Columns):
    """``start_s``, ``end_s`` and token counts of each step, in order.

    ``num_itl_tokens`` counts the tokens emitted in the step by requests that
    also emitted one in the step before: each such token is one inter-token
    gap equal to the step's duration (a decoding request never sees the
    engine idle). ``num_outputs`` counts the requests that got output in the
    step (a token, or several with speculation): the frontend's work for the
    step (``sim.serving.frontend``).
    """

    def __init__(self) -> None:
        super().__init__(STEP_COLUMNS)
        c = self.columns
        self._start, self._end = c["start_s"], c["end_s"]
        self._prefill, self._decode, self._itl, self._outputs = (
            c["num_prefill_tokens"],
            c["num_decode_seqs"],
            c["num_itl_tokens"],
            c["num_outputs"],
        )

    def add_step(
        self,
        start_s: float,
        end_s: float,
        num_prefill_tokens: int,
        num_decode_seqs: int,
        num_itl_tokens: int,
        num_outputs: int,
    ) -> None:
        """Log one step (direct appends: this runs once per event)."""
        self._start.append(start_s)
        self._end.append(end_s)
        self._prefill.append(num_prefill_tokens)
        self._decode.append(num_decode_seqs)
        self._itl.append(num_itl_tokens)
        self._outputs.append(num_outputs)

    def add_decode_run(
        self,
        start_s: float,
        ends_s: list[float],
        num_decode_seqs: int,
        num_itl_tokens: int,
    ) -> None:
        """Log k decode-only steps back to back; the first starts at ``start_s``.

        Every request of the run continues its tokens in each of them, so it
        is both an inter-token gap and an output.
        """
        count = len(ends_s)
        self._start.append(start_s)
        self._start.extend(ends_s[:-1])
        self._end.extend(ends_s)
        self._prefill.extend(bytes(count))  # zeros
        self._decode.extend([num_decode_seqs] * count)
        self._itl.extend([num_itl_tokens] * count)
        self._outputs.extend([num_itl_tokens] * count)
