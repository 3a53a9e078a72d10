"""NNLS, knot and hinge choice, held-out split and the fit on synthetic samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from calibration.fit import (
    FitKind,
    choose_hinges,
    choose_knots,
    fit_error,
    fit_samples,
    hat_basis,
    hinge_basis,
    nnls,
    split_held_out,
)
from sim.cost.base import StepShape
from sim.cost.calibrated import CalibratedCost, CalibrationSample, load_artifact

# --- NNLS --------------------------------------------------------------------

# Zero or of magnitude >= 1e-3: features are token counts and seconds, never
# subnormal (a column of 1e-309 makes any least-squares solution overflow).
finite = st.one_of(
    st.just(0.0),
    st.floats(min_value=1e-3, max_value=10),
    st.floats(min_value=-10, max_value=-1e-3),
)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    m=st.integers(1, 30),
    n=st.integers(1, 12),
)
def test_nnls_satisfies_kkt(data: st.DataObject, m: int, n: int) -> None:
    """x >= 0, gradient <= 0 everywhere and = 0 where x > 0 (optimality)."""
    a = data.draw(hnp.arrays(np.float64, (m, n), elements=finite))
    b = data.draw(hnp.arrays(np.float64, (m,), elements=finite))
    x = nnls(a, b)
    assert np.all(x >= 0)
    gradient = a.T @ (b - a @ x)
    scale = 1e-7 * (1 + np.abs(a).sum() * (1 + np.abs(b).sum()))
    assert np.all(gradient <= scale)
    assert np.all(np.abs(gradient[x > 0]) <= scale)


def test_nnls_equals_least_squares_when_that_is_positive() -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(size=(40, 5))
    x_true = np.array([1.0, 2.0, 0.5, 3.0, 0.1])
    np.testing.assert_allclose(nnls(a, a @ x_true), x_true, rtol=1e-9)


def test_nnls_clamps_a_negative_coefficient_to_zero() -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(size=(50, 3))
    x = nnls(a, a @ np.array([1.0, -2.0, 1.0]))
    assert x[1] == 0.0
    assert np.all(x >= 0)


def test_nnls_handles_duplicate_columns() -> None:
    rng = np.random.default_rng(3)
    col = rng.normal(size=(20, 1))
    a = np.hstack([col, col, rng.normal(size=(20, 1))])
    x = nnls(a, a @ np.array([1.0, 1.0, 2.0]))
    np.testing.assert_allclose(a @ x, a @ np.array([1.0, 1.0, 2.0]), atol=1e-9)
    assert np.all(x >= 0)


# --- bases -------------------------------------------------------------------


@given(st.lists(st.integers(1, 6000), min_size=1, max_size=50))
def test_hat_basis_is_a_partition_of_unity(tokens: list[int]) -> None:
    knots = [2, 3, 16, 100, 4096]
    t = np.array(tokens, float)
    basis = hat_basis(t, knots)
    np.testing.assert_allclose(basis.sum(axis=1), 1.0)
    inside = (t >= 2) & (t <= 4096)
    assert np.all(basis[inside] >= 0)
    # Affine functions are reproduced exactly, also outside the knot range.
    np.testing.assert_allclose(basis @ (3.0 * np.array(knots, float) + 1.0), 3.0 * t + 1.0)


def test_hinge_basis() -> None:
    out = hinge_basis(np.array([0.0, 50.0, 300.0]), [0, 100])
    np.testing.assert_array_equal(out, [[0, 0], [50, 0], [300, 200]])


def test_knots_need_support_and_cover_the_range() -> None:
    tokens = [1, 1, 2, 2, 3, 5, 5, 40, 40, 41, 41, 900, 900, 4000]
    knots = choose_knots(tokens, min_support=2, dense_below=16, knot_ratio=1.3)
    assert knots[0] == 1 and knots[-1] == 4000
    assert 3 not in knots  # seen once
    assert 41 not in knots  # too close to 40
    assert {2, 5, 40, 900} <= set(knots)
    assert knots == sorted(set(knots))


def test_hinges_start_at_zero_and_need_samples_beyond() -> None:
    contexts = [64, 128, 512, 4096, 4096, 30_000]
    hinges = choose_hinges(contexts, min_support=2)
    assert hinges[0] == 0
    assert all(sum(c > h for c in contexts) >= 2 for h in hinges[1:])
    assert all(h >= 4 * 64 for h in hinges[1:])
    assert choose_hinges([]) == [0]


# --- the fit on synthetic data -----------------------------------------------

TRUE = {
    "overhead_s": 4e-3,
    "per_token_s": 1e-4,
    "per_pair_s": 2e-8,
    "per_prefill_seq_s": 5e-4,
    "per_decode_seq_s": 2e-4,
    "per_context_s": 1e-6,
}


def _truth(shape: StepShape) -> float:
    return (
        TRUE["overhead_s"]
        + TRUE["per_token_s"] * shape.num_tokens
        + TRUE["per_pair_s"] * shape.prefill_attention_pairs
        + TRUE["per_prefill_seq_s"] * shape.num_prefill_seqs
        + TRUE["per_decode_seq_s"] * shape.num_decode_seqs
        + TRUE["per_context_s"] * shape.num_decode_context_tokens
    )


def _samples(noise: float, rng: np.random.Generator) -> list[CalibrationSample]:
    points: list[tuple[str, StepShape]] = []
    for n in (16, 32, 64, 128, 256, 512, 1024, 2048):
        points.append(("prefill", StepShape.build([(n, 0)])))
    for k in (2, 4, 8):
        for total in (256, 1024):
            points.append(("prefill", StepShape.build([(total // k, 0)] * k)))
    for c, p in ((64, 512), (256, 1024), (128, 2048)):
        points.append(("prefill", StepShape.build([(c, p)])))
    for b in (1, 2, 3, 4, 6, 8, 16, 32, 64):
        for ctx in (64, 512, 2048):
            points.append(("decode", StepShape.build(decode_context_tokens=[ctx] * b)))
    for c in (32, 256):
        for b in (1, 8, 32):
            points.append(("mixed", StepShape.build([(c, 128)], [512] * b)))
    out = []
    for section, shape in points:
        times = list(_truth(shape) * (1 + noise * rng.standard_normal(7)))
        out.append(CalibrationSample.from_times(section, shape, times))  # type: ignore[arg-type]
    return out


def test_linear_fit_recovers_known_coefficients() -> None:
    samples = split_held_out(_samples(0.02, np.random.default_rng(0)))
    fit, error = fit_samples(samples, "linear")
    assert fit.intercept_s == pytest.approx(TRUE["overhead_s"], rel=0.15)
    assert fit.per_token_s == pytest.approx(TRUE["per_token_s"], rel=0.1)
    assert fit.per_prefill_attention_pair_s == pytest.approx(TRUE["per_pair_s"], rel=0.15)
    assert fit.per_decode_context_token_s[0] == pytest.approx(TRUE["per_context_s"], rel=0.1)
    # With 2 % noise per run the median of 7 is within a few %, and so is the fit.
    assert error.held_out_mean_ape is not None and error.held_out_mean_ape < 0.03


def test_noise_free_piecewise_fit_is_exact_on_held_out_points() -> None:
    samples = split_held_out(_samples(0.0, np.random.default_rng(0)))
    fit, error = fit_samples(samples, "piecewise")
    assert fit.kind == "piecewise" and fit.token_knots
    assert error.held_out_max_ape is not None and error.held_out_max_ape < 1e-6


def test_piecewise_fit_captures_a_non_smooth_batch_cost() -> None:
    """Batch 3 slower than batch 4 (as on a CPU): a table in T fits, a line cannot."""
    rng = np.random.default_rng(5)
    samples = []
    for s in _samples(0.0, rng):
        bump = 8e-3 if s.num_decode_seqs == 3 and s.num_prefill_tokens == 0 else 0.0
        samples.append(s.model_copy(update={"median_s": s.median_s + bump}))
    piecewise, _ = fit_samples(samples, "piecewise")
    linear, _ = fit_samples(samples, "linear")
    shape = StepShape.build(decode_context_tokens=[512] * 3)
    truth = _truth(shape) + 8e-3
    assert CalibratedCost(piecewise).step_s(shape) == pytest.approx(truth, rel=0.02)
    assert abs(CalibratedCost(linear).step_s(shape) / truth - 1) > 0.1


def test_fit_coefficients_are_non_negative() -> None:
    samples = _samples(0.2, np.random.default_rng(7))  # very noisy
    kinds: tuple[FitKind, ...] = ("linear", "piecewise")
    for kind in kinds:
        fit, _ = fit_samples(samples, kind)
        values = fit.model_dump()
        for name, value in values.items():
            if name.endswith("_s") and isinstance(value, float):
                assert value >= 0, name
        assert min(fit.token_knot_s, default=0) >= 0
        assert min(fit.per_decode_context_token_s) >= 0


def test_split_is_deterministic_per_section_and_keeps_the_ends() -> None:
    samples = _samples(0.0, np.random.default_rng(0))
    first, second = split_held_out(samples), split_held_out(samples)
    assert [s.held_out for s in first] == [s.held_out for s in second]
    for section in ("prefill", "decode", "mixed"):
        flags = [s.held_out for s in first if s.section == section]
        assert not flags[0] and not flags[-1]
        assert 0 < sum(flags) <= len(flags) // 4 + 1


def test_fit_error_counts_and_reports_fractions() -> None:
    samples = split_held_out(_samples(0.0, np.random.default_rng(0)))
    fit, _ = fit_samples(samples, "linear")
    doubled = [s.model_copy(update={"median_s": 2 * s.median_s}) for s in samples]
    error = fit_error(fit, doubled)
    assert error.num_train + error.num_held_out == len(samples)
    assert error.held_out_mean_ape == pytest.approx(0.5, abs=0.01)


def test_fit_without_samples_fails() -> None:
    with pytest.raises(ValueError):
        fit_samples([])


def test_refitting_the_shipped_artifact_reproduces_its_fit() -> None:
    """The shipped coefficients are what this code fits to the shipped samples."""
    path = Path(__file__).resolve().parent.parent / "calibration/artifacts/cpu-tiny-fp32.json"
    assert path.is_file(), f"the shipped artifact {path} is missing"  # fail, never skip
    artifact = load_artifact(path)
    fit, error = fit_samples(artifact.samples, artifact.fit.kind)
    assert error.num_held_out == artifact.fit_error.num_held_out
    assert error.held_out_mean_ape == pytest.approx(artifact.fit_error.held_out_mean_ape, rel=1e-6)
    shipped, refitted = CalibratedCost(artifact.fit), CalibratedCost(fit)
    for sample in artifact.samples:
        expected = shipped.step_s(sample.shape)
        assert refitted.step_s(sample.shape) == pytest.approx(expected, rel=1e-6)
