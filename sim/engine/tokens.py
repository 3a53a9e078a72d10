"""Every output token's time, derived from the step log (never stored per token).

A request emits one token per step while it runs uninterrupted, so a run of
tokens is fully described by the step that emitted its first token (found by
its time in the step log) and how many tokens came before it.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import numpy.typing as npt


def token_times_s(
    step_ends_s: npt.NDArray[np.float64],
    first_token_s: float,
    num_generated_tokens: int,
    later_runs: list[tuple[float, int]] | None = None,
    detokenize_s: float = 0.0,
) -> npt.NDArray[np.float64]:
    """Times of a request's output tokens, in seconds.

    ``first_token_s`` is the engine time of the first token (without the
    detokenization delay), ``later_runs`` the (first token time, tokens before)
    of each run after a preemption, ``step_ends_s`` its replica's step ends.
    """
    if num_generated_tokens == 0:
        return np.empty(0)
    runs = [(first_token_s, 0), *(later_runs or [])]
    counts = [b - a for (_, a), (_, b) in pairwise(runs)]
    counts.append(num_generated_tokens - runs[-1][1])
    parts = []
    for (start_time_s, _), count in zip(runs, counts, strict=True):
        first = _step_ending_at(step_ends_s, start_time_s)
        parts.append(step_ends_s[first : first + count])
    return np.concatenate(parts) + detokenize_s


def _step_ending_at(step_ends_s: npt.NDArray[np.float64], time_s: float) -> int:
    """Index of the step that ends at ``time_s``.

    Matched to float rounding: callers may pass a time that went through
    ``+ d - d`` (e.g. a detokenization delay added and removed).
    """
    i = int(np.searchsorted(step_ends_s, time_s))
    candidates = [j for j in (i - 1, i) if 0 <= j < len(step_ends_s)]
    if candidates:
        best = min(candidates, key=lambda j: abs(step_ends_s[j] - time_s))
        if abs(step_ends_s[best] - time_s) <= 1e-9 * max(1.0, abs(time_s)):
            return best
    raise ValueError(f"no step ends at {time_s!r}: wrong step log?")
