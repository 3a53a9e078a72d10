"""A verification computes logits at every one of a drafting sequence's ``k + 1``
positions (vLLM 0.19 ``_calc_spec_decode_metadata``), where its step shape says one
LM-head row a sequence: ``SpeculativeCost.verify_s`` adds the ``k`` more rows, priced
by the target's own route (docs/speculative.md, "The parts of a step")."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.api.build import cost_model_for
from sim.cost.base import StepShape
from sim.cost.collectives import collective_s
from sim.cost.config import AutoCostConfig, build_cost_model
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.roofline import RooflineCost
from sim.cost.speculative import speculative_step_cost
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import hardware_preset, load_architecture, model_preset
from sim.scenario import load_scenario

H100 = hardware_preset("h100")
LLAMA = model_preset("llama-3.1-8b")
PROFILE = Path(__file__).parent / "data" / "kernels" / "profile" / "bf16" / "tp1"
PUBLIC = Path(__file__).parents[1] / "scenarios" / "public"


def _decodes(num_seqs: int) -> StepShape:
    return StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=num_seqs * 500)


def _extra_s(target: object, k: int, shape: StepShape) -> float:
    """What a verification costs beyond its shape's one LM-head row a sequence."""
    cost = speculative_step_cost(target, LLAMA, H100, k, "ngram")  # type: ignore[arg-type]
    return cost.parts_s(shape).verify_s - cost.target.step_s(cost.verify_shape(shape))


@pytest.mark.parametrize("k", [3, 7])
def test_a_compute_bound_verification_adds_the_lm_head_flops_of_k_rows(k: int) -> None:
    # 128 sequences x (k + 1) tokens, compute-bound from k = 3 (512 tokens): the
    # k x 128 more rows' 2 x hidden x vocab FLOPs at the preset's effective peak.
    shape = _decodes(128)
    rows = k * 128
    flops = rows * 2 * LLAMA.hidden_size * LLAMA.vocab_size
    expected = flops / (H100.peak_flops_per_s * H100.compute_efficiency)
    target = RooflineCost(LLAMA, H100)
    assert _extra_s(target, k, shape) == pytest.approx(expected, rel=1e-9)
    # And no draft, no extra row (a verification of 0 drafts is the plain decode).
    assert _extra_s(target, 0, shape) == 0.0
    # Through the engine's CPU work the same (serial: added to the GPU's step).
    cpu = EngineCpu(
        EngineCpuConfig(
            per_step_s=1e-4,
            scheduler_per_seq_s=2e-6,
            sampling_per_seq_s=1e-6,
            per_token_s=1e-8,
            non_overlapped_s=0.0,
        ),
        async_scheduling=False,
        source="test",
    )
    assert _extra_s(EngineCpuCost(target, cpu), k, shape) == pytest.approx(expected, rel=1e-9)


def test_a_memory_bound_verification_hides_the_extra_rows() -> None:
    # One sequence, 4 tokens: the weights' read (16 GB at 2.68 TB/s, ~6 ms) dwarfs
    # 3 rows' 3 GFLOP, which the roofline's max hides.
    assert _extra_s(RooflineCost(LLAMA, H100), 3, _decodes(1)) == 0.0


def test_a_tensor_parallel_verification_adds_a_gpus_share() -> None:
    # tp 2, one micro-batch: each GPU computes half the rows' FLOPs.
    target = RooflineCost(LLAMA, H100, ParallelismConfig(tensor_parallel_size=2))
    flops = 3 * 128 * 2 * LLAMA.hidden_size * LLAMA.vocab_size / 2
    expected = flops / (H100.peak_flops_per_s * H100.compute_efficiency)
    assert _extra_s(target, 3, _decodes(128)) == pytest.approx(expected, rel=1e-9)


def test_kernel_tables_price_the_rows_as_their_lm_head_gemm_at_that_many_rows() -> None:
    # The LM head runs once over all the step's logits rows: its table's time at
    # 128 x (k + 1) rows, less at the shape's 128 (read from the cost's own
    # breakdown of decode steps of that many sequences).
    target = KernelCost(load_architecture("llama-3.1-8b"), profile_artifact(PROFILE))
    k = 3
    head = {n: target.breakdown_s(_decodes(n))["lm_head"] for n in (128, 128 * (k + 1))}
    expected = head[128 * (k + 1)] - head[128]
    assert expected > 0
    assert _extra_s(target, k, _decodes(128)) == pytest.approx(expected, rel=1e-12)


def test_more_rows_never_make_a_measured_lm_head_cheaper() -> None:
    # The shipped H100 table's LM head is faster at 4 rows than at 1 (a measured
    # GEMM need not rise at every row): a batch-1 verification of 3 drafts adds 0 s,
    # not a negative time.
    cost = build_cost_model(AutoCostConfig(), LLAMA, H100)
    assert isinstance(cost, KernelCost)
    assert cost.lm_head_s(4) < cost.lm_head_s(1)  # (the premise)
    assert _extra_s(cost, 3, _decodes(1)) == 0.0


@pytest.mark.parametrize(
    "parallelism",
    [
        None,
        ParallelismConfig(tensor_parallel_size=2, pipeline_parallel_size=2, num_micro_batches=4),
    ],
)
def test_the_roofline_prices_a_verification_once_its_step_as_step_s(
    parallelism: ParallelismConfig | None,
) -> None:
    # step_and_rows_s prices the step and its rows from one evaluation: its step is
    # step_s's to the bit, compute- or memory-bound, whatever the rows.
    target = RooflineCost(LLAMA, H100, parallelism)
    for shape in (_decodes(1), _decodes(128), StepShape.build([(512, 100)], [300] * 8)):
        for rows in (0, 3, 384):
            step, _ = target.step_and_rows_s(shape, rows)
            assert step == target.step_s(shape)
        assert target.step_and_rows_s(shape, 0)[1] == 0.0


@pytest.mark.parametrize("k", [1, 3])
def test_a_tp2_verification_gathers_the_logits_of_its_drafts_too(k: int) -> None:
    # vLLM all-gathers every logits row it computed before sampling (0.19
    # LogitsProcessor._gather_logits): at tp 2 a verification's rows beyond its
    # shape's cost their LM-head GEMM and the gather at S + k S rows less at S,
    # priced by NCCL's model over the link (Qwen3-32B: 75,968 columns a GPU, 2 B).
    scenario = PUBLIC / "rtxpro6000_qwen3_32b_tp2_profile.yaml"
    target = cost_model_for(load_scenario(scenario))
    gpu = target.gpu  # type: ignore[attr-defined]
    assert isinstance(gpu, KernelCost) and gpu.tp == 2
    num_seqs = 64
    rows = num_seqs * (k + 1)

    def gather_s(num_rows: int) -> float:
        return collective_s("all_gather", num_rows * 75_968 * 2 * 2, 2, gpu.link)

    # (The profile's GEMM is faster at 128 rows than at 64: floored at 0 s, the
    # gather still added.)
    gemm = max(0.0, gpu.lm_head_s(rows) - gpu.lm_head_s(num_seqs))
    gather = gather_s(rows) - gather_s(num_seqs)
    assert gather > 0
    assert _extra_s(target, k, _decodes(num_seqs)) == pytest.approx(gemm + gather, rel=1e-12)
    # One GPU of the same model's profile gathers nothing: its GEMM's rows alone.
    one = KernelCost(load_architecture("llama-3.1-8b"), profile_artifact(PROFILE))
    alone = one.lm_head_s(rows) - one.lm_head_s(num_seqs)
    assert _extra_s(one, k, _decodes(num_seqs)) == pytest.approx(alone, rel=1e-12)
