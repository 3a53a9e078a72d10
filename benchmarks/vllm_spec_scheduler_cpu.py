"""The CPU time of vLLM's own v1 scheduler and output parsing per step under speculative
decoding, by batch.

    <vllm venv>/bin/python benchmarks/vllm_spec_scheduler_cpu.py [--batches 1,16,32,64,128]

Runs in a vLLM venv and imports nothing from ``sim``. As
``benchmarks/vllm_scheduler_cpu.py`` (the same scheduler, built by
``vllm_oracle_driver``), but every running sequence decodes speculatively:
``num_speculative_tokens`` k drafts a step, accepted on a fixed schedule that
averages ``E`` tokens a step (the golden-ratio schedule of
``sim.engine.speculative``; default E = 2.26, EAGLE on ShareGPT in
SpecDecode-Bench). Times the engine core's three scheduler calls per step
under speculation, ``schedule()`` (the drafts scheduled as
``scheduled_spec_decode_tokens``), ``update_from_output()`` (several tokens a
request, the rejected drafts rolled back) and ``update_draft_token_ids()``
(the next drafts handed over), and the GPU model runner's CPU side of the
rejection sampler's output, ``RejectionSampler.parse_output`` (a
``[batch, k + 1]`` tensor of kept tokens and placeholders into lists, a
request at a time), beside the plain two scheduler calls and the plain
runner's ``tolist()`` of its ``[batch, 1]`` sampled tokens over the same batch
(k = 0). The GPU-to-host copies before them are not timed (no GPU here). The
speculative setting is made on the built scheduler
(``num_spec_tokens``, ``num_lookahead_tokens``, ``use_eagle``: what its
constructor reads from a ``SpeculativeConfig``, which needs a draft model's
config to build). Prints the median µs per step of each and the OLS slope of
the difference per running sequence: the engine's speculative bookkeeping
per sequence on this CPU that runs without a GPU. Thread CPU time, as the
plain script.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import vllm_oracle_driver as driver
from vllm.v1.outputs import DraftTokenIds
from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID, RejectionSampler
from vllm_scheduler_cpu import add_decoding_requests, ols, spec_for

GOLDEN_FRACTION = (math.sqrt(5.0) - 1.0) / 2.0


def fabricate(scheduler: Any, out: Any, step: int, expected: float) -> Any:
    """One token per request plus its accepted drafts (the schedule averaging ``expected``)."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in req_ids:
        request = scheduler.requests[rid]
        if request.num_computed_tokens < request.num_tokens:
            sampled.append([])  # a partial prefill chunk
            continue
        drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
        phase = (int(rid) * GOLDEN_FRACTION) % 1.0
        emitted = math.floor(phase + (step + 1) * expected) - math.floor(phase + step * expected)
        sampled.append([20_000_000 + int(rid)] * min(emitted, drafts + 1))
    return driver.runner_output(req_ids, sampled)


def step_us(
    num_seqs: int, num_draft_tokens: int, expected: float, num_steps: int, num_warm_steps: int
) -> list[float]:
    """Microseconds of each timed step with ``num_seqs`` sequences decoding."""
    scheduler, hasher = driver.build(spec_for(num_seqs))
    if num_draft_tokens:
        scheduler.num_spec_tokens = num_draft_tokens
        scheduler.num_lookahead_tokens = num_draft_tokens
        scheduler.use_eagle = True
    add_decoding_requests(scheduler, hasher, num_seqs)
    drafts = [7] * num_draft_tokens
    out_us = []
    for step in range(num_warm_steps + num_steps):
        start = time.thread_time()
        out = scheduler.schedule()
        middle = time.thread_time()
        output = fabricate(scheduler, out, step, expected)  # the model's: not timed
        resumed = time.thread_time()
        scheduler.update_from_output(out, output)
        if num_draft_tokens:
            req_ids = list(out.num_scheduled_tokens)
            scheduler.update_draft_token_ids(DraftTokenIds(req_ids, [drafts] * len(req_ids)))
        end = time.thread_time()
        # The sampler's output as the runner gets it (built untimed), then parsed (timed).
        width = num_draft_tokens + 1
        rows = [
            tokens + [PLACEHOLDER_TOKEN_ID] * (width - len(tokens))
            for tokens in output.sampled_token_ids
        ]
        sampled = torch.tensor(rows, dtype=torch.int32)
        parse_start = time.thread_time()
        if num_draft_tokens:
            RejectionSampler.parse_output(sampled, 32_000)
        else:
            sampled.tolist()
        parse_end = time.thread_time()
        if step >= num_warm_steps:
            spec = out.scheduled_spec_decode_tokens
            if len(out.num_scheduled_tokens) != num_seqs or (
                num_draft_tokens and len(spec) != num_seqs
            ):
                raise RuntimeError(f"step {step}: not all {num_seqs} sequences decoding")
            out_us.append(((middle - start) + (end - resumed) + (parse_end - parse_start)) * 1e6)
    return out_us


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16,32,64,128")
    parser.add_argument("--num-draft-tokens", type=int, default=3)
    parser.add_argument("--expected-tokens", type=float, default=2.26)
    parser.add_argument("--steps", type=int, default=150, help="timed steps per batch")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for n in batches:
        plain = statistics.median(step_us(n, 0, 1.0, args.steps, num_warm_steps=5))
        spec = statistics.median(
            step_us(n, args.num_draft_tokens, args.expected_tokens, args.steps, num_warm_steps=5)
        )
        rows.append({"batch": n, "plain_us": plain, "speculative_us": spec})
        print(f"{n:5d} running: plain {plain:9.1f} us, speculative {spec:9.1f} us a step")
    xs = [float(b) for b in batches]
    fits = {
        name: ols(xs, [row[key] for row in rows])
        for name, key in (("plain", "plain_us"), ("speculative", "speculative_us"))
    }
    extra = ols(xs, [row["speculative_us"] - row["plain_us"] for row in rows])
    for name, (intercept, slope, se) in fits.items():
        print(f"{name}: {slope:.2f} +- {se:.2f} us a sequence, intercept {intercept:.1f} us")
    print(
        f"vllm {driver.vllm.__version__}, k = {args.num_draft_tokens}, E = "
        f"{args.expected_tokens}: speculation adds {extra[1]:.2f} +- {extra[2]:.2f} us a "
        f"sequence (OLS slope, 1 s.e.), intercept {extra[0]:.1f} us"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "vllm_version": driver.vllm.__version__,
                    "num_draft_tokens": args.num_draft_tokens,
                    "expected_tokens_per_step": args.expected_tokens,
                    "rows": rows,
                    "extra_us_per_seq": extra[1],
                    "extra_se_us": extra[2],
                    "extra_intercept_us": extra[0],
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
