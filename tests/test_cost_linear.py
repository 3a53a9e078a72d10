"""LinearCost and its config: hand-checked arithmetic, decode skipping, validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from decode_runs import by_loop, run_prices
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from sim.cost.base import CostModel, StepShape
from sim.cost.config import CostConfig, LinearCostConfig, build_cost_model
from sim.cost.linear import LinearCost
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import scenario_from_dict

CHAT = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"

COEFFICIENTS = (
    "step_overhead_s",
    "per_prefill_seq_s",
    "per_prefill_token_s",
    "per_attention_pair_s",
    "per_decode_seq_s",
    "per_context_token_s",
)

# Powers of two keep the hand-checked sums exact in binary floating point.
FULL = LinearCost(
    step_overhead_s=2.0**-3,
    per_prefill_seq_s=2.0**-4,
    per_prefill_token_s=2.0**-5,
    per_attention_pair_s=2.0**-6,
    per_decode_seq_s=2.0**-7,
    per_context_token_s=2.0**-8,
)

counts = st.integers(min_value=0, max_value=10**7)
shapes = st.builds(
    StepShape,
    num_prefill_seqs=counts,
    num_prefill_tokens=counts,
    prefill_attention_pairs=counts,
    prefill_kv_read_tokens=counts,
    num_decode_seqs=counts,
    num_decode_context_tokens=counts,
)
coefficient = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
linear_costs = st.builds(
    LinearCost,
    step_overhead_s=st.floats(min_value=1e-6, max_value=1.0),
    **{name: coefficient for name in COEFFICIENTS[1:]},
)


def test_is_a_cost_model() -> None:
    assert isinstance(FULL, CostModel)
    assert FULL.label == "linear"


def test_arithmetic_by_hand() -> None:
    # Two chunks (3 new after 2 cached, 1 new after 0) and decodes at 5 and 7.
    shape = StepShape.build(prefill_chunks=[(3, 2), (1, 0)], decode_context_tokens=[5, 7])
    assert (shape.num_prefill_seqs, shape.num_prefill_tokens) == (2, 4)
    assert shape.prefill_attention_pairs == (3 * 2 + 6) + 1
    expected = 1 / 8 + 2 / 16 + 4 / 32 + 13 / 64 + 2 / 128 + 12 / 256
    assert FULL.step_s(shape) == expected


def test_each_coefficient_prices_its_own_count() -> None:
    shape = StepShape(1, 20, 300, 4000, 5, 60000)
    per_count = dict(zip(COEFFICIENTS[1:], (1, 20, 300, 5, 60000), strict=True))
    for name, count in per_count.items():
        cost = LinearCost(step_overhead_s=0.5, **{name: 0.25})
        assert cost.step_s(shape) == 0.5 + 0.25 * count


def test_kv_read_tokens_are_free() -> None:
    shape = StepShape(1, 10, 55, 10, 0, 0)
    assert FULL.step_s(shape) == FULL.step_s(shape._replace(prefill_kv_read_tokens=99))


def test_empty_step_is_free_even_with_overhead() -> None:
    assert FULL.step_s(StepShape()) == 0.0


def test_fixed_service_time() -> None:
    cost = LinearCost(step_overhead_s=0.01)
    durations = {cost.step_s(StepShape.build([(c, 0)], [5] * d)) for c in (1, 9) for d in (0, 3)}
    assert durations == {0.01}
    assert np.all(run_prices(cost, 4, 40, 10) == 0.01)


@given(shape=shapes, cost=linear_costs)
def test_non_empty_steps_take_positive_time(shape: StepShape, cost: LinearCost) -> None:
    assert (cost.step_s(shape) > 0) == (not shape.is_empty)


@given(
    cost=linear_costs,
    shape=shapes,
    field=st.sampled_from(list(StepShape._fields)),
    extra=st.integers(1, 10**6),
)
def test_monotone_in_every_count(
    cost: LinearCost, shape: StepShape, field: str, extra: int
) -> None:
    bigger = shape._replace(**{field: getattr(shape, field) + extra})
    assert cost.step_s(bigger) >= cost.step_s(shape)


@given(
    cost=linear_costs,
    num_seqs=st.integers(0, 1024),
    context=st.integers(0, 10**7),
    num_steps=st.integers(0, 300),
)
def test_decode_steps_equal_a_loop_of_step_s(
    cost: LinearCost, num_seqs: int, context: int, num_steps: int
) -> None:
    context = max(context, num_seqs)  # each sequence has at least its own token
    fast = run_prices(cost, num_seqs, context, num_steps)
    assert fast.shape == (num_steps,)
    assert fast.dtype == np.float64
    np.testing.assert_allclose(
        fast,
        by_loop(cost, num_seqs, context, num_steps),
        rtol=1e-12,
        atol=0,
    )


def test_decode_steps_grow_with_context() -> None:
    steps = run_prices(FULL, 8, 800, 5)
    np.testing.assert_allclose(np.diff(steps), 8 * FULL.per_context_token_s)


def _chat_costing(coefficients: dict[str, float]) -> None:
    """scenarios/chat.yaml priced by ``cost: {kind: linear, **coefficients}``, loaded as a
    user's scenario is (where the coefficients are checked)."""
    doc = yaml.safe_load(CHAT.read_text())
    scenario_from_dict({**doc, "cost": {"kind": "linear", **coefficients}})


@pytest.mark.parametrize("name", COEFFICIENTS)
@pytest.mark.parametrize("value", [-1e-9, float("nan"), float("inf")])
def test_rejects_negative_or_non_finite_coefficients(name: str, value: float) -> None:
    with pytest.raises(ConfigError, match=name):
        _chat_costing({"step_overhead_s": 1.0, name: value})


@pytest.mark.parametrize(
    ("coefficients", "which"),
    [
        ({}, "prefill-only"),
        ({"per_decode_seq_s": 1.0}, "prefill-only"),
        ({"per_prefill_token_s": 1.0}, "decode-only"),
        ({"per_attention_pair_s": 1.0, "per_prefill_seq_s": 1.0}, "decode-only"),
    ],
)
def test_rejects_zero_duration_steps(coefficients: dict[str, float], which: str) -> None:
    with pytest.raises(ConfigError, match=which):
        _chat_costing(coefficients)
    with pytest.raises(ValidationError, match=which):
        LinearCostConfig.model_validate(coefficients)


def test_zero_overhead_is_fine_with_both_kinds_covered() -> None:
    cost = LinearCost(per_prefill_token_s=1e-4, per_context_token_s=1e-6)
    assert cost.step_s(StepShape.build([(1, 0)])) == 1e-4
    assert cost.step_s(StepShape.build(None, [3])) == 3e-6


def test_repr_names_every_coefficient() -> None:
    for name in COEFFICIENTS:
        assert name in repr(FULL)


adapter: TypeAdapter[Any] = TypeAdapter(CostConfig)


def test_config_parses_by_kind_and_builds_the_same_model() -> None:
    raw = {"kind": "linear", "step_overhead_s": 0.002, "per_decode_seq_s": 1e-4}
    config = adapter.validate_python(raw)
    assert isinstance(config, LinearCostConfig)
    cost = build_cost_model(config, model_preset("tiny"), hardware_preset("cpu-2core"))
    assert isinstance(cost, LinearCost)
    assert cost.step_overhead_s == 0.002
    assert cost.per_decode_seq_s == 1e-4
    assert cost.per_context_token_s == 0.0
    # The model and hardware do not matter to a linear cost.
    other = build_cost_model(config, model_preset("llama-3-70b"), hardware_preset("h200"))
    shape = StepShape.build([(100, 0)], [10] * 4)
    assert other.step_s(shape) == cost.step_s(shape)


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "linear", "step_overhead_s": -1.0},
        {"kind": "linear", "step_overhead_s": "inf"},
        {"kind": "linear", "step_overhead_s": 1.0, "per_token_s": 1.0},
        {"kind": "quadratic", "step_overhead_s": 1.0},
        {"step_overhead_s": 1.0},
    ],
)
def test_config_rejects_bad_input(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        adapter.validate_python(raw)


def test_config_is_frozen() -> None:
    config = LinearCostConfig(step_overhead_s=1.0)
    with pytest.raises(ValidationError):
        config.step_overhead_s = 2.0
