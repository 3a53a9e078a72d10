"""Length and think-time samplers: configs, bounds, statistics, determinism."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from sim.errors import ConfigError
from sim.workload.lengths import (
    EmpiricalLength,
    ExponentialLength,
    ExponentialThinkTime,
    FixedLength,
    FixedThinkTime,
    LengthConfig,
    LognormalLength,
    NormalLength,
    ThinkTimeConfig,
    UniformLength,
    make_length_sampler,
    sample_think_times_s,
)

LENGTH = TypeAdapter(LengthConfig)
THINK = TypeAdapter(ThinkTimeConfig)
REPO = Path(__file__).resolve().parents[1]
AZURE_SAMPLE = REPO / "scenarios" / "data" / "azure_conv_sample.csv"


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def sample_lengths(
    config: LengthConfig,
    generator: np.random.Generator,
    size: int,
    base_dir: Path | str | None = None,
) -> npt.NDArray[np.int64]:
    """``size`` draws from ``config``'s sampler."""
    return make_length_sampler(config, base_dir).sample(generator, size)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- configs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ({"kind": "fixed", "tokens": 7}, FixedLength),
        ({"kind": "uniform", "min_tokens": 1, "max_tokens": 9}, UniformLength),
        ({"kind": "normal", "mean_tokens": 100, "std_tokens": 10}, NormalLength),
        ({"kind": "lognormal", "median_tokens": 100, "sigma": 1.0}, LognormalLength),
        ({"kind": "exponential", "mean_tokens": 50}, ExponentialLength),
        ({"kind": "empirical", "path": "x.csv", "column": "n"}, EmpiricalLength),
    ],
)
def test_union_picks_model_by_kind(data: dict[str, Any], cls: type) -> None:
    assert isinstance(LENGTH.validate_python(data), cls)


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "fixed", "tokens": 0},
        {"kind": "fixed", "tokens": -3},
        {"kind": "fixed", "tokens": 5, "extra": 1},
        {"kind": "uniform", "min_tokens": 10, "max_tokens": 9},
        {"kind": "uniform", "min_tokens": 0, "max_tokens": 9},
        {"kind": "uniform", "min_tokens": 3},
        {"kind": "normal", "mean_tokens": 0, "std_tokens": 1},
        {"kind": "normal", "mean_tokens": 10, "std_tokens": -1},
        {"kind": "normal", "mean_tokens": 10, "std_tokens": 1, "min_tokens": 20, "max_tokens": 5},
        {"kind": "lognormal", "median_tokens": -1, "sigma": 1},
        {"kind": "lognormal", "median_tokens": 10, "sigma": -0.1},
        {"kind": "lognormal", "median_tokens": 10, "sigma": 1, "min_tokens": 0},
        {"kind": "exponential", "mean_tokens": 0},
        {"kind": "exponential", "mean_tokens": 5, "min_tokens": 9, "max_tokens": 8},
        {"kind": "empirical", "path": "", "column": "n"},
        {"kind": "empirical", "path": "x.csv"},
        {"kind": "gaussian", "mean_tokens": 5},
        {"tokens": 5},
    ],
)
def test_invalid_length_configs_are_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        LENGTH.validate_python(data)


def test_configs_are_frozen() -> None:
    config = FixedLength(tokens=3)
    with pytest.raises(ValidationError):
        config.tokens = 4


def test_min_greater_than_max_message_names_both() -> None:
    with pytest.raises(ValidationError, match=r"min_tokens .*max_tokens"):
        NormalLength(mean_tokens=10, std_tokens=1, min_tokens=20, max_tokens=5)


def test_exponential_min_tokens_defaults_to_one() -> None:
    config = ExponentialLength(mean_tokens=3)
    assert config.min_tokens == 1
    assert config.max_tokens is None


# --- sampling: types and bounds ----------------------------------------------

PARAMETRIC: list[LengthConfig] = [
    FixedLength(tokens=17),
    UniformLength(min_tokens=3, max_tokens=30),
    NormalLength(mean_tokens=50, std_tokens=40, min_tokens=2, max_tokens=90),
    LognormalLength(median_tokens=200, sigma=1.5, min_tokens=4, max_tokens=4000),
    ExponentialLength(mean_tokens=20),
]


@pytest.mark.parametrize("config", PARAMETRIC)
def test_samples_are_int64_of_requested_size_and_positive(config: LengthConfig) -> None:
    draws = sample_lengths(config, rng(), 1000)
    assert draws.dtype == np.int64
    assert draws.shape == (1000,)
    assert draws.min() >= 1


@pytest.mark.parametrize("config", PARAMETRIC)
def test_zero_size_gives_empty_int64(config: LengthConfig) -> None:
    draws = sample_lengths(config, rng(), 0)
    assert draws.shape == (0,)
    assert draws.dtype == np.int64


@given(
    mean=st.floats(0.01, 1e5),
    std=st.floats(0.0, 1e5),
    low=st.integers(1, 1000),
    width=st.integers(0, 1000),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_normal_respects_bounds(mean: float, std: float, low: int, width: int, seed: int) -> None:
    config = NormalLength(mean_tokens=mean, std_tokens=std, min_tokens=low, max_tokens=low + width)
    draws = sample_lengths(config, rng(seed), 500)
    assert draws.min() >= low
    assert draws.max() <= low + width


@given(
    median=st.floats(0.01, 1e6),
    sigma=st.floats(0.0, 20.0),
    low=st.integers(1, 1000),
    width=st.one_of(st.none(), st.integers(0, 10_000)),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_lognormal_respects_bounds(
    median: float, sigma: float, low: int, width: int | None, seed: int
) -> None:
    high = None if width is None else low + width
    config = LognormalLength(median_tokens=median, sigma=sigma, min_tokens=low, max_tokens=high)
    draws = sample_lengths(config, rng(seed), 500)
    assert draws.dtype == np.int64
    assert draws.min() >= low
    if high is not None:
        assert draws.max() <= high


@given(
    mean=st.floats(0.01, 1e6),
    low=st.integers(1, 100),
    width=st.one_of(st.none(), st.integers(0, 1000)),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_exponential_respects_bounds(mean: float, low: int, width: int | None, seed: int) -> None:
    high = None if width is None else low + width
    config = ExponentialLength(mean_tokens=mean, min_tokens=low, max_tokens=high)
    draws = sample_lengths(config, rng(seed), 500)
    assert draws.min() >= low
    if high is not None:
        assert draws.max() <= high


@given(low=st.integers(1, 10_000), width=st.integers(0, 10_000), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_uniform_respects_inclusive_bounds(low: int, width: int, seed: int) -> None:
    draws = sample_lengths(UniformLength(min_tokens=low, max_tokens=low + width), rng(seed), 300)
    assert draws.min() >= low
    assert draws.max() <= low + width


def test_uniform_reaches_both_endpoints() -> None:
    draws = sample_lengths(UniformLength(min_tokens=5, max_tokens=8), rng(), 2000)
    assert set(draws.tolist()) == {5, 6, 7, 8}


def test_lognormal_huge_tail_without_max_stays_finite_and_positive() -> None:
    draws = sample_lengths(LognormalLength(median_tokens=1e6, sigma=50.0), rng(), 10_000)
    assert draws.min() >= 1
    assert draws.max() <= 2**53


# --- sampling: statistics ------------------------------------------------------


def test_fixed_is_constant() -> None:
    assert set(sample_lengths(FixedLength(tokens=42), rng(), 100).tolist()) == {42}


def test_uniform_mean() -> None:
    draws = sample_lengths(UniformLength(min_tokens=10, max_tokens=110), rng(), 100_000)
    assert abs(draws.mean() - 60) < 0.5


def test_normal_mean_and_std_when_clipping_is_negligible() -> None:
    config = NormalLength(mean_tokens=1000, std_tokens=100)
    draws = sample_lengths(config, rng(), 100_000)
    assert abs(draws.mean() - 1000) < 2
    assert abs(draws.std() - 100) < 2


def test_normal_clips_to_min_tokens() -> None:
    config = NormalLength(mean_tokens=5, std_tokens=50, min_tokens=3)
    draws = sample_lengths(config, rng(), 10_000)
    # About half the raw draws fall below 3: all of them land on 3 exactly.
    assert 0.4 < np.mean(draws == 3) < 0.6


def test_normal_rounds_to_nearest() -> None:
    draws = sample_lengths(NormalLength(mean_tokens=10.4, std_tokens=0), rng(), 10)
    assert set(draws.tolist()) == {10}


def test_lognormal_median_and_sigma() -> None:
    config = LognormalLength(median_tokens=500, sigma=0.8)
    draws = sample_lengths(config, rng(), 100_000)
    assert abs(np.median(draws) / 500 - 1) < 0.02
    assert abs(np.log(draws).std() - 0.8) < 0.02


def test_exponential_rounds_up_geometric_mean() -> None:
    mean = 20.0
    draws = sample_lengths(ExponentialLength(mean_tokens=mean), rng(), 200_000)
    geometric_mean = 1.0 / (1.0 - math.exp(-1.0 / mean))
    assert abs(draws.mean() / geometric_mean - 1) < 0.01
    # Memoryless: P(X > k + j | X > k) == P(X > j).
    assert abs(np.mean(draws[draws > 10] > 30) - np.mean(draws > 20)) < 0.01


def test_exponential_small_mean_is_mostly_one() -> None:
    draws = sample_lengths(ExponentialLength(mean_tokens=0.1), rng(), 1000)
    assert np.mean(draws == 1) > 0.99


# --- determinism -------------------------------------------------------------


@pytest.mark.parametrize("config", PARAMETRIC[1:])
def test_same_seed_same_draws(config: LengthConfig) -> None:
    assert np.array_equal(sample_lengths(config, rng(7), 500), sample_lengths(config, rng(7), 500))


@pytest.mark.parametrize("config", PARAMETRIC[1:])
def test_different_seed_different_draws(config: LengthConfig) -> None:
    assert not np.array_equal(
        sample_lengths(config, rng(7), 500), sample_lengths(config, rng(8), 500)
    )


@pytest.mark.parametrize("config", PARAMETRIC[1:])
def test_draws_are_prefix_stable(config: LengthConfig) -> None:
    """Asking for more draws extends the sequence rather than changing it."""
    short = sample_lengths(config, rng(3), 100)
    long = sample_lengths(config, rng(3), 1000)
    assert np.array_equal(long[:100], short)


def test_one_million_draws() -> None:
    """A million at once (their speed: benchmarks/hot_paths.py)."""
    for config in PARAMETRIC:
        draws = sample_lengths(config, rng(), 1_000_000)
        assert draws.shape == (1_000_000,) and draws.min() >= 1


# --- empirical ----------------------------------------------------------------


def test_empirical_yields_only_values_from_the_column(tmp_path: Path) -> None:
    write(tmp_path / "lens.csv", "a,n\n1,5\n2,17\n3,5\n4,300\n")
    config = EmpiricalLength(path="lens.csv", column="n")
    draws = sample_lengths(config, rng(), 5000, base_dir=tmp_path)
    assert draws.dtype == np.int64
    assert set(draws.tolist()) == {5, 17, 300}
    # 5 appears twice in the column, so it is drawn about twice as often.
    assert 0.45 < np.mean(draws == 5) < 0.55


def test_empirical_azure_columns_work() -> None:
    column_values = np.loadtxt(
        AZURE_SAMPLE, delimiter=",", skiprows=1, usecols=(1, 2), dtype=np.int64
    )
    for index, column in enumerate(["ContextTokens", "GeneratedTokens"]):
        config = EmpiricalLength(path="data/azure_conv_sample.csv", column=column)
        draws = sample_lengths(config, rng(), 20_000, base_dir=REPO / "scenarios")
        assert set(draws.tolist()) <= set(column_values[:, index].tolist())
        assert abs(draws.mean() / column_values[:, index].mean() - 1) < 0.05


def test_empirical_absolute_path_ignores_base_dir(tmp_path: Path) -> None:
    path = write(tmp_path / "lens.csv", "n\n9\n")
    config = EmpiricalLength(path=str(path), column="n")
    assert set(sample_lengths(config, rng(), 10, base_dir="/nonexistent").tolist()) == {9}


def test_empirical_sampler_reads_file_once(tmp_path: Path) -> None:
    path = write(tmp_path / "lens.csv", "n\n4\n")
    sampler = make_length_sampler(EmpiricalLength(path="lens.csv", column="n"), tmp_path)
    path.unlink()
    assert sampler.sample(rng(), 3).tolist() == [4, 4, 4]


def test_empirical_missing_file(tmp_path: Path) -> None:
    config = EmpiricalLength(path="nope.csv", column="n")
    with pytest.raises(ConfigError, match=r"nope\.csv.*not found"):
        make_length_sampler(config, tmp_path)


def test_empirical_missing_column(tmp_path: Path) -> None:
    write(tmp_path / "lens.csv", "a,b\n1,2\n")
    with pytest.raises(ConfigError, match=r"missing column 'n'"):
        make_length_sampler(EmpiricalLength(path="lens.csv", column="n"), tmp_path)


@pytest.mark.parametrize(("bad", "line"), [("abc", 3), ("0", 4), ("-2", 3), ("2.5", 4)])
def test_empirical_bad_value_names_line(tmp_path: Path, bad: str, line: int) -> None:
    rows = ["n", "5", "6", "7"]
    rows[line - 1] = bad
    write(tmp_path / "lens.csv", "\n".join(rows) + "\n")
    with pytest.raises(ConfigError, match=f"line {line}:"):
        make_length_sampler(EmpiricalLength(path="lens.csv", column="n"), tmp_path)


def test_empirical_empty_column(tmp_path: Path) -> None:
    write(tmp_path / "lens.csv", "n\n")
    with pytest.raises(ConfigError, match=r"no values"):
        make_length_sampler(EmpiricalLength(path="lens.csv", column="n"), tmp_path)


# --- think times -------------------------------------------------------------------


def test_think_union_by_kind() -> None:
    assert isinstance(THINK.validate_python({"kind": "fixed", "value_s": 0}), FixedThinkTime)
    assert isinstance(
        THINK.validate_python({"kind": "exponential", "mean_s": 2}), ExponentialThinkTime
    )


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "fixed", "value_s": -1},
        {"kind": "exponential", "mean_s": 0},
        {"kind": "exponential", "mean": 1},
        {"kind": "fixed", "seconds": 1},
    ],
)
def test_invalid_think_configs(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        THINK.validate_python(data)


def test_fixed_think_time() -> None:
    draws = sample_think_times_s(FixedThinkTime(value_s=1.5), rng(), 10)
    assert draws.dtype == np.float64
    assert draws.tolist() == [1.5] * 10


def test_exponential_think_time_mean_and_cv() -> None:
    draws = sample_think_times_s(ExponentialThinkTime(mean_s=3.0), rng(), 100_000)
    assert draws.dtype == np.float64
    assert draws.min() >= 0
    assert abs(draws.mean() / 3.0 - 1) < 0.02
    assert abs(draws.std() / draws.mean() - 1) < 0.02


def test_think_time_determinism() -> None:
    config = ExponentialThinkTime(mean_s=1.0)
    assert np.array_equal(
        sample_think_times_s(config, rng(1), 50), sample_think_times_s(config, rng(1), 50)
    )
    assert not np.array_equal(
        sample_think_times_s(config, rng(1), 50), sample_think_times_s(config, rng(2), 50)
    )
