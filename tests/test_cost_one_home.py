"""Cost-model concepts given one home: a scale and an engine-overhead fit are one class
(``ScaledCost``), and a fit's parameters have one representation (``FitParameters``),
in memory and in the artifact alike."""

from __future__ import annotations

import math

import pytest

from sim.cost.base import StepShape
from sim.cost.fitted import FitParameters, FittedCostArtifact, ScaledCost
from sim.cost.linear import LinearCost

# 2 ms a step, 1 ms a decode sequence, 1 us a context token, 50 us a prefill token.
BASE = LinearCost(
    step_overhead_s=0.002,
    per_decode_seq_s=0.001,
    per_context_token_s=1e-6,
    per_prefill_token_s=5e-5,
)
SHAPES = [
    StepShape.build(decode_context_tokens=[100, 300]),
    StepShape.build(prefill_chunks=[(64, 0)], decode_context_tokens=[10, 20, 30]),
    StepShape.build(prefill_chunks=[(7, 5), (9, 0)]),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_plain_scale_is_the_factor_times_the_base_bit_for_bit(shape: StepShape) -> None:
    # No overheads: factor * base exactly (adding 0.0 twice changes no bit).
    assert ScaledCost(BASE, 1.37).step_s(shape) == 1.37 * BASE.step_s(shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_overhead_fit_adds_a_step_and_a_sequence_term(shape: StepShape) -> None:
    cost = ScaledCost(BASE, 1.1, per_step_s=5e-4, per_seq_s=2e-4, source="log")
    num_seqs = shape.num_prefill_seqs + shape.num_decode_seqs
    expected = 1.1 * BASE.step_s(shape) + 5e-4 + 2e-4 * num_seqs  # module docstring
    assert cost.step_s(shape) == pytest.approx(expected, rel=1e-12)
    assert cost.step_s(StepShape()) == 0.0


def test_the_label_says_a_scale_or_a_fit() -> None:
    assert ScaledCost(BASE, 1.05).label == "linear x1.05"
    fit = ScaledCost(BASE, 1.1, per_step_s=5e-4, per_seq_s=2e-4, source="run-a").label
    assert fit == "linear x1.100 + 0.500 ms/step + 0.200 ms/seq (fit on run-a)"


@pytest.mark.parametrize(
    ("factor", "per_step_s", "per_seq_s"), [(0.0, 0.0, 0.0), (1.0, -1e-3, 0.0), (1.0, 0.0, -1e-6)]
)
def test_a_scale_that_could_make_steps_free_is_refused(
    factor: float, per_step_s: float, per_seq_s: float
) -> None:
    with pytest.raises(ValueError):
        ScaledCost(BASE, factor, per_step_s, per_seq_s)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"step_overhead_s": math.inf},
        {"prefill_multiplier": math.inf},
        {"decode_multiplier": -math.inf},
    ],
)
def test_fit_parameters_refuse_infinity_as_the_stored_ones_always_did(
    kwargs: dict[str, float],
) -> None:
    # One set of bounds: what an artifact may not store, a fit may not produce.
    with pytest.raises(ValueError):
        FitParameters(**kwargs)


def test_the_artifact_stores_fit_parameters_themselves() -> None:
    stored = FittedCostArtifact.model_fields["parameters"].annotation
    assert stored is FitParameters
