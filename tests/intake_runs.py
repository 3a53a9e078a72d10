"""A two-request LLMServingSim vLLM run whose second request is stamped mid-step,
and the scenario that replays it (``tests/test_validate_intake.py``,
``tests/test_fit_intake.py``: ``validate`` and ``calibrate --from-run`` count from
the engine's intake by the same rule)."""

from __future__ import annotations

import json
from pathlib import Path

STEP_S = 0.05  # every step's price (linear cost: the overhead alone)
# Request B's stamp, during the replay's second step (0.05-0.10 s): the engine
# takes it in at the next step start, 0.10 s.
STAMP_B_S = 0.07


def run_folder(folder: Path) -> Path:
    """An LLMServingSim vLLM run of two requests, as vLLM would have served them on
    the replay's engine (each TTFT counted from its intake: A one step, B two)."""
    folder.mkdir()
    rows = [
        # A: taken in at once by the idle engine, prefilled in step 1 (0-0.05 s).
        {"input_toks": 100, "output_toks": 10, "queued_ts": 0.0, "scheduled_ts": 0.0,
         "first_token_ts": STEP_S, "last_token_ts": 10 * STEP_S},
        # B: stamped at 0.07 s; two steps from its intake to its first token.
        {"input_toks": 100, "output_toks": 5, "queued_ts": STAMP_B_S,
         "scheduled_ts": 3 * STEP_S, "first_token_ts": STAMP_B_S + 2 * STEP_S,
         "last_token_ts": STAMP_B_S + 6 * STEP_S},
    ]  # fmt: skip
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (folder / "requests.jsonl").write_text(text)
    (folder / "meta.json").write_text(json.dumps({"model": "llama-3-8b"}))
    return folder


def scenario_doc(trace: Path | str) -> dict[str, object]:
    """A scenario replaying ``trace`` on an engine whose every step costs ``STEP_S``,
    with no way in or out (the run's latencies are the engine's alone)."""
    zero = {"way_in_s_per_request": 0, "tokenize_s_per_token": 0,
            "detokenize_s_per_token": 0, "output_step_s": 0}  # fmt: skip
    return {
        "name": "intake",
        "seed": 0,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "linear", "step_overhead_s": STEP_S},
        "scheduler": {"kind": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 2048},
        "engine": {"vllm_version": "0.19.0"},  # async scheduling, as the public runs
        "frontend": zero,
        "workload": {"kind": "trace", "format": "csv", "path": str(trace)},
    }
