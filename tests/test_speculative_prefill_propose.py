"""A model proposer runs after every step, a prefill-only one too, as vLLM 0.19 runs it.

vLLM 0.19.0's ``GPUModelRunner.sample_tokens`` (``vllm/v1/worker/gpu_model_runner.py``,
lines 4203-4224 of the wheel) calls ``propose_draft_token_ids`` for EAGLE and the
draft model whenever the step fits the drafter's length, whatever the step
scheduled; ``SpecDecodeBaseProposer.propose`` (``vllm/v1/spec_decode/eagle.py``,
lines 384-483) runs its first pass over every token the target computed (a prompt's
chunk included: ``set_inputs_first_pass``, lines 648-680, shifts the target's tokens by
one) and ``k - 1`` one-token passes over every request of the batch. So the step
whose prefill completes drafts the request's first ``k`` tokens, which its first
decode step verifies, and a chunk that does not complete its prompt is run too (its
drafts discarded: ``discard_request_mask``). Before, servesim priced the proposer on
decoding sequences only: a request's first step cost the target's alone.

Behaviour, not golden numbers: a one-request run's prefill step lasts the plain
run's plus the proposer's parts of that step's shape (``SpeculativeCost.parts_s``),
and so does its TTFT; a proposer without a model (n-gram) or a scenario's
``draft_cost_fraction`` formula (which drafts for decodes only) adds no GPU work to it.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim import api
from sim.cost.base import StepShape
from sim.cost.roofline import RooflineCost
from sim.cost.speculative import eagle_head, speculative_step_cost
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import scenario_from_dict

LLAMA = model_preset("llama-3-8b")
H100 = hardware_preset("h100")
EAGLE = {"num_draft_tokens": 3, "acceptance_rate": 0.7, "method": "eagle"}


def one_request(prompt_tokens: int, speculative: dict[str, Any] | None) -> api.Result:
    """One request of ``prompt_tokens`` and 8 output tokens, alone on an H100 roofline
    (chunks of at most 2,048 tokens), scheduled synchronously."""
    doc: dict[str, Any] = {
        "seed": 0,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "scheduler": {"kind": "continuous", "max_num_batched_tokens": 2048},
        # Speculation runs synchronously (vLLM's, servesim's): the plain run too, so
        # the two differ by the proposer alone, not by the engine's CPU work hidden.
        "engine": {"async_scheduling": False},
        "workload": {
            "kind": "synthetic",
            "num_requests": 1,
            "arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"kind": "uniform", "min_tokens": prompt_tokens,
                              "max_tokens": prompt_tokens},
            "output_tokens": {"kind": "uniform", "min_tokens": 8, "max_tokens": 8},
        },
    }  # fmt: skip
    if speculative is not None:
        doc["speculative"] = speculative
    return api.run(scenario_from_dict(doc))


def step_durations_s(result: api.Result) -> list[float]:
    steps = result.steps
    return (steps["end_s"] - steps["start_s"]).tolist()


def proposer_s(shape: StepShape, method: str = "eagle") -> float:
    """The proposer's GPU passes and CPU work after a step of ``shape`` (k = 3)."""
    cost = speculative_step_cost(RooflineCost(LLAMA, H100), LLAMA, H100, 3, method)  # type: ignore[arg-type]
    parts = cost.parts_s(shape)
    return parts.propose_gpu_s + parts.propose_cpu_s


def test_the_step_that_completes_a_prefill_pays_the_proposer() -> None:
    """Seen failing on main: the prefill step cost the plain one to the bit."""
    plain, eagle = one_request(300, None), one_request(300, EAGLE)
    first_plain, first_eagle = step_durations_s(plain)[0], step_durations_s(eagle)[0]
    added = proposer_s(StepShape.build([(300, 0)]))
    assert added > 0
    assert first_eagle - first_plain == pytest.approx(added, rel=1e-9)
    # The first token comes at that step's end: TTFT carries the proposer too.
    ttft = (eagle.requests["ttft_s"] - plain.requests["ttft_s"]).iloc[0]
    assert ttft == pytest.approx(added, rel=1e-9)


def test_a_chunk_that_does_not_finish_its_prompt_runs_the_proposer_too() -> None:
    # 3,000 tokens in chunks of 2,048 and 952: vLLM runs the proposer after both.
    plain, eagle = one_request(3000, None), one_request(3000, EAGLE)
    prefills = zip(step_durations_s(plain)[:2], step_durations_s(eagle)[:2], strict=True)
    extra = [b - a for a, b in prefills]
    assert extra[0] == pytest.approx(proposer_s(StepShape.build([(2048, 0)])), rel=1e-9)
    assert extra[1] == pytest.approx(proposer_s(StepShape.build([(952, 2048)])), rel=1e-9)
    # A longer chunk is more work for the head's first pass.
    assert extra[0] > extra[1] > 0


def test_a_draft_model_prefills_the_prompt_too() -> None:
    # vLLM's DraftModelProposer shares SpecDecodeBaseProposer.propose with EAGLE.
    draft = {"num_draft_tokens": 3, "acceptance_rate": 0.7, "draft_model": "smollm2-135m"}
    plain = step_durations_s(one_request(300, None))[0]
    model = step_durations_s(one_request(300, draft))[0]
    cost = speculative_step_cost(
        RooflineCost(LLAMA, H100), LLAMA, H100, 3, "draft_model", model_preset("smollm2-135m")
    )
    parts = cost.parts_s(StepShape.build([(300, 0)]))
    assert parts.propose_gpu_s > 0
    assert model - plain == pytest.approx(parts.propose_gpu_s + parts.propose_cpu_s, rel=1e-9)


def test_no_model_proposer_no_gpu_work_after_a_prefill() -> None:
    plain = step_durations_s(one_request(300, None))[0]
    formula = {"num_draft_tokens": 3, "acceptance_rate": 0.7, "draft_cost_fraction": 0.1}
    assert step_durations_s(one_request(300, formula))[0] == plain
    ngram = speculative_step_cost(RooflineCost(LLAMA, H100), LLAMA, H100, 3, "ngram")
    parts = ngram.parts_s(StepShape.build([(300, 0)]))
    assert parts.propose_gpu_s == parts.rejection_s == parts.bookkeeping_s == 0.0
    # Nothing scheduled, nothing proposed.
    assert proposer_s(StepShape()) == 0.0


def test_a_mixed_step_runs_the_proposer_over_its_prefill_and_its_decodes() -> None:
    decodes = StepShape.build([], [600] * 4)
    mixed = StepShape.build([(512, 0)], [600] * 4)
    prefill = StepShape.build([(512, 0)])
    assert proposer_s(mixed) > proposer_s(decodes)
    assert proposer_s(mixed) > proposer_s(prefill)


def test_the_first_pass_computes_logits_at_one_position_a_request() -> None:
    """vLLM's first proposer pass runs the head's layer over every token but its LM
    head at ``token_indices_to_sample`` only (one position a request, eagle.py
    ``SpecDecodeBaseProposer.propose``). Seen failing when the roofline priced the LM
    head (hidden 4096 x vocab 128256) at every token: 3.4 times this pass."""
    cost = speculative_step_cost(RooflineCost(LLAMA, H100), LLAMA, H100, 1, "eagle")
    head = eagle_head(LLAMA, "eagle")
    lm_head = 2.0 * 4096 * 128256
    layers = head.dense_flops_per_token - lm_head
    # Two prompts' chunks of 2,048 tokens, attention left out: compute-bound.
    shape = StepShape(num_prefill_seqs=2, num_prefill_tokens=4096, prefill_kv_read_tokens=4096)
    compute_s = (4096 * layers + 2 * lm_head) / H100.effective_flops_per_s
    memory_s = (head.weight_bytes + 2 * 4096 * head.kv_bytes_per_token) / (
        H100.effective_bytes_per_s
    )
    assert compute_s > memory_s
    assert cost.draft_s(shape) == pytest.approx(compute_s, rel=1e-12)
