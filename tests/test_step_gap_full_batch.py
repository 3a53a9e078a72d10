"""``benchmarks/step_gap.py``'s full-batch stretch: a run's stat log against its replay's steps."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from benchmark_module import load_benchmark

STEP_GAP = load_benchmark("step_gap")


def test_the_full_decode_stretch_is_priced_from_both_logs(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    # Ticks of 1 s: ramp (prompts), then 6 s with all 4 sequences decoding and no
    # prompt tokens, 80 tokens a second: 20 steps a second, 50 ms a step.
    ticks = pd.DataFrame(
        {
            "t": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
            "prompt_throughput": [500.0, 300.0, 0, 0, 0, 0, 0, 0, 200.0],
            "gen_throughput": [4.0, 20.0, 80.0, 80.0, 80.0, 80.0, 80.0, 80.0, 40.0],
            "running": [2, 4, 4, 4, 4, 4, 4, 4, 4],
            "waiting": [0] * 9,
            "kv_cache_pct": [0.0] * 9,
        }
    )
    ticks.to_csv(tmp_path / "vllm" / "timeseries.csv", index=False)
    # The replay: decode-only steps of 4 in the stretch (t = 2..8 s from its first
    # step) take 40 and 60 ms; a prefill step and one outside the stretch do not count.
    steps = pd.DataFrame(
        {
            "start_s": [10.0, 12.5, 13.0, 13.5, 19.5],
            "end_s": [10.2, 12.54, 13.06, 13.6, 19.6],
            "num_prefill_tokens": [100, 0, 0, 50, 0],
            "num_decode_seqs": [0, 4, 4, 3, 4],
        }
    )
    measured_ms, predicted_ms = STEP_GAP.full_decode_steps_ms(tmp_path, steps)
    assert measured_ms == pytest.approx(4 * 6 / 480 * 1e3)  # 50 ms
    assert predicted_ms == pytest.approx((40.0 + 60.0) / 2)


class _RecordingCost:
    """A step of n decodes costs 10 ms + 1 ms per decode; keeps the shapes it priced."""

    def __init__(self) -> None:
        self.shapes: list = []

    def step_s(self, shape) -> float:  # type: ignore[no-untyped-def]
        self.shapes.append(shape)
        return 0.010 + 0.001 * shape.num_decode_seqs


def test_decode_ticks_are_priced_at_the_sequences_running_then(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    # Ticks of 1 s; the first has prompt tokens (left out). A decodes from 0.5 s to
    # 4.0 s (70 steps of 50 ms after its first token), B from 0.5 s to 2.5 s (40).
    # Tick (1, 2]: both run throughout: 40 tokens in 2 sequence-seconds, 50 ms a step.
    # Tick (2, 3]: B finishes mid-tick: 20 + 10 tokens in 1.5 sequence-seconds, 50 ms.
    # Tick (3, 4]: A alone, 20 tokens, 50 ms.
    ticks = pd.DataFrame(
        {
            "t": [1.0, 2.0, 3.0, 4.0],
            "prompt_throughput": [300.0, 0, 0, 0],
            "gen_throughput": [10.0, 40.0, 30.0, 20.0],
            "running": [2, 2, 1, 1],
            "waiting": [0] * 4,
            "kv_cache_pct": [0.0] * 4,
        }
    )
    ticks.to_csv(tmp_path / "vllm" / "timeseries.csv", index=False)
    requests = pd.DataFrame(
        {
            "first_token_s": [0.5, 0.5],
            "finish_s": [4.0, 2.5],
            "num_output_tokens": [71, 41],
            "num_prompt_tokens": [100, 300],
        }
    )
    cost = _RecordingCost()
    table = STEP_GAP.decode_ticks(tmp_path, requests, cost)
    assert table["num_seqs"].tolist() == [2, 1, 1]  # at each tick's middle
    assert table["measured_ms"].tolist() == pytest.approx([50.0, 50.0, 50.0])
    assert table["predicted_ms"].tolist() == pytest.approx([12.0, 11.0, 11.0])
    # Contexts: the prompt, the first token and one token a step since it (at 1.5 s:
    # 20 steps of 50 ms after 0.5 s).
    first = cost.shapes[0]
    assert first.num_decode_context_tokens == (100 + 1 + 20) + (300 + 1 + 20)
    by_batch = STEP_GAP.gap_by_batch(table)
    assert by_batch["num_ticks"].tolist() == [2, 1]  # one sequence, then 2-16
    assert by_batch["gap_ms"].tolist() == pytest.approx([39.0, 38.0])
