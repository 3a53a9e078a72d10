"""Write the synthetic trace samples in scenarios/data/ (seeded: rerunning gives the same files).

Each sample has the columns and value styles of a public trace format but
its numbers are drawn here (nothing is downloaded): lognormal token counts,
gamma inter-arrival gaps, and for Mooncake, prompts that share system-prompt
blocks. Run from the repository root:

    python scenarios/data/make_trace_samples.py
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NUM_ROWS = 300


def lognormal_tokens(rng: np.random.Generator, median: float, sigma: float, cap: int) -> np.ndarray:
    """``NUM_ROWS`` whole token counts in ``[1, cap]``."""
    return np.clip(np.rint(rng.lognormal(np.log(median), sigma, NUM_ROWS)), 1, cap).astype(int)


def arrivals_s(rng: np.random.Generator, rate_per_s: float, burstiness: float) -> np.ndarray:
    """Gamma gaps with mean ``1 / rate_per_s`` (CV ``1 / sqrt(burstiness)``), first at 0."""
    gaps = rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), NUM_ROWS - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def azure(path: Path, start: dt.datetime, rng: np.random.Generator, code: bool, year: int) -> None:
    """Azure LLM inference trace style: TIMESTAMP,ContextTokens,GeneratedTokens."""
    times = arrivals_s(rng, 4.0 if code else 2.0, 0.5)
    prompt = lognormal_tokens(rng, 1500 if code else 1000, 0.9, 7000)
    output = lognormal_tokens(rng, 15 if code else 200, 1.0 if code else 0.8, 2000)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t, p, o in zip(times, prompt, output, strict=True):
        stamp = start + dt.timedelta(microseconds=round(t * 1e6))
        # 2023 files: 7 fraction digits, no zone; 2024 files: a +00:00 offset.
        text = stamp.strftime("%Y-%m-%d %H:%M:%S.%f") + ("0" if year == 2023 else "+00:00")
        lines.append(f"{text},{p},{o}")
    path.write_text("\n".join(lines) + "\n")


def burstgpt(path: Path, rng: np.random.Generator) -> None:
    """BurstGPT style, with a few failed (0 response tokens) rows as the real trace has."""
    times = np.floor(arrivals_s(rng, 1.0, 0.3))  # BurstGPT logs whole seconds
    prompt = lognormal_tokens(rng, 600, 1.1, 8000)
    output = lognormal_tokens(rng, 250, 0.9, 4000)
    output[rng.random(NUM_ROWS) < 0.03] = 0
    model = np.where(rng.random(NUM_ROWS) < 0.8, "ChatGPT", "GPT-4")
    log = np.where(rng.random(NUM_ROWS) < 0.7, "Conversation log", "API log")
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for row in zip(times, model, prompt, output, log, strict=True):
        t, m, p, o, kind = row
        lines.append(f"{t:.0f},{m},{p},{o},{p + o},{kind}")
    path.write_text("\n".join(lines) + "\n")


def mooncake(path: Path, rng: np.random.Generator) -> None:
    """Mooncake style: timestamp (ms), lengths, one hash id per 512-token block."""
    times_ms = np.rint(arrivals_s(rng, 2.0, 1.0) * 1e3).astype(int)
    system_blocks = [list(range(g * 100, g * 100 + n)) for g, n in enumerate((4, 8, 2))]
    next_id = 1000
    lines = []
    for t in times_ms:
        shared = system_blocks[rng.integers(len(system_blocks))] if rng.random() < 0.7 else []
        own = int(rng.integers(1, 6))
        ids = [*shared, *range(next_id, next_id + own)]
        next_id += own
        prompt = 512 * len(ids) - int(rng.integers(0, 512))  # the last block is partial
        output = int(np.clip(np.rint(rng.lognormal(np.log(150), 0.8)), 1, 2000))
        row = {"timestamp": int(t), "input_length": prompt, "output_length": output}
        lines.append(json.dumps({**row, "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")


def sharegpt(path: Path, rng: np.random.Generator) -> None:
    """ShareGPT-derived length pairs, as vllm bench serve's sharegpt dataset yields them."""
    prompt = lognormal_tokens(rng, 250, 1.2, 4000)
    output = lognormal_tokens(rng, 200, 1.0, 2000)
    rows = [
        {"input_len": int(p), "output_len": int(o)} for p, o in zip(prompt, output, strict=True)
    ]
    path.write_text("[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]\n")


def main() -> None:
    rng = np.random.default_rng(20251130)
    streams = rng.spawn(6)
    azure(
        HERE / "azure_code_2023_sample.csv",
        dt.datetime(2023, 11, 16, 18, 15),
        streams[0],
        True,
        2023,
    )
    azure(HERE / "azure_code_2024_sample.csv", dt.datetime(2024, 5, 12), streams[1], True, 2024)
    azure(HERE / "azure_conv_2024_sample.csv", dt.datetime(2024, 5, 12), streams[2], False, 2024)
    burstgpt(HERE / "burstgpt_sample.csv", streams[3])
    mooncake(HERE / "mooncake_sample.jsonl", streams[4])
    sharegpt(HERE / "sharegpt_lengths_sample.json", streams[5])


if __name__ == "__main__":
    main()
