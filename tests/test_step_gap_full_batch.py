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
