"""Serving metrics: per-request latencies, weighted quantiles, ITL, the vllm-style summary."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from frontend_frames import step_table
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.engine.records import RequestTable, completed_mask
from sim.engine.step_runs import StepTable
from sim.errors import ConfigError
from sim.metrics.itl import itl_distribution
from sim.metrics.quantiles import latency_stats_ms, percentile_label, weighted_quantiles
from sim.metrics.stats import Slo, good_mask, summarize, with_request_metrics

NAN = math.nan


@dataclasses.dataclass
class Req:
    """One hand-built request row; times in seconds."""

    arrival_s: float = 0.0
    ttft_s: float = 0.1
    e2el_s: float = 1.0
    num_generated_tokens: int = 10
    num_prompt_tokens: int = 100
    queue_s: float = 0.02
    rejection_reason: str | None = None


def frame(*reqs: Req) -> pd.DataFrame:
    """A requests frame in the simulator's contract; rejected rows get NaN times."""
    rows: list[dict[str, Any]] = []
    for i, r in enumerate(reqs):
        rejected = bool(r.rejection_reason)
        ready = r.arrival_s + 0.001
        rows.append(
            {
                "request_id": i,
                "arrival_s": r.arrival_s,
                "ready_s": ready,
                "first_scheduled_s": NAN if rejected else ready + r.queue_s,
                "first_token_s": NAN if rejected else r.arrival_s + r.ttft_s,
                "finish_s": NAN if rejected else r.arrival_s + r.e2el_s,
                "num_prompt_tokens": r.num_prompt_tokens,
                "num_output_tokens": r.num_generated_tokens,
                "num_generated_tokens": 0 if rejected else r.num_generated_tokens,
                "num_preemptions": 0,
                "rejection_reason": r.rejection_reason,
                "replica": 0,
            }
        )
    return pd.DataFrame(rows)


def summarize_frame(reqs: pd.DataFrame, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``summarize`` of a frame, read as the table it holds (at its edge, as a measured run's)."""
    return summarize(RequestTable.from_frame(reqs), *args, **kwargs)


def steps_frame(durations_s: list[float], itl_tokens: list[int]) -> StepTable:
    end = np.cumsum(durations_s)
    return step_table(
        {
            "start_s": end - np.asarray(durations_s),
            "end_s": end,
            "num_prefill_tokens": 0,
            "num_decode_seqs": itl_tokens,
            "num_itl_tokens": np.asarray(itl_tokens, dtype=np.int32),
        }
    )


NO_STEPS = steps_frame([], [])
NO_EXTRA = np.empty(0)


# --- per-request columns -------------------------------------------------------------


def test_derived_columns_have_the_vllm_definitions() -> None:
    reqs = frame(Req(arrival_s=2.0, ttft_s=0.3, e2el_s=2.3, num_generated_tokens=11, queue_s=0.05))
    out = with_request_metrics(reqs)
    row = out.iloc[0]
    assert row["ttft_s"] == pytest.approx(0.3)
    assert row["e2el_s"] == pytest.approx(2.3)
    assert row["tpot_s"] == pytest.approx(2.0 / 10)
    assert row["queue_s"] == pytest.approx(0.05)


def test_derived_columns_leave_the_input_untouched_and_keep_its_columns() -> None:
    reqs = frame(Req(), Req())
    out = with_request_metrics(reqs)
    assert "ttft_s" not in reqs.columns
    assert list(out.columns[: len(reqs.columns)]) == list(reqs.columns)
    assert len(out) == len(reqs)


@pytest.mark.parametrize("num_generated", [0, 1])
def test_tpot_is_undefined_below_two_tokens(num_generated: int) -> None:
    out = with_request_metrics(frame(Req(num_generated_tokens=num_generated)))
    assert math.isnan(out["tpot_s"].iloc[0])


def test_events_that_never_happened_give_nan_latencies() -> None:
    out = with_request_metrics(frame(Req(rejection_reason="prompt too long")))
    for column in ("ttft_s", "tpot_s", "e2el_s", "queue_s"):
        assert math.isnan(out[column].iloc[0]), column


def test_missing_columns_are_named() -> None:
    with pytest.raises(ValueError, match="finish_s"):
        with_request_metrics(frame(Req()).drop(columns="finish_s"))


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        (["", None, "kv", NAN], [False, False, True, False]),
        (pd.array(["", pd.NA, "queue full"], dtype="string"), [False, False, True]),
        (pd.Categorical(["", "kv", ""]), [False, True, False]),
        ([NAN, NAN], [False, False]),
    ],
)
def test_rejection_is_a_non_empty_reason(reasons: Any, expected: list[bool]) -> None:
    reqs = frame(*[Req() for _ in expected])
    reqs["rejection_reason"] = reasons
    assert RequestTable.from_frame(reqs).rejected.tolist() == expected


def test_completed_means_finished_and_not_rejected() -> None:
    reqs = frame(Req(), Req(rejection_reason="kv"), Req())
    reqs.loc[2, "finish_s"] = NAN  # still running when the simulation stopped
    assert completed_mask(RequestTable.from_frame(reqs)).tolist() == [True, False, False]


# --- weighted quantiles ----------------------------------------------------------------

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(st.tuples(finite, st.integers(0, 6)), min_size=1, max_size=40).filter(
        lambda ps: sum(w for _, w in ps) > 0
    ),
    qs=st.lists(st.floats(0, 1), min_size=1, max_size=5),
)
def test_weighted_quantiles_equal_percentiles_of_the_repeated_values(
    pairs: list[tuple[float, int]], qs: list[float]
) -> None:
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    expected = np.percentile(np.repeat(values, weights), 100 * np.array(qs))  # method="linear"
    got = weighted_quantiles(values, weights, qs)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(values=st.lists(finite, min_size=1, max_size=50), q=st.floats(0, 1))
def test_unit_weights_reproduce_np_percentile(values: list[float], q: float) -> None:
    got = weighted_quantiles(values, np.ones(len(values)), [q])
    np.testing.assert_allclose(got, [np.percentile(values, 100 * q)], rtol=1e-9, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(finite, min_size=2, max_size=30),
    qs=st.lists(st.floats(0, 1), min_size=2, max_size=6),
)
def test_weighted_quantiles_are_monotone_in_q(values: list[float], qs: list[float]) -> None:
    weights = np.arange(len(values)) % 3 + 1
    got = weighted_quantiles(values, weights, sorted(qs))
    assert np.all(np.diff(got) >= -1e-6)
    assert min(values) - 1e-6 <= got.min() and got.max() <= max(values) + 1e-6


def test_weighted_quantiles_by_hand() -> None:
    # Expanded list: [1, 1, 1, 5] -> positions 0..3.
    got = weighted_quantiles([5.0, 1.0], [1, 3], [0.0, 0.5, 2 / 3, 1.0])
    np.testing.assert_allclose(got, [1.0, 1.0, 1.0 + 4 * 0.0, 5.0])
    mid = weighted_quantiles([5.0, 1.0], [1, 3], [5 / 6])  # position 2.5: halfway 1 -> 5
    np.testing.assert_allclose(mid, [3.0])


def test_zero_weights_are_ignored() -> None:
    got = weighted_quantiles([1.0, 100.0, 2.0], [1, 0, 1], [0.0, 1.0])
    np.testing.assert_allclose(got, [1.0, 2.0])


def test_no_weight_gives_nan() -> None:
    assert np.isnan(weighted_quantiles([1.0, 2.0], [0, 0], [0.5, 0.9])).all()
    assert np.isnan(weighted_quantiles([], [], [0.5])).all()


def test_scalar_q_gives_a_scalar_shape() -> None:
    assert weighted_quantiles([1.0, 3.0], [1, 1], 0.5).shape == ()
    assert float(weighted_quantiles([1.0, 3.0], [1, 1], 0.5)) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("values", "weights", "qs", "match"),
    [
        ([1.0, 2.0], [1], [0.5], "length"),
        ([1.0, 2.0], [1, -1], [0.5], "non-negative"),
        ([1.0, 2.0], [1, NAN], [0.5], "finite"),
        ([1.0], [1], [1.5], r"\[0, 1\]"),
        ([1.0], [1], [NAN], r"\[0, 1\]"),
    ],
)
def test_weighted_quantiles_reject_bad_arguments(
    values: list[float], weights: list[float], qs: list[float], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        weighted_quantiles(values, weights, qs)


# --- latency statistics ------------------------------------------------------------------


@pytest.mark.parametrize(("p", "label"), [(99, "99"), (99.0, "99"), (99.9, "99.9"), (50, "50")])
def test_percentile_labels_follow_vllm(p: float, label: str) -> None:
    assert percentile_label(p) == label


def test_latency_stats_match_numpy_in_ms() -> None:
    values_s = np.array([0.1, 0.2, 0.6, 0.3])
    stats = latency_stats_ms("ttft", values_s, percentiles=(90, 99.9))
    assert set(stats) == {
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p90_ttft_ms",
        "p99.9_ttft_ms",
    }
    assert stats["mean_ttft_ms"] == pytest.approx(1000 * values_s.mean())
    assert stats["median_ttft_ms"] == pytest.approx(1000 * np.median(values_s))
    assert stats["std_ttft_ms"] == pytest.approx(1000 * values_s.std())  # population, as vllm
    assert stats["p90_ttft_ms"] == pytest.approx(1000 * np.percentile(values_s, 90))
    assert stats["p99.9_ttft_ms"] == pytest.approx(1000 * np.percentile(values_s, 99.9))


@settings(max_examples=100, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.floats(0, 10, allow_nan=False), st.integers(0, 5)), min_size=1, max_size=30
    ).filter(lambda ps: sum(w for _, w in ps) > 0)
)
def test_weighted_stats_equal_stats_of_the_expanded_list(pairs: list[tuple[float, int]]) -> None:
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    expanded = np.repeat(values, weights)
    stats = latency_stats_ms("itl", values, weights, percentiles=(25, 99))
    expected = [
        expanded.mean(),
        np.median(expanded),
        expanded.std(),
        *np.percentile(expanded, [25, 99]),
    ]
    keys = ("mean_itl_ms", "median_itl_ms", "std_itl_ms", "p25_itl_ms", "p99_itl_ms")
    got = np.array([stats[k] for k in keys], dtype=np.float64)
    np.testing.assert_allclose(got, 1000 * np.array(expected), rtol=1e-9, atol=1e-6)


def test_latency_stats_drop_non_finite_values() -> None:
    stats = latency_stats_ms("e2el", [1.0, NAN, 3.0, math.inf])
    assert stats["mean_e2el_ms"] == pytest.approx(2000.0)


@pytest.mark.parametrize("values", [[], [NAN, NAN]])
def test_latency_stats_of_nothing_are_none(values: list[float]) -> None:
    stats = latency_stats_ms("tpot", values, percentiles=(50, 99))
    assert len(stats) == 5
    assert all(v is None for v in stats.values())


@pytest.mark.parametrize("percentiles", [(101,), (-1, 50)])
def test_percentiles_outside_0_100_are_a_config_error(percentiles: tuple[float, ...]) -> None:
    with pytest.raises(ConfigError, match="percentiles"):
        latency_stats_ms("ttft", [1.0], percentiles=percentiles)
    with pytest.raises(ConfigError, match="percentiles"):
        summarize_frame(frame(Req()), NO_STEPS, NO_EXTRA, percentiles=percentiles)


# --- inter-token latency -----------------------------------------------------------------


def test_itl_weights_steps_by_their_itl_tokens_and_adds_extra_gaps() -> None:
    durations = [0.010, 0.020, 0.030, 0.500]
    tokens = [3, 0, 2, 1]
    extra = np.array([0.250, 1.0])
    stats = itl_distribution(steps_frame(durations, tokens), extra, percentiles=(50, 90))
    expanded = np.r_[np.repeat(durations, tokens), extra]
    assert stats["mean_itl_ms"] == pytest.approx(1000 * expanded.mean())
    assert stats["median_itl_ms"] == pytest.approx(1000 * np.median(expanded))
    assert stats["std_itl_ms"] == pytest.approx(1000 * expanded.std())
    assert stats["p90_itl_ms"] == pytest.approx(1000 * np.percentile(expanded, 90))


def test_itl_ignores_steps_without_itl_tokens() -> None:
    stats = itl_distribution(steps_frame([5.0, 0.01, 0.01], [0, 2, 2]), NO_EXTRA)
    assert stats["p99_itl_ms"] == pytest.approx(10.0)


def test_itl_uses_step_duration_not_end_time() -> None:
    steps = step_table({"start_s": [100.0], "end_s": [100.04], "num_itl_tokens": [4]})
    assert itl_distribution(steps, NO_EXTRA)["mean_itl_ms"] == pytest.approx(40.0)


def test_itl_from_extra_gaps_alone() -> None:
    stats = itl_distribution(NO_STEPS, [0.1, 0.3])
    assert stats["mean_itl_ms"] == pytest.approx(200.0)


@pytest.mark.parametrize(
    "steps", [NO_STEPS, step_table(pd.DataFrame()), steps_frame([0.1, 0.2], [0, 0])]
)
def test_itl_of_nothing_is_none(steps: StepTable) -> None:
    stats = itl_distribution(steps, NO_EXTRA)
    assert all(v is None for v in stats.values())


def test_itl_names_missing_step_columns() -> None:
    with pytest.raises(ValueError, match="num_itl_tokens"):
        itl_distribution(
            StepTable.from_frame(pd.DataFrame({"start_s": [0.0], "end_s": [1.0]})), NO_EXTRA
        )


# --- SLOs and goodput --------------------------------------------------------------------


def test_slo_is_a_frozen_strict_model() -> None:
    slo = Slo(ttft_ms=200, tpot_ms=50)
    assert slo.e2el_ms is None
    assert not slo.is_empty and Slo().is_empty
    with pytest.raises(ValidationError):
        Slo(ttft_ms=0)
    with pytest.raises(ValidationError):
        Slo(tpot_ms=-5)
    with pytest.raises(ValidationError):
        Slo(itl_ms=5)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        slo.ttft_ms = 3.0


def test_good_requests_meet_every_given_slo_inclusively() -> None:
    derived = with_request_metrics(
        frame(
            Req(ttft_s=0.2, e2el_s=1.2, num_generated_tokens=21),  # tpot 50 ms: on the limit
            Req(ttft_s=0.3, e2el_s=0.4, num_generated_tokens=3),  # ttft too slow
            Req(ttft_s=0.1, e2el_s=3.1, num_generated_tokens=11),  # tpot 300 ms: too slow
            Req(ttft_s=0.1, e2el_s=9.0, num_generated_tokens=1),  # 1 token: no tpot
        )
    )
    assert good_mask(derived, Slo(ttft_ms=200, tpot_ms=50)).tolist() == [True, False, False, True]
    assert good_mask(derived, Slo(ttft_ms=200)).tolist() == [True, False, True, True]
    assert good_mask(derived, Slo(e2el_ms=1200)).tolist() == [True, True, False, False]
    assert good_mask(derived, Slo()).all()


# --- the summary -------------------------------------------------------------------------

VLLM_KEYS = {
    "duration",
    "completed",
    "num_rejected",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
}


def three_requests() -> pd.DataFrame:
    return frame(
        Req(arrival_s=0.0, ttft_s=0.1, e2el_s=1.1, num_generated_tokens=11, num_prompt_tokens=10),
        Req(arrival_s=1.0, ttft_s=0.2, e2el_s=2.2, num_generated_tokens=21, num_prompt_tokens=20),
        Req(arrival_s=2.0, ttft_s=0.6, e2el_s=3.0, num_generated_tokens=1, num_prompt_tokens=30),
    )


def test_summary_has_exactly_the_vllm_keys() -> None:
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA, percentiles=(90, 99, 99.9))
    latency_keys = {
        f"{stat}_{metric}_ms"
        for metric in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "std", "p90", "p99", "p99.9")
    }
    assert set(summary) == VLLM_KEYS | latency_keys


def test_summary_of_three_known_requests() -> None:
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA)
    assert summary["completed"] == 3
    assert summary["num_rejected"] == 0
    assert summary["total_input_tokens"] == 60
    assert summary["total_output_tokens"] == 33
    assert summary["mean_ttft_ms"] == pytest.approx(300.0)
    assert summary["median_ttft_ms"] == pytest.approx(200.0)
    assert summary["mean_e2el_ms"] == pytest.approx((1100 + 2200 + 3000) / 3)
    # TPOT: (1.1-0.1)/10 and (2.2-0.2)/20 = 100 ms each; the 1-token request is left out.
    assert summary["mean_tpot_ms"] == pytest.approx(100.0)
    assert summary["std_tpot_ms"] == pytest.approx(0.0)
    assert summary["p99_tpot_ms"] == pytest.approx(100.0)


def test_duration_runs_from_first_arrival_to_last_finish() -> None:
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA)
    assert summary["duration"] == pytest.approx(5.0)  # 0.0 -> 2.0 + 3.0
    assert summary["request_throughput"] == pytest.approx(3 / 5)
    assert summary["output_throughput"] == pytest.approx(33 / 5)
    assert summary["total_token_throughput"] == pytest.approx(93 / 5)


def test_rejected_requests_count_only_in_num_rejected() -> None:
    reqs = pd.concat(
        [
            frame(Req(arrival_s=-1.0, num_prompt_tokens=10**6, rejection_reason="too long")),
            three_requests(),
        ],
        ignore_index=True,
    )
    reqs["request_id"] = range(len(reqs))  # one id a request: rejections are by id
    summary = summarize_frame(reqs, NO_STEPS, NO_EXTRA)
    base = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA)
    assert summary["num_rejected"] == 1
    assert summary["completed"] == 3
    assert summary["total_input_tokens"] == base["total_input_tokens"]
    assert summary["mean_ttft_ms"] == pytest.approx(base["mean_ttft_ms"])
    assert summary["p99_e2el_ms"] == pytest.approx(base["p99_e2el_ms"])
    # The rejected request was still sent first: the benchmark started at its arrival.
    assert summary["duration"] == pytest.approx(6.0)


def test_a_rejected_row_with_times_is_still_excluded() -> None:
    reqs = three_requests()
    reqs.loc[0, "rejection_reason"] = "preempted too often"  # finish_s stays finite
    summary = summarize_frame(reqs, NO_STEPS, NO_EXTRA)
    assert summary["completed"] == 2
    assert summary["num_rejected"] == 1
    assert summary["mean_ttft_ms"] == pytest.approx(400.0)


def test_unfinished_requests_are_neither_completed_nor_rejected() -> None:
    reqs = three_requests()
    reqs.loc[2, "finish_s"] = NAN
    summary = summarize_frame(reqs, NO_STEPS, NO_EXTRA)
    assert summary["completed"] == 2
    assert summary["num_rejected"] == 0
    assert summary["total_output_tokens"] == 32
    assert summary["duration"] == pytest.approx(3.2)


def test_goodput_counts_requests_meeting_all_slos_per_second() -> None:
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA, Slo(ttft_ms=250, tpot_ms=100))
    assert summary["request_goodput"] == pytest.approx(2 / 5)
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA, Slo(e2el_ms=2500))
    assert summary["request_goodput"] == pytest.approx(2 / 5)
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA, Slo(ttft_ms=1))
    assert summary["request_goodput"] == 0.0


@pytest.mark.parametrize("slo", [None, Slo()])
def test_goodput_is_none_without_an_slo(slo: Slo | None) -> None:
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA, slo)
    assert "request_goodput" in summary and summary["request_goodput"] is None


def test_summary_includes_the_itl_distribution() -> None:
    steps = steps_frame([0.01, 0.02, 0.03], [2, 2, 2])
    summary = summarize_frame(three_requests(), steps, [0.5])
    assert summary == summarize_frame(three_requests(), steps, [0.5])
    expected = itl_distribution(steps, [0.5])
    assert all(summary[k] == expected[k] for k in expected)
    assert summary["mean_itl_ms"] == pytest.approx(1000 * (0.12 + 0.5) / 7)


def test_summary_counts_are_python_ints() -> None:
    summary = summarize_frame(three_requests(), NO_STEPS, NO_EXTRA)
    for key in ("completed", "num_rejected", "total_input_tokens", "total_output_tokens"):
        assert type(summary[key]) is int, key
    assert all(type(v) in (int, float) or v is None for v in summary.values())


def _assert_empty_summary(summary: dict[str, Any], num_rejected: int) -> None:
    assert summary["completed"] == 0
    assert summary["num_rejected"] == num_rejected
    assert summary["total_input_tokens"] == 0
    assert summary["total_output_tokens"] == 0
    for key in ("duration", "request_throughput", "request_goodput", "output_throughput"):
        assert summary[key] is None, key
    assert summary["mean_ttft_ms"] is None and summary["p99_e2el_ms"] is None


@pytest.mark.parametrize("reqs", [frame(), pd.DataFrame(), three_requests().iloc[:0]])
def test_summary_of_an_empty_run(reqs: pd.DataFrame) -> None:
    summary = summarize_frame(reqs, NO_STEPS, NO_EXTRA, Slo(ttft_ms=100))
    _assert_empty_summary(summary, num_rejected=0)
    assert summary["mean_itl_ms"] is None


def test_summary_of_an_all_rejected_run() -> None:
    reqs = frame(Req(rejection_reason="kv"), Req(rejection_reason="kv"))
    summary = summarize_frame(reqs, step_table(pd.DataFrame()), NO_EXTRA, Slo(ttft_ms=100))
    _assert_empty_summary(summary, num_rejected=2)


@pytest.mark.slow
def test_summary_is_vectorised_for_large_runs() -> None:
    rng = np.random.default_rng(7)
    n, m = 200_000, 2_000_000
    arrival = np.sort(rng.uniform(0, 600, n))
    gen = rng.integers(1, 300, n)
    ttft = rng.exponential(0.2, n) + 0.01
    reqs = pd.DataFrame(
        {
            "request_id": np.arange(n),
            "arrival_s": arrival,
            "ready_s": arrival,
            "first_scheduled_s": arrival + ttft / 2,
            "first_token_s": arrival + ttft,
            "finish_s": arrival + ttft + 0.02 * gen,
            "num_prompt_tokens": rng.integers(1, 2000, n),
            "num_output_tokens": gen,
            "num_generated_tokens": gen,
            "rejection_reason": np.where(rng.random(n) < 0.01, "kv", ""),
        }
    )
    start = np.cumsum(rng.uniform(0.01, 0.03, m))
    steps = step_table(
        {"start_s": start, "end_s": start + 0.02, "num_itl_tokens": rng.integers(0, 64, m)}
    )
    # Its speed (a per-row loop takes minutes here): benchmarks/hot_paths.py.
    summary = summarize_frame(reqs, steps, rng.uniform(0, 1, 1000), Slo(ttft_ms=300))
    assert summary["completed"] == int((reqs["rejection_reason"] == "").sum())


def test_percentiles_on_few_samples_carry_a_caveat() -> None:
    from sim.metrics.stats import MIN_TAIL_SAMPLES, percentile_caveats

    # One sample: every percentile is the maximum.
    one = percentile_caveats({"ttft": 1}, (90, 99))
    assert one == [
        "p90_ttft_ms from 1 sample(s) is their maximum, not a percentile",
        "p99_ttft_ms from 1 sample(s) is their maximum, not a percentile",
    ]
    # 300 samples: the p90 has 30 beyond it (fine), the p99 about 3 (noisy).
    assert percentile_caveats({"tpot": 300}, (90, 99)) == [
        "p99_tpot_ms rests on 300 samples, about 3 beyond it: noisy"
    ]
    # Enough samples for MIN_TAIL_SAMPLES beyond the p99, or none at all: no caveat.
    assert percentile_caveats({"e2el": 100 * MIN_TAIL_SAMPLES, "ttft": 0}, (99,)) == []


def test_a_run_summary_counts_its_samples_and_prints_its_caveats() -> None:
    from sim import api
    from sim.metrics.report import format_summary_table
    from sim.scenario import scenario_from_dict

    result = api.run(
        scenario_from_dict(
            {
                "model": "tiny",
                "hardware": "cpu-2core",
                "cost": {"kind": "linear", "per_prefill_seq_s": 0.01, "per_decode_seq_s": 0.01},
                "workload": {
                    "kind": "synthetic",
                    "num_requests": 1,
                    "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                    "prompt_tokens": {"kind": "fixed", "tokens": 8},
                    "output_tokens": {"kind": "fixed", "tokens": 4},
                },
            }
        )
    )
    summary = result.summary
    assert (summary["num_ttft_samples"], summary["num_tpot_samples"]) == (1, 1)
    assert "p99_ttft_ms from 1 sample(s) is their maximum, not a percentile" in summary["caveats"]
    text = format_summary_table(summary)
    assert "CAVEAT: p99_ttft_ms from 1 sample(s) is their maximum" in text
