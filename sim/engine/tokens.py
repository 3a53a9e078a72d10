"""Every output token's time, derived from the step log (never stored per token): a
request emits one token per step while uninterrupted, so a run of tokens is its
first token's step and how many tokens came before it."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import numpy.typing as npt


def token_times_s(
    step_ends_s: npt.NDArray[np.float64],
    first_token_s: float,
    num_generated_tokens: int,
    later_runs: list[tuple[float, int]] | None = None,
) -> npt.NDArray[np.float64]:
    """Engine times of a request's output tokens (s) from its replica's step ends;
    ``later_runs``: (first token time, tokens before) of each run after a break."""
    if num_generated_tokens == 0:
        return np.empty(0)
    runs = [(first_token_s, 0), *(later_runs or [])]
    counts = [b - a for (_, a), (_, b) in pairwise(runs)]
    counts.append(num_generated_tokens - runs[-1][1])
    parts = []
    for (start_time_s, _), count in zip(runs, counts, strict=True):
        first = _step_ending_at(step_ends_s, start_time_s)
        parts.append(step_ends_s[first : first + count])
    return np.concatenate(parts)


def _step_ending_at(step_ends_s: npt.NDArray[np.float64], time_s: float) -> int:
    """Index of the step that ends at ``time_s``, to float rounding (a time may have
    gone through ``+ d - d``)."""
    i = int(np.searchsorted(step_ends_s, time_s))
    candidates = [j for j in (i - 1, i) if 0 <= j < len(step_ends_s)]
    if candidates:
        best = min(candidates, key=lambda j: abs(step_ends_s[j] - time_s))
        if abs(step_ends_s[best] - time_s) <= 1e-9 * max(1.0, abs(time_s)):
            return best
    raise ValueError(f"no step ends at {time_s!r}: wrong step log?")
