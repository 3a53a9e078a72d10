"""Black-box calibration: objective, cross-validation splits, recovery of known parameters."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.cost.fitted import FitParameters, FittedCost
from sim.scenario import Scenario
from sim.validation.fit import (
    START_SCALES,
    FitRun,
    Target,
    cross_validate,
    cv_folds,
    fit,
    half_split,
    log_errors,
    objective_value,
    overhead_scale_s,
    params_from_vector,
    percent,
    render,
    score,
    starting_point,
    target_rows,
)

LINEAR = {
    "kind": "linear",
    # A small fixed part beside a large per-sequence one: decode steps at batch 1
    # and 16 differ five-fold, which separates an overhead from a multiplier.
    "step_overhead_s": 0.002,
    "per_prefill_token_s": 5e-5,
    "per_decode_seq_s": 1e-3,
    "per_context_token_s": 1e-7,
}
TRUE = FitParameters(step_overhead_s=0.003, prefill_multiplier=1.4, decode_multiplier=0.7)


def scenario(rate_per_s: float, num_requests: int = 80, seed: int = 0) -> Scenario:
    return Scenario.model_validate(
        {
            "name": f"synthetic-{rate_per_s:g}",
            "seed": seed,
            "model": "tiny",
            "hardware": "cpu-2core",
            "cost": LINEAR,
            "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 256},
            "engine": {"num_kv_blocks": 4096, "async_scheduling": False},
            "workload": {
                "kind": "synthetic",
                "num_requests": num_requests,
                "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
                "prompt_tokens": {"kind": "uniform", "min_tokens": 32, "max_tokens": 600},
                "output_tokens": {"kind": "uniform", "min_tokens": 4, "max_tokens": 40},
            },
        }
    )


def synthetic_run(rate_per_s: float, params: FitParameters = TRUE, **kw: Any) -> FitRun:
    """A 'measured' run: the simulator itself with known parameters on the linear base."""
    s = scenario(rate_per_s, **kw)
    measured = api.run(s, wrap_cost=lambda base: FittedCost(base, params))
    return FitRun(s.name, s, measured.requests, api.cost_model_for(s))


def test_replaying_with_the_true_parameters_has_zero_error() -> None:
    run = synthetic_run(20.0)
    errors = score([run], [Target(0)], TRUE)
    assert objective_value(errors) == pytest.approx(0.0, abs=1e-20)
    assert objective_value(score([run], [Target(0)], FitParameters())) > 1e-3


def test_recovers_known_parameters_from_two_loads() -> None:
    runs = [synthetic_run(5.0, num_requests=40), synthetic_run(40.0, num_requests=40, seed=1)]
    outcome = fit(runs, [Target(0), Target(1)], max_evaluations=60)
    assert outcome.value < 0.1 * outcome.base_value
    got = outcome.params
    assert got.prefill_multiplier == pytest.approx(TRUE.prefill_multiplier, rel=0.1)
    assert got.decode_multiplier == pytest.approx(TRUE.decode_multiplier, rel=0.1)
    assert got.step_overhead_s == pytest.approx(TRUE.step_overhead_s, abs=1e-3)


def test_a_single_free_parameter_recovers_a_pure_slowdown() -> None:
    run = synthetic_run(20.0, FitParameters(decode_multiplier=1.5), num_requests=40)
    outcome = fit([run], [Target(0)], free=("decode_multiplier",), max_evaluations=25)
    assert outcome.params.decode_multiplier == pytest.approx(1.5, rel=0.03)
    assert outcome.params.prefill_multiplier == 1.0 and outcome.params.step_overhead_s == 0.0


def test_cross_validation_scores_held_out_data_better_than_the_base() -> None:
    slower = FitParameters(prefill_multiplier=1.4, decode_multiplier=0.7)
    runs = [
        synthetic_run(10.0, slower, num_requests=40),
        synthetic_run(30.0, slower, num_requests=40, seed=1),
    ]
    folds = cross_validate(runs, ("prefill_multiplier", "decode_multiplier"), 25)
    assert [f["fold"] for f in folds] == [f"leave out {r.name}" for r in runs]
    for fold in folds:
        for row in fold["held_out"]:
            base = max(abs(v) for v in row["base_err_pct"].values())
            fitted = max(abs(v) for v in row["fitted_err_pct"].values())
            assert fitted < 0.25 * base
    final = {"parameters": folds[0]["parameters"], "rows": folds[0]["held_out"]}
    text = render({"cross_validation": folds, "in_sample": final})
    assert "Held out (leave out synthetic-10" in text and "| TTFT |" in text


def test_fit_refuses_unknown_parameters() -> None:
    run = synthetic_run(20.0, num_requests=5)
    with pytest.raises(ValueError):
        fit([run], [Target(0)], free=("per_token_s",))
    with pytest.raises(ValueError):
        fit([run], [Target(0)], free=())


def requests_table(arrivals: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"request_id": range(len(arrivals)), "arrival_s": arrivals})


def test_half_split_by_arrival_hand_traced() -> None:
    first, second = half_split(requests_table([0.0, 3.0, 1.0, 2.0, 4.0]))
    assert first == (0, 2, 3) and second == (1, 4)  # odd one out goes to the first half


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=2, max_size=50))
def test_half_split_partitions_in_arrival_order(arrivals: list[float]) -> None:
    first, second = half_split(requests_table(arrivals))
    assert sorted(first + second) == list(range(len(arrivals)))
    assert len(first) - len(second) in (0, 1)
    assert max(arrivals[i] for i in first) <= min(arrivals[i] for i in second)


class _Named:
    def __init__(self, name: str, requests: pd.DataFrame) -> None:
        self.name, self.requests = name, requests


def test_one_run_splits_in_halves_several_leave_one_out() -> None:
    one = [_Named("a", requests_table([0.0, 1.0, 2.0, 3.0]))]
    (fold,) = cv_folds(one)  # type: ignore[arg-type]
    assert fold.train == (Target(0, (0, 1), "first half"),)
    assert fold.test == (Target(0, (2, 3), "second half"),)
    three = [_Named(n, requests_table([0.0])) for n in "abc"]
    folds = cv_folds(three)  # type: ignore[arg-type]
    assert [f.test for f in folds] == [(Target(0),), (Target(1),), (Target(2),)]
    assert folds[1].train == (Target(0), Target(2))
    with pytest.raises(ValueError):
        cv_folds([])
    with pytest.raises(ValueError):
        cv_folds([_Named("x", requests_table([0.0]))])  # type: ignore[list-item]


def latencies(ttft: list[float], tpot: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"ttft_s": ttft, "tpot_s": tpot}, index=range(len(ttft)))


def test_log_errors_hand_traced() -> None:
    measured = latencies([1.0, 1.0, 1.0], [0.1, 0.1, 0.1])
    predicted = latencies([2.0, 2.0, 2.0], [0.05, 0.05, 0.05])
    errors = log_errors(predicted, measured, None)
    assert errors["ttft_s"]["p50"] == pytest.approx(math.log(2.0))
    assert errors["tpot_s"]["p99"] == pytest.approx(math.log(0.5))
    assert objective_value([errors]) == pytest.approx(math.log(2.0) ** 2)
    assert percent(errors["ttft_s"]["p90"]) == pytest.approx(100.0)
    assert percent(float("nan")) is None


def test_log_errors_score_only_the_targets_requests() -> None:
    measured = latencies([1.0, 4.0], [0.1, 0.1])
    predicted = latencies([1.0, 2.0], [0.1, 0.1])
    assert log_errors(predicted, measured, (0,))["ttft_s"]["p50"] == 0.0
    assert log_errors(predicted, measured, (1,))["ttft_s"]["p50"] == pytest.approx(math.log(0.5))


def test_nothing_completed_is_an_infinite_objective() -> None:
    measured = latencies([1.0], [0.1])
    predicted = latencies([float("nan")], [float("nan")])
    assert objective_value([log_errors(predicted, measured, None)]) == math.inf
    assert objective_value([]) == math.inf


def test_parameter_vector_maps_overhead_linearly_and_multipliers_by_exp() -> None:
    names = ("step_overhead_s", "decode_multiplier")
    params = params_from_vector(np.array([2.0, math.log(3.0)]), names, scale_s=0.01)
    assert (params.step_overhead_s, params.prefill_multiplier) == (0.02, 1.0)
    assert params.decode_multiplier == pytest.approx(3.0)
    clipped = params_from_vector(np.array([-1.0]), ("step_overhead_s",), scale_s=0.01)
    assert clipped.step_overhead_s == 0.0


def test_overhead_scale_is_the_median_training_tpot() -> None:
    run = synthetic_run(20.0, num_requests=20)
    tpot = run.measured["tpot_s"]
    assert overhead_scale_s([run], [Target(0)]) == pytest.approx(float(tpot.median()))
    ids = tuple(int(i) for i in tpot.index[:3])
    assert overhead_scale_s([run], [Target(0, ids)]) == pytest.approx(float(tpot.iloc[:3].median()))


def test_target_rows_report_signed_percent_for_base_and_fit() -> None:
    run = synthetic_run(20.0, num_requests=30)
    rows = target_rows([run], [Target(0)], TRUE)
    assert [r["metric"] for r in rows] == ["TTFT", "TPOT"]
    for row in rows:
        assert all(abs(v) < 1e-6 for v in row["fitted_err_pct"].values())
        assert any(abs(v) > 1.0 for v in row["base_err_pct"].values())


def test_the_start_is_the_best_common_multiplier_of_the_grid() -> None:
    free = ("step_overhead_s", "prefill_multiplier", "decode_multiplier")
    calls: list[np.ndarray] = []

    def objective(x: np.ndarray) -> float:
        calls.append(x)
        return float(np.sum((x[1:] - math.log(4.0)) ** 2) + x[0] ** 2)

    start, spent = starting_point(objective, free)
    assert spent == len(START_SCALES) == len(calls)
    np.testing.assert_allclose(start, [0.0, math.log(4.0), math.log(4.0)])
    assert all(x[0] == 0.0 for x in calls)  # the overhead stays at 0 on the grid
    only_overhead, none_spent = starting_point(objective, ("step_overhead_s",))
    assert none_spent == 0 and only_overhead.tolist() == [0.0]


def test_a_base_several_times_too_fast_is_fitted_from_the_right_basin() -> None:
    slow = FitParameters(prefill_multiplier=3.0, decode_multiplier=3.0)
    run = synthetic_run(10.0, slow, num_requests=40)
    outcome = fit([run], [Target(0)], max_evaluations=40)
    assert outcome.params.decode_multiplier == pytest.approx(3.0, rel=0.15)
    assert outcome.value < 1e-3 * outcome.base_value
