"""ITL gaps from a step log with delivery times, by hand: which gaps count.

A token sees the gap between its step's delivery and the step before's. Two
steps delivered in one chunk (the same ``delivered_s``) give no gap (``vllm bench
serve`` records one ITL per chunk), and a step whose tokens are all first tokens
(``num_itl_tokens`` 0) gives none either.
"""

from __future__ import annotations

import pandas as pd
from frontend_frames import step_table

from sim.metrics.itl import itl_distribution, step_itl_gaps_s


def frame(delivered_s: list[float], itl_tokens: list[int]) -> pd.DataFrame:
    ends = [0.25 * (i + 1) for i in range(len(delivered_s))]
    return pd.DataFrame(
        {
            "start_s": [e - 0.25 for e in ends],
            "end_s": ends,
            "num_itl_tokens": itl_tokens,
            "delivered_s": delivered_s,
        }
    )


def test_gaps_between_deliveries_skip_shared_chunks_and_first_tokens() -> None:
    # Deliveries 1.0, 1.5, 1.5 (same chunk), 2.5, 3.0; tokens seeing a gap 0, 2, 2, 2, 0.
    steps = step_table(frame([1.0, 1.5, 1.5, 2.5, 3.0], [0, 2, 2, 2, 0]))
    gaps, weights = step_itl_gaps_s(steps)
    # Step 1: 0.5 s (2 tokens); step 2: no gap (one chunk with step 1); step 3: 1.0 s;
    # step 4: 0.5 s but no token sees it.
    assert gaps.tolist() == [0.5, 1.0]
    assert weights.tolist() == [2.0, 2.0]


def test_extra_gaps_count_once_each() -> None:
    steps = step_table(frame([1.0, 1.5], [0, 3]))
    gaps, weights = step_itl_gaps_s(steps, [0.125, 2.0])
    assert gaps.tolist() == [0.5, 0.125, 2.0]
    assert weights.tolist() == [3.0, 1.0, 1.0]
    # Mean over tokens: (3 x 500 + 125 + 2000) / 5 ms.
    assert itl_distribution(steps, [0.125, 2.0])["mean_itl_ms"] == (1500 + 125 + 2000) / 5


def test_without_delivery_times_each_steps_duration_is_its_gap() -> None:
    steps = step_table(frame([1.0, 1.5, 1.5], [0, 1, 4]).drop(columns="delivered_s"))
    gaps, weights = step_itl_gaps_s(steps)
    assert gaps.tolist() == [0.25, 0.25] and weights.tolist() == [1.0, 4.0]
