"""What ``sim.validation.optimize`` adds to scipy's Nelder–Mead: the first simplex, the
box, the budget, non-finite values. (The search itself is scipy's; the fits that use
it are tested on recovering known parameters in tests/test_fit.py and
tests/test_fit_engine_cpu.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import FloatArray
from sim.validation.optimize import first_simplex, nelder_mead


def rosenbrock(x: FloatArray) -> float:
    return float(100.0 * (x[1] - x[0] ** 2) ** 2 + (1.0 - x[0]) ** 2)


def test_the_first_simplex_steps_each_coordinate_and_turns_back_at_a_bound() -> None:
    lower, upper = np.array([0.0, 0.0]), np.array([4.0, 10.0])
    simplex = first_simplex(np.array([4.0, 1.0]), np.array([1.0, 0.5]), lower, upper)
    # x0 sits on its upper bound: its vertex steps down instead of onto the bound.
    np.testing.assert_array_equal(simplex, [[4.0, 1.0], [3.0, 1.0], [4.0, 1.5]])
    outside = first_simplex(np.array([9.0, -3.0]), np.array([1.0, 1.0]), lower, upper)
    assert np.all(outside >= lower) and np.all(outside <= upper)
    np.testing.assert_array_equal(outside[0], [4.0, 0.0])


def test_the_box_holds_every_evaluation_and_the_minimum_at_its_edge() -> None:
    # Unconstrained minimum at (-1, 2); x >= 0 puts it at (0, 2).
    seen: list[FloatArray] = []

    def f(x: FloatArray) -> float:
        seen.append(x.copy())
        return float((x[0] + 1.0) ** 2 + (x[1] - 2.0) ** 2)

    found = nelder_mead(f, [1.0, 0.0], [0.5, 0.5], lower=[0.0, -10.0], upper=[10.0, 10.0])
    assert found.converged
    assert found.x[0] == pytest.approx(0.0, abs=1e-4)
    assert found.x[1] == pytest.approx(2.0, abs=1e-3)
    assert min(x[0] for x in seen) >= 0.0  # never evaluated outside the box
    assert found.num_evaluations == len(seen)


def test_a_start_outside_the_box_is_clipped_in() -> None:
    found = nelder_mead(lambda x: float(x[0] ** 2), [5.0], [1.0], lower=[1.0], upper=[4.0])
    assert found.x[0] == pytest.approx(1.0, abs=1e-6)


def test_the_evaluation_budget_is_respected() -> None:
    calls: list[int] = []

    def f(x: FloatArray) -> float:
        calls.append(1)
        return rosenbrock(x)

    found = nelder_mead(f, [-1.2, 1.0], [0.5, 0.5], max_evaluations=30)
    assert not found.converged
    assert found.num_evaluations == len(calls) <= 30
    assert found.value == pytest.approx(rosenbrock(found.x))


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
