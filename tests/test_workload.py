"""Workload configs and generation: synthetic, trace and closed-loop kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from sim.errors import ConfigError
from sim.workload.arrivals import ConstantArrival, GammaArrival, PoissonArrival
from sim.workload.generate import (
    CLOSED_LOOP_BLOCK,
    ClosedLoopSource,
    ClosedLoopWorkload,
    RequestArrays,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadConfig,
    generate_open_loop,
)
from sim.workload.lengths import (
    EmpiricalLength,
    ExponentialLength,
    ExponentialThinkTime,
    FixedLength,
    FixedThinkTime,
    LognormalLength,
    UniformLength,
)
from sim.workload.trace import AZURE_COLUMNS, CSV_DEFAULT_COLUMNS, TraceColumns

WORKLOAD = TypeAdapter(WorkloadConfig)
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def synthetic(**overrides: Any) -> SyntheticWorkload:
    data: dict[str, Any] = {
        "kind": "synthetic",
        "arrival": {"kind": "poisson", "rate_per_s": 5.0},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 10, "max_tokens": 1000},
        "output_tokens": {
            "kind": "lognormal",
            "median_tokens": 100,
            "sigma": 1.0,
            "max_tokens": 2000,
        },
        "num_requests": 500,
    }
    data.update(overrides)
    config = WORKLOAD.validate_python(data)
    assert isinstance(config, SyntheticWorkload)
    return config


def closed(**overrides: Any) -> ClosedLoopWorkload:
    data: dict[str, Any] = {
        "kind": "closed_loop",
        "num_users": 4,
        "think_time_s": {"kind": "exponential", "mean_s": 2.0},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 100},
        "output_tokens": {"kind": "exponential", "mean_tokens": 30},
        "num_requests": 100,
    }
    data.update(overrides)
    config = WORKLOAD.validate_python(data)
    assert isinstance(config, ClosedLoopWorkload)
    return config


# --- config validation ----------------------------------------------------------------


def test_union_by_kind() -> None:
    assert isinstance(synthetic(), SyntheticWorkload)
    assert isinstance(closed(), ClosedLoopWorkload)
    assert isinstance(WORKLOAD.validate_python({"kind": "trace", "path": "t.csv"}), TraceWorkload)


def test_nested_configs_are_parsed() -> None:
    config = synthetic(arrival={"kind": "gamma", "rate_per_s": 2, "burstiness": 0.5})
    assert isinstance(config.arrival, GammaArrival)
    assert isinstance(config.prompt_tokens, UniformLength)
    assert isinstance(config.output_tokens, LognormalLength)


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_requests": None},
        {"num_requests": 10, "duration_s": 5.0},
        {"num_requests": 0},
        {"num_requests": -5},
        {"num_requests": None, "duration_s": 0.0},
        {"num_requests": None, "duration_s": float("inf")},
        {"arrival": {"kind": "poisson", "rate_per_s": 0}},
        {"arrival": {"kind": "poisson", "rate_per_s": -1}},
        {"arrival": {"kind": "gamma", "rate_per_s": 1, "burstiness": 0}},
        {"prompt_tokens": {"kind": "uniform", "min_tokens": 9, "max_tokens": 3}},
        {"output_tokens": {"kind": "fixed", "tokens": 0}},
        {"seed": 3},
    ],
)
def test_invalid_synthetic(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        synthetic(**overrides)


def test_exactly_one_extent_message() -> None:
    with pytest.raises(ValidationError, match=r"exactly one of num_requests and duration_s"):
        synthetic(num_requests=None)


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_users": 0},
        {"num_requests": 0},
        {"think_time_s": {"kind": "exponential", "mean_s": -1}},
        {"think_time_s": 1.0},
        {
            "prompt_tokens": {
                "kind": "normal",
                "mean_tokens": 10,
                "std_tokens": 1,
                "min_tokens": 5,
                "max_tokens": 2,
            }
        },
    ],
)
def test_invalid_closed_loop(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        closed(**overrides)


@pytest.mark.parametrize(
    "data",
    [
        {"path": ""},
        {"path": "t.csv", "format": "parquet"},
        {"path": "t.csv", "time_scale": 0},
        {"path": "t.csv", "time_scale": -1},
        {"path": "t.csv", "max_requests": 0},
        {"path": "t.csv", "start_offset_s": -1},
        {"path": "t.csv", "duration_s": 0},
        {"path": "t.csv", "timestamp_column": "t"},
        {"path": "t.csv", "format": "csv", "prompt_tokens_column": ""},
        {"path": "t.csv", "prompt_tokens": {"kind": "fixed", "tokens": 3}},
    ],
)
def test_invalid_trace(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        WORKLOAD.validate_python({"kind": "trace", **data})


def test_trace_columns() -> None:
    assert TraceWorkload(path="t.csv").columns() == AZURE_COLUMNS
    assert TraceWorkload(path="t.csv", format="csv").columns() == CSV_DEFAULT_COLUMNS
    custom = TraceWorkload(
        path="t.csv", format="csv", timestamp_column="ts", output_tokens_column="out"
    )
    assert custom.columns() == TraceColumns("ts", CSV_DEFAULT_COLUMNS.prompt_tokens, "out")


def test_configs_are_frozen() -> None:
    with pytest.raises(ValidationError):
        synthetic().num_requests = 3


# --- RequestArrays ----------------------------------------------------------------------


def test_request_arrays_len_and_read_only() -> None:
    arrays = RequestArrays(np.array([0.0, 1.0]), np.array([3, 4]), np.array([5, 6]))
    assert len(arrays) == 2
    with pytest.raises(ValueError):
        arrays.arrival_s[0] = 5.0


@pytest.mark.parametrize(
    "args",
    [
        (np.array([0.0, 1.0]), np.array([3]), np.array([5, 6])),
        (np.array([0.0]), np.array([3]), np.array([5, 6])),
        (np.array([[0.0]]), np.array([[3]]), np.array([[5]])),
        (np.array([0, 1]), np.array([3, 4]), np.array([5, 6])),
        (np.array([0.0, 1.0]), np.array([3.0, 4.0]), np.array([5, 6])),
        (np.array([0.0, 1.0]), np.array([3, 4]), np.array([5.0, 6.0])),
    ],
)
def test_request_arrays_rejects_mismatches(args: tuple[Any, Any, Any]) -> None:
    with pytest.raises(ValueError):
        RequestArrays(*args)


# --- synthetic generation ---------------------------------------------------------------------


def check_arrays(arrays: RequestArrays) -> None:
    assert arrays.arrival_s.dtype == np.float64
    assert arrays.num_prompt_tokens.dtype == np.int64
    assert arrays.num_output_tokens.dtype == np.int64
    assert (
        len(arrays.arrival_s)
        == len(arrays.num_prompt_tokens)
        == len(arrays.num_output_tokens)
        == len(arrays)
    )
    assert np.all(np.diff(arrays.arrival_s) >= 0)
    if len(arrays):
        assert arrays.num_prompt_tokens.min() >= 1
        assert arrays.num_output_tokens.min() >= 1


def test_synthetic_num_requests() -> None:
    arrays = generate_open_loop(synthetic(num_requests=321), rng())
    check_arrays(arrays)
    assert len(arrays) == 321
    assert arrays.num_prompt_tokens.min() >= 10
    assert arrays.num_prompt_tokens.max() <= 1000
    assert arrays.num_output_tokens.max() <= 2000


def test_synthetic_duration() -> None:
    arrays = generate_open_loop(synthetic(num_requests=None, duration_s=100.0), rng())
    check_arrays(arrays)
    assert np.all(arrays.arrival_s < 100.0)
    assert 350 < len(arrays) < 650  # Poisson(500): ~11 standard deviations of room


def test_same_seed_same_workload() -> None:
    a = generate_open_loop(synthetic(), rng(42))
    b = generate_open_loop(synthetic(), rng(42))
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.num_prompt_tokens, b.num_prompt_tokens)
    assert np.array_equal(a.num_output_tokens, b.num_output_tokens)


def test_different_seed_different_workload() -> None:
    a = generate_open_loop(synthetic(), rng(42))
    b = generate_open_loop(synthetic(), rng(43))
    assert not np.array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.num_prompt_tokens, b.num_prompt_tokens)
    assert not np.array_equal(a.num_output_tokens, b.num_output_tokens)


def test_second_call_on_one_generator_differs() -> None:
    generator = rng(42)
    a = generate_open_loop(synthetic(), generator)
    b = generate_open_loop(synthetic(), generator)
    assert not np.array_equal(a.num_prompt_tokens, b.num_prompt_tokens)


def test_streams_are_independent_of_each_other() -> None:
    """Prompt, output and arrival streams do not share draws."""
    arrays = generate_open_loop(
        synthetic(
            prompt_tokens={"kind": "uniform", "min_tokens": 1, "max_tokens": 1000},
            output_tokens={"kind": "uniform", "min_tokens": 1, "max_tokens": 1000},
            num_requests=5000,
        ),
        rng(),
    )
    assert not np.array_equal(arrays.num_prompt_tokens, arrays.num_output_tokens)
    assert abs(np.corrcoef(arrays.num_prompt_tokens, arrays.num_output_tokens)[0, 1]) < 0.05


@given(
    rate=st.floats(0.1, 1000.0),
    kind=st.sampled_from(["poisson", "gamma", "constant"]),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=30, deadline=None)
def test_changing_the_arrival_process_keeps_the_lengths(rate: float, kind: str, seed: int) -> None:
    base = generate_open_loop(synthetic(), rng(seed))
    changed = generate_open_loop(synthetic(arrival={"kind": kind, "rate_per_s": rate}), rng(seed))
    assert np.array_equal(base.num_prompt_tokens, changed.num_prompt_tokens)
    assert np.array_equal(base.num_output_tokens, changed.num_output_tokens)


def test_changing_one_length_distribution_keeps_the_others() -> None:
    base = generate_open_loop(synthetic(), rng(9))
    changed = generate_open_loop(synthetic(prompt_tokens={"kind": "fixed", "tokens": 77}), rng(9))
    assert np.array_equal(base.arrival_s, changed.arrival_s)
    assert np.array_equal(base.num_output_tokens, changed.num_output_tokens)
    assert set(changed.num_prompt_tokens.tolist()) == {77}


def test_duration_mode_with_a_higher_rate_extends_the_lengths() -> None:
    """Request i keeps its lengths when a higher rate brings more requests."""
    slow = generate_open_loop(synthetic(num_requests=None, duration_s=50.0), rng(4))
    fast = generate_open_loop(
        synthetic(
            num_requests=None, duration_s=50.0, arrival={"kind": "poisson", "rate_per_s": 20.0}
        ),
        rng(4),
    )
    assert len(fast) > len(slow)
    assert np.array_equal(fast.num_prompt_tokens[: len(slow)], slow.num_prompt_tokens)
    assert np.array_equal(fast.num_output_tokens[: len(slow)], slow.num_output_tokens)


def test_synthetic_with_empirical_lengths_relative_to_base_dir() -> None:
    config = synthetic(
        prompt_tokens={
            "kind": "empirical",
            "path": "data/azure_conv_sample.csv",
            "column": "ContextTokens",
        },
        output_tokens={
            "kind": "empirical",
            "path": "data/azure_conv_sample.csv",
            "column": "GeneratedTokens",
        },
    )
    arrays = generate_open_loop(config, rng(), base_dir=SCENARIOS)
    check_arrays(arrays)
    trace = generate_open_loop(TraceWorkload(path="data/azure_conv_sample.csv"), rng(), SCENARIOS)
    assert set(arrays.num_prompt_tokens.tolist()) <= set(trace.num_prompt_tokens.tolist())
    assert set(arrays.num_output_tokens.tolist()) <= set(trace.num_output_tokens.tolist())


def test_missing_empirical_file_is_a_config_error(tmp_path: Path) -> None:
    config = synthetic(prompt_tokens={"kind": "empirical", "path": "nope.csv", "column": "n"})
    with pytest.raises(ConfigError, match=r"nope\.csv"):
        generate_open_loop(config, rng(), tmp_path)


def test_one_million_requests() -> None:
    """A million at once (their speed: benchmarks/hot_paths.py)."""
    config = synthetic(
        arrival={"kind": "gamma", "rate_per_s": 50.0, "burstiness": 0.5},
        prompt_tokens={"kind": "lognormal", "median_tokens": 800, "sigma": 1.0, "max_tokens": 8000},
        output_tokens={"kind": "normal", "mean_tokens": 200, "std_tokens": 80, "max_tokens": 1000},
        num_requests=1_000_000,
    )
    arrays = generate_open_loop(config, rng())
    assert len(arrays) == 1_000_000


# --- trace generation --------------------------------------------------------------------------


def test_trace_azure_sample() -> None:
    arrays = generate_open_loop(TraceWorkload(path="data/azure_conv_sample.csv"), rng(), SCENARIOS)
    check_arrays(arrays)
    assert len(arrays) == 2000
    assert arrays.arrival_s[0] == 0.0


def test_trace_options_are_passed_through() -> None:
    base = generate_open_loop(TraceWorkload(path="data/azure_conv_sample.csv"), rng(), SCENARIOS)
    config = TraceWorkload(path="data/azure_conv_sample.csv", time_scale=0.5, max_requests=100)
    arrays = generate_open_loop(config, rng(), SCENARIOS)
    assert len(arrays) == 100
    assert np.allclose(arrays.arrival_s, base.arrival_s[:100] * 0.5)
    assert np.array_equal(arrays.num_prompt_tokens, base.num_prompt_tokens[:100])


def test_trace_window() -> None:
    base = generate_open_loop(TraceWorkload(path="data/azure_conv_sample.csv"), rng(), SCENARIOS)
    config = TraceWorkload(path="data/azure_conv_sample.csv", start_offset_s=60.0, duration_s=30.0)
    arrays = generate_open_loop(config, rng(), SCENARIOS)
    inside = (base.arrival_s >= 60.0) & (base.arrival_s < 90.0)
    assert len(arrays) == int(inside.sum())
    assert np.array_equal(arrays.num_output_tokens, base.num_output_tokens[inside])
    assert arrays.arrival_s[0] == 0.0
    assert arrays.arrival_s[-1] < 30.0


def test_trace_generic_csv(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("t,in,out\n0,5,6\n1.5,7,8\n")
    config = TraceWorkload(
        path="t.csv",
        format="csv",
        timestamp_column="t",
        prompt_tokens_column="in",
        output_tokens_column="out",
    )
    arrays = generate_open_loop(config, rng(), tmp_path)
    assert arrays.arrival_s.tolist() == [0.0, 1.5]
    assert arrays.num_prompt_tokens.tolist() == [5, 7]
    assert arrays.num_output_tokens.tolist() == [6, 8]


def test_trace_ignores_the_generator() -> None:
    config = TraceWorkload(path="data/azure_conv_sample.csv", max_requests=50)
    a = generate_open_loop(config, rng(1), SCENARIOS)
    b = generate_open_loop(config, rng(2), SCENARIOS)
    assert np.array_equal(a.arrival_s, b.arrival_s)


def test_trace_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"file not found"):
        generate_open_loop(TraceWorkload(path="missing.csv"), rng(), tmp_path)
    (tmp_path / "bad.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,0\n"
    )
    with pytest.raises(ConfigError, match=r"bad\.csv, line 2:"):
        generate_open_loop(TraceWorkload(path="bad.csv"), rng(), tmp_path)


# --- closed loop ------------------------------------------------------------------------------


def test_closed_loop_source_exposes_counts() -> None:
    source = ClosedLoopSource(closed(num_users=7, num_requests=33), rng())
    assert source.num_users == 7
    assert source.num_requests == 33


def test_closed_loop_types_and_bounds() -> None:
    source = ClosedLoopSource(closed(), rng())
    for _ in range(CLOSED_LOOP_BLOCK * 2 + 5):  # crosses block boundaries
        prompt, output = source.next_lengths()
        think = source.next_think_s()
        assert type(prompt) is int and type(output) is int
        assert type(think) is float
        assert 1 <= prompt <= 100
        assert output >= 1
        assert think >= 0


def test_closed_loop_same_seed_same_sequence() -> None:
    a = ClosedLoopSource(closed(), rng(5))
    b = ClosedLoopSource(closed(), rng(5))
    assert [a.next_lengths() for _ in range(5000)] == [b.next_lengths() for _ in range(5000)]
    assert [a.next_think_s() for _ in range(5000)] == [b.next_think_s() for _ in range(5000)]


def test_closed_loop_different_seed_different_sequence() -> None:
    a = ClosedLoopSource(closed(), rng(5))
    b = ClosedLoopSource(closed(), rng(6))
    assert [a.next_lengths() for _ in range(100)] != [b.next_lengths() for _ in range(100)]
    assert [a.next_think_s() for _ in range(100)] != [b.next_think_s() for _ in range(100)]


def test_closed_loop_lengths_do_not_depend_on_think_calls_or_think_config() -> None:
    a = ClosedLoopSource(closed(), rng(5))
    b = ClosedLoopSource(closed(think_time_s={"kind": "fixed", "value_s": 0.0}), rng(5))
    lengths_a = []
    for _ in range(300):
        lengths_a.append(a.next_lengths())
        for _ in range(3):
            a.next_think_s()
    lengths_b = [b.next_lengths() for _ in range(300)]
    assert lengths_a == lengths_b


def test_closed_loop_fixed_think_time() -> None:
    source = ClosedLoopSource(closed(think_time_s={"kind": "fixed", "value_s": 1.25}), rng())
    assert {source.next_think_s() for _ in range(100)} == {1.25}


def test_closed_loop_statistics() -> None:
    source = ClosedLoopSource(
        closed(prompt_tokens={"kind": "uniform", "min_tokens": 1, "max_tokens": 99}), rng()
    )
    prompts = np.array([source.next_lengths()[0] for _ in range(50_000)])
    thinks = np.array([source.next_think_s() for _ in range(50_000)])
    assert abs(prompts.mean() / 50 - 1) < 0.02
    assert abs(thinks.mean() / 2.0 - 1) < 0.03


def test_closed_loop_matches_open_loop_length_streams() -> None:
    """Both kinds give the prompt stream the same child generator position."""
    source = ClosedLoopSource(closed(), rng(8))
    child_prompt = rng(8).spawn(3)[1]
    expected = child_prompt.integers(1, 100, size=10, endpoint=True).tolist()
    assert [source.next_lengths()[0] for _ in range(10)] == expected


def test_closed_loop_empirical_lengths() -> None:
    config = closed(
        prompt_tokens={
            "kind": "empirical",
            "path": "data/azure_conv_sample.csv",
            "column": "ContextTokens",
        }
    )
    source = ClosedLoopSource(config, rng(), SCENARIOS)
    trace = generate_open_loop(TraceWorkload(path="data/azure_conv_sample.csv"), rng(), SCENARIOS)
    allowed = set(trace.num_prompt_tokens.tolist())
    assert all(source.next_lengths()[0] in allowed for _ in range(500))


def test_closed_loop_bad_empirical_file_fails_at_construction(tmp_path: Path) -> None:
    config = closed(output_tokens={"kind": "empirical", "path": "none.csv", "column": "n"})
    with pytest.raises(ConfigError, match=r"none\.csv"):
        ClosedLoopSource(config, rng(), tmp_path)


def test_length_models_importable_from_lengths() -> None:
    # The workload configs reuse the length and think-time models as-is.
    config = closed(think_time_s={"kind": "exponential", "mean_s": 1.0})
    assert isinstance(config.think_time_s, ExponentialThinkTime)
    assert isinstance(
        closed(think_time_s={"kind": "fixed", "value_s": 1}).think_time_s, FixedThinkTime
    )
    assert isinstance(closed().output_tokens, ExponentialLength)
    assert isinstance(
        synthetic(prompt_tokens={"kind": "fixed", "tokens": 2}).prompt_tokens, FixedLength
    )
    assert isinstance(
        synthetic(prompt_tokens={"kind": "empirical", "path": "p", "column": "c"}).prompt_tokens,
        EmpiricalLength,
    )
    assert isinstance(
        synthetic(arrival={"kind": "constant", "rate_per_s": 1}).arrival, ConstantArrival
    )
    assert isinstance(synthetic().arrival, PoissonArrival)
