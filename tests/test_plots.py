"""Plots: CDF and envelope reduction, PNGs written headless, large inputs stay fast."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.axes import Axes

from sim.engine.records import RequestTable
from sim.metrics import figure_draw
from sim.metrics.figure_draw import DPI, MAX_POINTS, cdf_points, envelope
from sim.metrics.plots import cdf_data, timeseries_data
from sim.metrics.stats import Slo

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MIN_PNG_BYTES = 20_000  # an empty 1440x576 canvas with axes only is well under this


def requests_frame(n: int, seed: int = 0, rejected_every: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 100, n))
    ttft = rng.lognormal(-2, 1, n)
    gen = rng.integers(1, 200, n)
    finish = arrival + ttft + gen * rng.normal(0.02, 0.002, n)
    reasons = np.full(n, "", dtype=object)
    if rejected_every:
        reasons[::rejected_every] = "kv"
        finish[::rejected_every] = math.nan
    return pd.DataFrame(
        {
            "request_id": np.arange(n),
            "arrival_s": arrival,
            "ready_s": arrival,
            "first_scheduled_s": arrival + ttft / 2,
            "first_token_s": arrival + ttft,
            "finish_s": finish,
            "num_prompt_tokens": 100,
            "num_output_tokens": gen,
            "num_generated_tokens": gen,
            "rejection_reason": reasons,
        }
    )


def requests_table(n: int, seed: int = 0, rejected_every: int = 0) -> RequestTable:
    """``requests_frame`` as the table the metrics read."""
    return RequestTable.from_frame(requests_frame(n, seed, rejected_every))


def timeseries_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    running = rng.integers(0, 257, n)
    return pd.DataFrame(
        {
            "time_s": np.cumsum(rng.exponential(0.01, n)),
            "num_waiting": np.abs(np.cumsum(rng.normal(0, 1, n))).round(),
            "num_running": running,
            "num_kv_blocks_used": running * 10,
            "kv_cache_usage": running / 256,
        }
    )


def assert_png(path: Path, width_in: float, height_in: float) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > MIN_PNG_BYTES
    image = matplotlib.image.imread(path)
    assert image.shape[:2] == (round(height_in * DPI), round(width_in * DPI))
    assert image[..., :3].std() > 0.05  # not a blank canvas


# --- cdf_points ----------------------------------------------------------------------------


def test_cdf_of_a_small_sample_keeps_every_point() -> None:
    x, y = cdf_points([3.0, 1.0, 2.0, math.nan])
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(y, [1 / 3, 2 / 3, 1.0])


def test_cdf_of_nothing_is_empty() -> None:
    x, y = cdf_points([])
    assert x.size == 0 and y.size == 0


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 30_000), max_points=st.integers(2, 2000))
def test_cdf_is_capped_and_keeps_both_tails(n: int, max_points: int) -> None:
    values = np.random.default_rng(n).normal(size=n)
    x, y = cdf_points(values, max_points)
    assert x.size == y.size
    assert x.size == n if n <= max_points else x.size <= max_points
    assert x[0] == values.min() and x[-1] == values.max()
    assert y[-1] == 1.0
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
    # Every kept point lies on the full empirical CDF: y = rank / n and x = value at rank.
    ranks = np.rint(y * n).astype(np.int64)
    np.testing.assert_allclose(ranks, y * n)
    np.testing.assert_array_equal(np.sort(values)[ranks - 1], x)


# --- envelope ------------------------------------------------------------------------------


def test_short_series_pass_through() -> None:
    t, low, mean, high = envelope([0.0, 1.0, 2.0], [5.0, 6.0, 7.0], max_points=10)
    np.testing.assert_array_equal(t, [0.0, 1.0, 2.0])
    for series in (low, mean, high):
        np.testing.assert_array_equal(series, [5.0, 6.0, 7.0])


@settings(max_examples=50, deadline=None)
@given(n=st.integers(11, 50_000), max_points=st.integers(1, 3000), spike=st.floats(0, 1))
def test_envelope_keeps_spikes_and_bounds_the_mean(n: int, max_points: int, spike: float) -> None:
    rng = np.random.default_rng(n)
    t = np.cumsum(rng.uniform(0.1, 1, n))
    y = rng.uniform(0, 1, n)
    where = min(int(spike * n), n - 1)
    y[where] = 1000.0
    bt, low, mean, high = envelope(t, y, max_points)
    if n <= max_points:
        assert bt.size == n
        return
    assert bt.size <= max_points
    assert high.max() == 1000.0 and low.min() == y.min()
    assert np.all(low <= mean + 1e-12) and np.all(mean <= high + 1e-12)
    assert np.all(np.diff(bt) > 0) and bt[0] == t[0]
    # Weighted by bin sizes, the bin means average back to the series mean.
    sizes = np.diff(np.r_[np.searchsorted(t, bt), n])
    assert np.dot(sizes, mean) / n == pytest.approx(y.mean())


# --- latency CDFs --------------------------------------------------------------------------


def test_latency_cdfs_png(tmp_path: Path) -> None:
    out = figure_draw.draw_latency_cdfs(cdf_data(requests_table(2000)), tmp_path / "cdf.png")
    assert out == tmp_path / "cdf.png"
    assert_png(out, 12, 4.8)


def test_latency_cdfs_with_slo_lines_differ_from_without(tmp_path: Path) -> None:
    reqs = requests_table(500, rejected_every=7)
    plain = figure_draw.draw_latency_cdfs(cdf_data(reqs), tmp_path / "plain.png")
    with_slo = figure_draw.draw_latency_cdfs(
        cdf_data(reqs, Slo(ttft_ms=150, tpot_ms=21)), tmp_path / "slo.png"
    )
    assert_png(with_slo, 12, 4.8)
    assert plain.read_bytes() != with_slo.read_bytes()


@pytest.mark.parametrize("n", [0, 1, 2])
def test_latency_cdfs_of_tiny_runs(tmp_path: Path, n: int) -> None:
    out = figure_draw.draw_latency_cdfs(
        cdf_data(requests_table(n), Slo(ttft_ms=100)), tmp_path / "tiny.png"
    )
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_latency_cdfs_of_an_all_rejected_run(tmp_path: Path) -> None:
    out = figure_draw.draw_latency_cdfs(
        cdf_data(requests_table(10, rejected_every=1)), tmp_path / "rej.png"
    )
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_latency_cdfs_of_a_frame_without_columns(tmp_path: Path) -> None:
    no_columns = RequestTable.from_frame(pd.DataFrame())
    out = figure_draw.draw_latency_cdfs(cdf_data(no_columns), tmp_path / "none.png")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_latency_cdfs_accept_a_string_path(tmp_path: Path) -> None:
    out = figure_draw.draw_latency_cdfs(cdf_data(requests_table(20)), str(tmp_path / "s.png"))
    assert isinstance(out, Path) and out.exists()


def _drawn_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of points of every line and band matplotlib is asked to draw."""
    sizes: list[int] = []
    for name in ("plot", "fill_between"):
        original = getattr(Axes, name)

        def record(ax: Axes, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            sizes.append(max((np.size(a) for a in args[:2]), default=0))
            return _original(ax, *args, **kwargs)

        monkeypatch.setattr(Axes, name, record)
    return sizes


@pytest.mark.slow
def test_a_million_requests_plot_reduced_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unreduced lines of a million points take minutes to draw: every line is cut
    to MAX_POINTS (+1 for the CDF's first step) first."""
    sizes = _drawn_sizes(monkeypatch)
    figure_draw.draw_latency_cdfs(cdf_data(requests_table(1_000_000)), tmp_path / "big.png")
    assert sizes and max(sizes) <= MAX_POINTS + 1
    assert_png(tmp_path / "big.png", 12, 4.8)


# --- time series ---------------------------------------------------------------------------


def test_timeseries_png(tmp_path: Path) -> None:
    out = figure_draw.draw_timeseries(timeseries_data(timeseries_frame(300)), tmp_path / "ts.png")
    assert out == tmp_path / "ts.png"
    assert_png(out, 11, 8)


def test_timeseries_sorts_unordered_samples(tmp_path: Path) -> None:
    frame = timeseries_frame(300)
    shuffled = frame.sample(frac=1.0, random_state=3)
    a = figure_draw.draw_timeseries(timeseries_data(frame), tmp_path / "a.png")
    b = figure_draw.draw_timeseries(timeseries_data(shuffled), tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    "frame",
    [
        pd.DataFrame(),
        timeseries_frame(0),
        timeseries_frame(1),
        timeseries_frame(50).drop(columns="kv_cache_usage"),
    ],
)
def test_timeseries_of_little_or_no_data(tmp_path: Path, frame: pd.DataFrame) -> None:
    out = figure_draw.draw_timeseries(timeseries_data(frame), tmp_path / "empty.png")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_timeseries_tolerates_missing_values(tmp_path: Path) -> None:
    frame = timeseries_frame(100)
    frame["num_waiting"] = pd.array([None, *range(99)], dtype="Int64")
    assert figure_draw.draw_timeseries(timeseries_data(frame), tmp_path / "na.png").exists()


@pytest.mark.slow
def test_a_million_samples_plot_reduced_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _drawn_sizes(monkeypatch)
    figure_draw.draw_timeseries(timeseries_data(timeseries_frame(1_000_000)), tmp_path / "big.png")
    assert sizes and max(sizes) <= MAX_POINTS
    assert_png(tmp_path / "big.png", 11, 8)


def test_default_cap_is_the_documented_one() -> None:
    assert MAX_POINTS == 5000
    x, _ = cdf_points(np.arange(100_000.0))
    assert x.size <= MAX_POINTS
