"""What an n-gram proposer's step costs: its CPU work over every sequence, matched or not
(measured from vLLM's own proposer), and cost-breakdown's expectation over its misses.

vLLM's ``NgramProposer.propose`` looks up every request that sampled a token after a
step, whether its last lookup found a match or not, and scans each whole context
(``benchmarks/ngram_proposer_cpu.py``). With ``match_probability`` q each decode drafts
with probability q, else verifies one token, so ``cost-breakdown`` reports the step's
expected cost over the binomial number of drafting decodes.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.cli import main
from sim.cost.base import StepShape
from sim.cost.roofline import RooflineCost
from sim.cost.speculative import NGRAM_CPU, speculative_step_cost
from sim.hardware.specs import hardware_preset, model_preset

H100 = hardware_preset("h100")
LLAMA = model_preset("llama-3.1-8b")
NGRAM = speculative_step_cost(RooflineCost(LLAMA, H100), LLAMA, H100, 3, "ngram")
# The committed measurement of vLLM 0.19.0's ngram_proposer.py on this CPU
# (benchmarks/ngram_proposer_cpu.py): its fitted line, per call, sequence, token.
MEASURED = Path(__file__).resolve().parents[1] / "docs/validation/ngram-proposer-cpu"
FIT = json.loads((MEASURED / "vllm-0.19.0.json").read_text())["fit_random"]


def cpu_s(num_seqs: int, context_tokens: int) -> float:
    """The measured line: per call, per sequence, per context token (s)."""
    return (
        FIT["per_call_s"]
        + FIT["per_seq_s"] * num_seqs
        + FIT["per_context_token_s"] * context_tokens
    )


@pytest.mark.parametrize(("num_seqs", "context_tokens"), [(1, 256), (32, 32 * 1024), (256, 10**6)])
def test_ngram_cpu_is_the_measured_fit_of_vllms_proposer(
    num_seqs: int, context_tokens: int
) -> None:
    # Rounded to 3 digits in NgramCpu: within 1 %.
    assert NGRAM_CPU.cpu_s(num_seqs, context_tokens) == pytest.approx(
        cpu_s(num_seqs, context_tokens), rel=0.01
    )


def test_vllm_024s_proposer_measures_inside_the_019_fits_spread() -> None:
    # NgramCpu stands for 0.24 because 0.24.0's proposer, run alternately with 0.19.0's
    # (docs/speculative.md), fits a line inside the band 0.19.0's runs' lines span.
    runs = json.loads((MEASURED / "interleaved-0.19.0-0.24.0.json").read_text())["rounds"]
    fits = {
        release: [run[f"vllm-{release}"]["fit_random"] for run in runs]
        for release in ("0.19.0", "0.24.0")
    }
    assert len(runs) >= 5
    assert {run["vllm-0.24.0"]["provenance"]["vllm"] for run in runs} == {"0.24.0"}
    assert {run["vllm-0.19.0"]["provenance"]["vllm"] for run in runs} == {"0.19.0"}
    terms = ("per_call_s", "per_seq_s", "per_context_token_s")
    line_024 = {term: statistics.median(fit[term] for fit in fits["0.24.0"]) for term in terms}

    def at(line: dict[str, float], batch: int, context: int) -> float:
        return (
            line["per_call_s"]
            + line["per_seq_s"] * batch
            + line["per_context_token_s"] * batch * context
        )

    for batch in (1, 8, 32, 128, 256):
        for context in (256, 1024, 4096):
            band = [at(fit, batch, context) for fit in fits["0.19.0"]]
            assert min(band) <= at(line_024, batch, context) <= max(band), (batch, context)


def test_a_step_whose_decodes_all_miss_still_pays_the_lookups() -> None:
    # 4 decodes at context 1,024 that found no match: 4 one-token chunks after 1,023
    # cached tokens; the proposer still scans the 4 x 1,024 tokens.
    missed = StepShape.build([(1, 1023)] * 4, [])
    parts = NGRAM.parts_s(missed)
    assert parts.propose_cpu_s == pytest.approx(cpu_s(4, 4 * 1024), rel=0.01)
    assert parts.propose_gpu_s == parts.rejection_s == 0.0
    assert parts.total_s == pytest.approx(NGRAM.target.step_s(missed) + parts.propose_cpu_s)


def test_a_miss_beside_a_match_is_looked_up_too() -> None:
    # One decode drafts, one misses, both at context 1,024: both are looked up, as
    # when both draft.
    mixed = NGRAM.parts_s(StepShape.build([(1, 1023)], [1024]))
    both = NGRAM.parts_s(StepShape.build([], [1024, 1024]))
    assert mixed.propose_cpu_s == pytest.approx(cpu_s(2, 2048), rel=0.01)
    assert both.propose_cpu_s == pytest.approx(cpu_s(2, 2048), rel=0.01)


def test_a_prompts_chunk_is_looked_up_with_its_whole_context() -> None:
    # A 512-token chunk after 256 cached beside 3 decodes at 100: 4 sequences,
    # 768 + 300 context tokens.
    parts = NGRAM.parts_s(StepShape.build([(512, 256)], [100] * 3))
    assert parts.propose_cpu_s == pytest.approx(cpu_s(4, 768 + 300), rel=0.01)


# -- cost-breakdown: the expectation over misses -------------------------------------------


def scenario_file(tmp_path: Path, match_probability: float) -> str:
    doc: dict[str, Any] = {
        "name": "ngram",
        "model": "llama-3.1-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 100},
        },
        "speculative": {
            "method": "ngram",
            "num_draft_tokens": 3,
            "acceptance_rate": 0.6,
            "match_probability": match_probability,
        },
    }
    path = tmp_path / f"ngram-{match_probability}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def breakdown(capsys: pytest.CaptureFixture[str], scenario: str, step: str) -> dict[str, Any]:
    assert main(["cost-breakdown", scenario, "--step", step, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_cost_breakdown_is_the_expectation_over_which_decodes_draft(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two decodes at 1,024, each drafting with q = 0.25: both draft with q^2, one with
    # 2 q (1 - q), none with (1 - q)^2. Each case priced at q = 1 (no expectation): a
    # miss is a one-token chunk after 1,023 cached tokens.
    q = 0.25
    certain = scenario_file(tmp_path, 1.0)
    both = breakdown(capsys, certain, "2d@1024")
    one = breakdown(capsys, certain, "1p@1023+1d@1024")
    none = breakdown(capsys, certain, "2x1p@1023")
    weights = (q * q, 2 * q * (1 - q), (1 - q) ** 2)
    cases = (both, one, none)
    expected = breakdown(capsys, scenario_file(tmp_path, q), "2d@1024")
    want_ms = sum(w * case["step_ms"] for w, case in zip(weights, cases, strict=True))
    assert expected["step_ms"] == pytest.approx(want_ms, rel=1e-12)
    for part in ("proposer CPU", "rejection sampler"):
        want = sum(w * case["speculative_ms"][part] for w, case in zip(weights, cases, strict=True))
        assert expected["speculative_ms"][part] == pytest.approx(want, rel=1e-12)
    # The misses verify less, so the expected step is cheaper than every decode drafting.
    assert expected["step_ms"] < both["step_ms"]
    assert expected["match_probability"] == q


def test_cost_breakdown_with_one_decode_mixes_its_draft_and_its_miss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One decode, q = 0.7: 0.7 x (a 4-token verification) + 0.3 x (a one-token chunk).
    drafted = breakdown(capsys, scenario_file(tmp_path, 1.0), "1d@2048")["step_ms"]
    missed = breakdown(capsys, scenario_file(tmp_path, 1.0), "1p@2047")["step_ms"]
    result = breakdown(capsys, scenario_file(tmp_path, 0.7), "1d@2048")
    assert result["step_ms"] == pytest.approx(0.7 * drafted + 0.3 * missed, rel=1e-12)
    # The table says its figures are expectations.
    assert main(["cost-breakdown", scenario_file(tmp_path, 0.7), "--step", "1d@2048"]) == 0
    assert "drafts with probability 0.7" in capsys.readouterr().out
