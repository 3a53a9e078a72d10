"""vLLM's extra engine CPU work under speculative decoding, priced per drafting sequence.

Measured from vLLM 0.19.0's own code (``benchmarks/vllm_spec_scheduler_cpu.py``): its
scheduler scheduling each sequence's drafts, rolling back the rejected ones and taking
the next, and its runner parsing the rejection sampler's output, cost this CPU about
3.5 µs a sequence and step more than plain decoding.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cost.base import StepShape
from sim.cost.roofline import RooflineCost
from sim.cost.speculative import PROPOSER_CPU_S_PER_PASS, speculative_step_cost
from sim.hardware.specs import hardware_preset, model_preset

H100 = hardware_preset("h100")
LLAMA = model_preset("llama-3.1-8b")
TARGET = RooflineCost(LLAMA, H100)
MEASURED = json.loads(
    (
        Path(__file__).resolve().parents[1]
        / "docs/validation/vllm-spec-scheduler-cpu/vllm-0.19.0.json"
    ).read_text()
)
SLOPE_S = MEASURED["extra_us_per_seq"] * 1e-6  # the measured OLS slope, s a sequence
# The H100 preset's effective memory bandwidth: 3.35 TB/s at 80 % (bytes / s).
BANDWIDTH = 3.35e12 * 0.8


@pytest.mark.parametrize("num_seqs", [1, 32, 128])
def test_an_eagle_step_pays_the_draft_bookkeeping_per_sequence(num_seqs: int) -> None:
    # The step less its other parts, each priced by hand or by its own model: the
    # verification (the target over k + 1 tokens a sequence, with its LM head at all
    # of them), the head's passes, 3 passes of CPU, the rejection sampler's 3 x 4 B a
    # logit over (k + 1) x vocab.
    cost = speculative_step_cost(TARGET, LLAMA, H100, 3, "eagle")
    context = num_seqs * 600
    shape = StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=context)
    verify = cost.verify_shape(shape)
    others_s = (
        sum(TARGET.step_and_rows_s(verify, 3 * num_seqs))
        + cost.draft_s(shape)
        + 3 * PROPOSER_CPU_S_PER_PASS
        + 12 * num_seqs * 4 * 128_256 / BANDWIDTH
    )
    # Rounded to 2 digits in the code: within 2 % of the measured slope.
    assert cost.step_s(shape) - others_s == pytest.approx(num_seqs * SLOPE_S, rel=0.02)


def test_a_decode_without_drafts_has_no_draft_bookkeeping() -> None:
    # n-gram misses are one-token chunks: no drafts scheduled, none to roll back.
    cost = speculative_step_cost(TARGET, LLAMA, H100, 3, "ngram")
    missed = StepShape.build([(1, 599)] * 8, [])
    parts = cost.parts_s(missed)
    assert cost.step_s(missed) == pytest.approx(TARGET.step_s(missed) + parts.propose_cpu_s)
