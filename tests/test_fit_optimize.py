"""The Nelder-Mead minimiser of black-box calibration, on analytic functions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.validation.optimize import FloatArray, nelder_mead


def quadratic(center: FloatArray, weights: FloatArray):  # type: ignore[no-untyped-def]
    def f(x: FloatArray) -> float:
        return float(np.sum(weights * (x - center) ** 2))

    return f


def rosenbrock(x: FloatArray) -> float:
    return float(100.0 * (x[1] - x[0] ** 2) ** 2 + (1.0 - x[0]) ** 2)


def test_finds_the_minimum_of_a_separable_quadratic() -> None:
    center = np.array([1.5, -2.0, 0.25])
    found = nelder_mead(quadratic(center, np.array([1.0, 4.0, 9.0])), [0, 0, 0], [0.5] * 3)
    assert found.converged
    np.testing.assert_allclose(found.x, center, atol=1e-3)
    assert found.value < 1e-6


def test_finds_the_rosenbrock_valley_minimum() -> None:
    found = nelder_mead(rosenbrock, [-1.2, 1.0], [0.5, 0.5], max_evaluations=2000)
    np.testing.assert_allclose(found.x, [1.0, 1.0], atol=1e-2)


def test_one_dimension_is_a_line_search() -> None:
    found = nelder_mead(lambda x: float((x[0] - 3.0) ** 2 + 2.0), [0.0], [1.0])
    assert found.x[0] == pytest.approx(3.0, abs=1e-3)
    assert found.value == pytest.approx(2.0, abs=1e-6)


def test_a_bound_holds_the_minimum_at_the_edge() -> None:
    # Unconstrained minimum at (-1, 2); x >= 0 puts it at (0, 2).
    seen: list[FloatArray] = []

    def f(x: FloatArray) -> float:
        seen.append(x.copy())
        return float((x[0] + 1.0) ** 2 + (x[1] - 2.0) ** 2)

    found = nelder_mead(f, [1.0, 0.0], [0.5, 0.5], lower=[0.0, -10.0], upper=[10.0, 10.0])
    assert found.x[0] == pytest.approx(0.0, abs=1e-4)
    assert found.x[1] == pytest.approx(2.0, abs=1e-3)
    assert min(x[0] for x in seen) >= 0.0  # never evaluated outside the box


def test_a_start_outside_the_box_is_clipped_in() -> None:
    found = nelder_mead(lambda x: float(x[0] ** 2), [5.0], [1.0], lower=[1.0], upper=[4.0])
    assert found.x[0] == pytest.approx(1.0, abs=1e-6)


def test_a_start_on_the_upper_bound_steps_inwards() -> None:
    found = nelder_mead(lambda x: float((x[0] - 2.0) ** 2), [4.0], [1.0], lower=[0], upper=[4])
    assert found.x[0] == pytest.approx(2.0, abs=1e-3)


def test_the_evaluation_budget_is_respected() -> None:
    calls = []

    def f(x: FloatArray) -> float:
        calls.append(1)
        return rosenbrock(x)

    found = nelder_mead(f, [-1.2, 1.0], [0.5, 0.5], max_evaluations=30)
    assert not found.converged
    # A shrink in progress finishes: at most n more evaluations than the budget.
    assert found.num_evaluations == len(calls) <= 30 + 2


def test_non_finite_values_count_as_worst() -> None:
    def f(x: FloatArray) -> float:
        return float("nan") if x[0] > 2.0 else float((x[0] - 1.0) ** 2)

    found = nelder_mead(f, [0.0], [3.0])
    assert found.x[0] == pytest.approx(1.0, abs=1e-3)


def test_deterministic() -> None:
    a = nelder_mead(rosenbrock, [-1.2, 1.0], [0.5, 0.5], max_evaluations=150)
    b = nelder_mead(rosenbrock, [-1.2, 1.0], [0.5, 0.5], max_evaluations=150)
    assert np.array_equal(a.x, b.x) and a.num_evaluations == b.num_evaluations


@pytest.mark.parametrize(
    ("start", "step", "lower", "upper", "budget"),
    [
        ([], [], None, None, 10),
        ([0.0, 0.0], [1.0], None, None, 10),
        ([0.0], [0.0], None, None, 10),
        ([0.0], [1.0], [1.0], [0.0], 10),
        ([0.0, 0.0], [1.0, 1.0], None, None, 2),
    ],
)
def test_bad_arguments_are_refused(
    start: list[float],
    step: list[float],
    lower: list[float] | None,
    upper: list[float] | None,
    budget: int,
) -> None:
    with pytest.raises(ValueError):
        nelder_mead(lambda x: 0.0, start, step, lower, upper, max_evaluations=budget)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(-5, 5), min_size=1, max_size=3),
    st.floats(0.2, 2.0),
)
def test_any_shifted_bowl_is_found(center: list[float], step: float) -> None:
    c = np.array(center)
    found = nelder_mead(quadratic(c, np.ones(c.size)), np.zeros(c.size), [step] * c.size,
                        max_evaluations=1000)  # fmt: skip
    np.testing.assert_allclose(found.x, c, atol=1e-2)
