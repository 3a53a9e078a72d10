"""A speculative step priced from its parts: verification, proposer by kind, its CPU
work, the rejection sampler; and what the parts do to a run's speed-up."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest

from sim import api
from sim.cli import main
from sim.cost.base import StepShape
from sim.cost.roofline import RooflineCost
from sim.cost.speculative import (
    DRAFT_BOOKKEEPING_S_PER_SEQ,
    NGRAM_CPU,
    PROPOSER_CPU_S_PER_PASS,
    eagle_head,
    speculative_step_cost,
)
from sim.engine.speculative import SpeculativeConfig, expected_tokens_per_step
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import scenario_from_dict

H100 = hardware_preset("h100")
LLAMA = model_preset("llama-3.1-8b")
TARGET = RooflineCost(LLAMA, H100)
# The H100 preset's effective memory bandwidth: 3.35 TB/s at 80 % (bytes / s).
BANDWIDTH = 3.35e12 * 0.8

# Llama-3.1-8B's decoder layer by hand: q and o 4096 x 4096, k and v 4096 x 1024
# (8 KV heads of 128), the gated MLP 3 x 4096 x 14336, two RMS norms.
LAYER_PARAMS = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


def test_an_eagle_head_is_one_layer_of_the_target_and_an_lm_head() -> None:
    # EAGLE: the target's 128,256-token LM head; EAGLE-3: a 32,000-token one;
    # the embedding is the target's (looked up), counted once with the LM head,
    # plus the final norm; bf16, 2 bytes a weight.
    eagle = eagle_head(LLAMA, "eagle")
    eagle3 = eagle_head(LLAMA, "eagle3")
    assert eagle.num_layers == eagle3.num_layers == 1
    assert eagle.weight_bytes == 2 * (LAYER_PARAMS + 128_256 * 4096 + 4096)
    assert eagle3.weight_bytes == 2 * (LAYER_PARAMS + 32_000 * 4096 + 4096)
    # Its KV: one layer's worth of the target's, 1/32 of it.
    assert eagle.kv_bytes_per_token * 32 == LLAMA.kv_bytes_per_token


def test_verification_grows_with_k_once_compute_bound_and_not_before() -> None:
    def verify_s(k: int, num_seqs: int) -> float:
        cost = speculative_step_cost(TARGET, LLAMA, H100, k, "ngram")
        shape = StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=num_seqs * 500)
        return cost.parts_s(shape).verify_s

    big = [verify_s(k, 128) for k in range(1, 8)]
    assert all(a < b for a, b in pairwise(big))
    # 128 sequences x 8 tokens = 1,024 tokens: 2 x 8.0e9 FLOPs each is 16 TFLOP
    # of dense work (plus attention) at 989 TFLOP/s x the preset's efficiency, far
    # above the 16 GB of weights at 2.68 TB/s (6 ms): compute-bound, so k = 7 costs
    # well over 1.5 times k = 1 (256 tokens).
    assert big[-1] > 1.5 * big[0]
    # One sequence: memory-bound, the weights read once whatever k (within 2 %).
    small = [verify_s(k, 1) for k in range(1, 8)]
    assert max(small) < 1.02 * min(small)


def test_ngram_proposes_on_the_cpu_only() -> None:
    cost = speculative_step_cost(TARGET, LLAMA, H100, 3, "ngram")
    parts = cost.parts_s(StepShape(num_decode_seqs=4, num_decode_context_tokens=2_000))
    assert parts.propose_gpu_s == 0.0
    # A call, 4 sequences and 2,000 context tokens (NgramCpu's measured line).
    ngram = NGRAM_CPU
    assert parts.propose_cpu_s == pytest.approx(
        ngram.per_step_s + 4 * ngram.per_seq_s + 2_000 * ngram.per_context_token_s
    )


def test_rejection_sampler_moves_three_fp32_passes_over_the_logits() -> None:
    cost = speculative_step_cost(TARGET, LLAMA, H100, 3, "eagle")
    parts = cost.parts_s(StepShape(num_decode_seqs=128, num_decode_context_tokens=128 * 600))
    # 128 sequences x 4 positions x 128,256 logits x 12 bytes over 2.68 TB/s = 0.294 ms.
    assert parts.rejection_s == pytest.approx(128 * 4 * 128_256 * 12 / BANDWIDTH)
    assert parts.rejection_s == pytest.approx(2.94e-4, rel=0.01)


def test_a_model_proposer_runs_k_passes_with_their_cpu_work() -> None:
    # One sequence, a short context: every pass is memory-bound, the head's weights
    # read once a pass, k = 3 passes, and 0.15 ms of CPU a pass.
    cost = speculative_step_cost(TARGET, LLAMA, H100, 3, "eagle")
    parts = cost.parts_s(StepShape(num_decode_seqs=1, num_decode_context_tokens=100))
    head_read_s = 2 * (LAYER_PARAMS + 128_256 * 4096 + 4096) / BANDWIDTH
    assert parts.propose_gpu_s == pytest.approx(3 * head_read_s, rel=0.01)
    assert parts.propose_cpu_s == pytest.approx(3 * PROPOSER_CPU_S_PER_PASS)
    assert PROPOSER_CPU_S_PER_PASS == 1.5e-4
    # vLLM's draft bookkeeping, one sequence's (measured).
    assert parts.bookkeeping_s == DRAFT_BOOKKEEPING_S_PER_SEQ
    assert parts.total_s == pytest.approx(
        parts.verify_s
        + parts.propose_gpu_s
        + parts.propose_cpu_s
        + parts.rejection_s
        + parts.bookkeeping_s
    )
    # A prefill-only step verifies nothing but runs the proposer after it, as vLLM
    # does (tests/test_speculative_prefill_propose.py): the target's step, the head's
    # passes over the prompt and their CPU work; no rejection sampler, no bookkeeping.
    prefill = StepShape.build(prefill_chunks=[(300, 0)])
    alone = cost.parts_s(prefill)
    assert alone.verify_s == TARGET.step_s(prefill)
    assert alone.propose_gpu_s > 0 and alone.rejection_s == alone.bookkeeping_s == 0.0
    assert alone.propose_cpu_s == pytest.approx(3 * PROPOSER_CPU_S_PER_PASS)
    assert cost.step_s(prefill) == pytest.approx(
        TARGET.step_s(prefill) + alone.propose_gpu_s + alone.propose_cpu_s
    )


def test_eagle3_head_is_cheaper_than_eagle_by_its_smaller_lm_head() -> None:
    shape = StepShape(num_decode_seqs=1, num_decode_context_tokens=100)
    eagle = speculative_step_cost(TARGET, LLAMA, H100, 3, "eagle").parts_s(shape)
    eagle3 = speculative_step_cost(TARGET, LLAMA, H100, 3, "eagle3").parts_s(shape)
    # 3 passes x (128,256 - 32,000) x 4096 weights x 2 bytes fewer read.
    saved_s = 3 * (128_256 - 32_000) * 4096 * 2 / BANDWIDTH
    assert eagle.propose_gpu_s - eagle3.propose_gpu_s == pytest.approx(saved_s, rel=0.01)


# -- configuration ---------------------------------------------------------------------------


def spec(**fields: Any) -> SpeculativeConfig:
    return SpeculativeConfig.model_validate(
        {"num_draft_tokens": 3, "acceptance_rate": 0.6, **fields}
    )


def test_method_names_the_proposer_as_vllm_does() -> None:
    assert spec(method="eagle").proposer == "eagle"
    assert spec(method="ngram").proposer == "ngram"
    assert spec(draft_model="smollm2-135m").proposer == "draft_model"
    assert spec(method="draft_model", draft_model="smollm2-135m").proposer == "draft_model"
    assert spec(draft_cost_fraction=0.1).proposer is None  # the scenario's own formula
    with pytest.raises(ValueError, match="needs a draft_model"):
        spec(method="draft_model")
    with pytest.raises(ValueError, match="takes neither"):
        spec(method="eagle3", draft_model="smollm2-135m")
    with pytest.raises(ValueError, match="takes neither"):
        spec(method="ngram", draft_cost_fraction=0.1)


# -- whole runs ------------------------------------------------------------------------------


def closed_loop(batch: int, speculative: dict[str, Any] | None) -> dict[str, Any]:
    """``batch`` users with no think time, short prompts, long outputs: decode-bound."""
    doc: dict[str, Any] = {
        "seed": 0,
        "model": "llama-3.1-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "engine": {
            "cpu": {
                "per_step_s": 0,
                "scheduler_per_seq_s": 0,
                "sampling_per_seq_s": 0,
                "per_token_s": 0,
                "non_overlapped_s": 0,
            }
        },
        "scheduler": {"kind": "continuous", "max_num_seqs": 256},
        "workload": {
            "kind": "closed_loop",
            "num_users": batch,
            "num_requests": 2 * batch,
            "think_time_s": {"kind": "fixed", "value_s": 0.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 16},
            "output_tokens": {"kind": "fixed", "tokens": 400},
        },
    }
    if speculative is not None:
        doc["speculative"] = speculative
    return doc


def speedup(batch: int, speculative: dict[str, Any]) -> float:
    on = api.run(scenario_from_dict(closed_loop(batch, speculative))).summary
    off = api.run(scenario_from_dict(closed_loop(batch, None))).summary
    return float(on["output_throughput"]) / float(off["output_throughput"])


def test_speedup_tends_to_one_minus_the_overhead_as_acceptance_tends_to_zero() -> None:
    # α = 0: a step emits one token, as plain decoding, and costs the verification
    # (memory-bound at batch 1: the plain step) plus the proposer and the sampler.
    # n-gram: one sequence's lookup over ~200 context tokens of CPU (NgramCpu), 4 x
    # 128,256 x 12 B of sampling, the engine's draft bookkeeping; the plain step
    # reads 16.06 GB of weights at 2.68 TB/s (6.0 ms).
    plain_s = LLAMA.weight_bytes / BANDWIDTH
    overhead_s = (
        NGRAM_CPU.cpu_s(1, 200) + 4 * 128_256 * 12 / BANDWIDTH + DRAFT_BOOKKEEPING_S_PER_SEQ
    )
    ngram = speedup(1, {"method": "ngram", "num_draft_tokens": 3, "acceptance_rate": 0.0})
    assert ngram < 0.999
    assert ngram == pytest.approx(plain_s / (plain_s + overhead_s), abs=2e-4)
    # An EAGLE head costs more to run for nothing: 3 passes of its 1.49 GB + CPU.
    eagle = speedup(1, {"method": "eagle", "num_draft_tokens": 3, "acceptance_rate": 0.0})
    head_s = 3 * eagle_head(LLAMA, "eagle").weight_bytes / BANDWIDTH + 3 * 1.5e-4
    assert eagle == pytest.approx(plain_s / (plain_s + head_s), abs=0.005)
    assert eagle < ngram


def test_low_load_speedup_is_e_times_the_plain_step_over_the_speculative_one() -> None:
    # Batch 1, memory-bound: E tokens a step for plain + 3 head passes + CPU.
    alpha = 0.65
    e = expected_tokens_per_step(3, alpha)
    plain_s = LLAMA.weight_bytes / BANDWIDTH
    head_s = 3 * eagle_head(LLAMA, "eagle").weight_bytes / BANDWIDTH + 3 * 1.5e-4
    measured = speedup(1, {"method": "eagle", "num_draft_tokens": 3, "acceptance_rate": alpha})
    assert measured == pytest.approx(e * plain_s / (plain_s + head_s), rel=0.01)


def test_speedup_shrinks_at_high_load_where_verification_is_compute_bound() -> None:
    eagle = {"method": "eagle", "num_draft_tokens": 3, "acceptance_rate": 0.65}
    low, high = speedup(1, eagle), speedup(128, eagle)
    assert high < low - 0.3


def test_a_bad_method_is_one_line_naming_the_field() -> None:
    doc = closed_loop(1, {"method": "medusa", "num_draft_tokens": 3, "acceptance_rate": 0.5})
    with pytest.raises(ConfigError, match=r"speculative\.method") as error:
        scenario_from_dict(doc)
    assert "\n" not in str(error.value)


# -- cost-breakdown ----------------------------------------------------------------------------


def test_cost_breakdown_shows_the_verification_and_each_part(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 8 decodes at 1,024 tokens under scenarios/speculative.yaml (k = 4, a
    # Llama-3.2-1B draft): the verification is 8 chunks of 5 tokens, then 4 draft
    # passes' CPU at 0.15 ms and 8 x 5 x 128,256 logits x 12 B of sampling.
    argv = ["cost-breakdown", "scenarios/speculative.yaml", "--step", "8d", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    parts = result["speculative_ms"]
    assert parts["proposer CPU"] == pytest.approx(4 * 0.15)
    assert parts["rejection sampler"] == pytest.approx(8 * 5 * 128_256 * 12 / BANDWIDTH * 1e3)
    (draft,) = (name for name in parts if name.startswith("proposer GPU"))
    assert "llama-3.2-1b" in draft and parts[draft] > 0
    assert "speculative(k=4" in result["cost_model"]
    # The roofline's split is the verification's: its memory time reads the 8B
    # weights once (16.06 GB at 2.68 TB/s, 6.0 ms) and the 8 contexts' KV.
    verify_ms = max(result["roofline_ms"].values()) + result["other_ms"]
    assert result["roofline_ms"]["memory"] == pytest.approx(6.0, rel=0.1)
    assert result["step_ms"] == pytest.approx(verify_ms + sum(parts.values()))
