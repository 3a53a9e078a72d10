"""Sweeps: validation, the tidy table, the cache, executors, Pareto/cheapest, plots, CLI."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import sim
from sim.cli import main
from sim.errors import ConfigError
from sim.planning.sweep import config_hash, jobs_for, load_sweep, run_sweep
from sim.planning.sweep_exec import execute
from sim.planning.sweep_plots import mg1_curve, plot_sweep
from sim.planning.sweep_report import cheapest, format_report, pareto_mask, per_point

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

BASE: dict[str, Any] = {
    "name": "tiny",
    "seed": 0,
    "cost": {"kind": "linear", "per_prefill_seq_s": 0.01, "per_decode_seq_s": 0.01},
    "scheduler": {"kind": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 8192},
    "workload": {
        "kind": "synthetic",
        "num_requests": 100,
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "uniform", "min_tokens": 2, "max_tokens": 18},
    },
}
SWEEP = {
    "scenario": "base.yaml",
    "grid": {"scheduler.max_num_seqs": [1, 4], "workload.arrival.rate_per_s": [2.0, 6.0]},
    "seeds": 2,
    "slo": {"ttft_p99_ms": 300},
    "gpu_price_per_hour": 2.0,
}


def write_sweep(
    folder: Path, sweep: dict[str, Any] | None = None, base: dict[str, Any] | None = None
) -> Path:
    (folder / "base.yaml").write_text(yaml.safe_dump(base or BASE))
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep or SWEEP, sort_keys=False))
    return path


def with_changes(**changes: Any) -> dict[str, Any]:
    return {**SWEEP, **changes}


# --- validation ----------------------------------------------------------------------------


def test_grid_is_a_cartesian_product_in_file_order(tmp_path: Path) -> None:
    plan = load_sweep(write_sweep(tmp_path))
    assert [p.overrides for p in plan.points] == [
        {"scheduler.max_num_seqs": 1, "workload.arrival.rate_per_s": 2.0},
        {"scheduler.max_num_seqs": 1, "workload.arrival.rate_per_s": 6.0},
        {"scheduler.max_num_seqs": 4, "workload.arrival.rate_per_s": 2.0},
        {"scheduler.max_num_seqs": 4, "workload.arrival.rate_per_s": 6.0},
    ]
    assert [p.scenario.scheduler.model_dump()["max_num_seqs"] for p in plan.points] == [1, 1, 4, 4]
    assert plan.points[0].seeds == (0, 1)
    assert plan.load_key == "workload.arrival.rate_per_s"
    assert [t.name for t in plan.targets] == ["ttft_p99_ms"]


def test_points_are_crossed_with_the_grid_and_shared_overrides_apply(tmp_path: Path) -> None:
    sweep = with_changes(
        grid={"workload.arrival.rate_per_s": [1.0, 2.0, 3.0]},
        points=[{"scheduler.max_num_seqs": 1}, {"scheduler.max_num_seqs": 8}],
        overrides={"workload.num_requests": 50},
        seeds=[3, 7],
    )
    plan = load_sweep(write_sweep(tmp_path, sweep))
    assert len(plan.points) == 6
    assert all(p.scenario.workload.model_dump()["num_requests"] == 50 for p in plan.points)
    assert plan.points[3].overrides == {
        "scheduler.max_num_seqs": 8,
        "workload.arrival.rate_per_s": 1.0,
    }
    assert plan.points[0].seeds == (3, 7)


@pytest.mark.parametrize(
    ("sweep", "needles"),
    [
        (with_changes(grid={"scheduler.max_num_seqz": [1, 2]}), ["point 0", "max_num_seqz"]),
        (with_changes(grid={"workload.arrival.rate_per_s": [1, -2]}), ["point 1", "rate_per_s"]),
        (with_changes(grid={"name.x": [1]}), ["point 0", "not a section"]),
        (with_changes(gridd={"a": [1]}), ["gridd"]),
        ({"scenario": "base.yaml"}, ["grid"]),
        (with_changes(grid={"scheduler.max_num_seqs": []}), ["non-empty"]),
        (with_changes(seeds=0), ["seeds"]),
        (with_changes(slo={"ttft_p42_ms": 5}), ["ttft_p42_ms", "mean|median|p90|p99"]),
        (with_changes(scenario="missing.yaml"), ["missing.yaml", "cannot read"]),
    ],
)
def test_bad_sweeps_are_one_line_errors_naming_the_file(
    tmp_path: Path, sweep: dict[str, Any], needles: list[str]
) -> None:
    path = write_sweep(tmp_path, sweep)
    with pytest.raises(ConfigError) as error:
        load_sweep(path)
    message = str(error.value)
    assert "\n" not in message and "sweep.yaml" in message
    for needle in needles:
        assert needle in message


def test_unknown_key_fails_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = with_changes(
        grid=None, points=[{"scheduler.max_num_seqs": 2}, {"scheduler.chunked": 1}]
    )
    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path, sweep)), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sweep.yaml: point 1" in err and "chunked" in err
    assert not (out / "cache").exists()


def test_example_sweeps_validate() -> None:
    chat = load_sweep(SCENARIOS / "sweep_chat.yaml")
    assert 20 <= len(chat.points) <= 40 and chat.targets
    batching = load_sweep(SCENARIOS / "sweep_batching.yaml")
    assert {p.scenario.scheduler.model_dump()["max_num_seqs"] for p in batching.points} == {1, 256}


# --- running, table, cache -------------------------------------------------------------------


def test_table_has_one_row_per_point_and_seed(tmp_path: Path) -> None:
    plan = load_sweep(write_sweep(tmp_path))
    outcome = run_sweep(plan, tmp_path / "out", jobs=1)
    table = outcome.table
    assert len(table) == 8 and outcome.num_computed == 8 and outcome.num_cached == 0
    assert list(table["point"]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert list(table["seed"]) == [0, 1] * 4
    for column in (
        "scheduler.max_num_seqs",
        "workload.arrival.rate_per_s",
        "p99_ttft_ms",
        "request_throughput",
        "completed",
        "usd_per_1k_requests",
        "slo_met",
    ):
        assert column in table
    assert (table["completed"] == 100).all()
    assert set(table["config"]) == {"max_num_seqs=1", "max_num_seqs=4"}
    assert (table["offered_rate_per_s"] == table["workload.arrival.rate_per_s"]).all()
    # Seeds differ, so do their results; the SLO verdict is each run's own.
    assert table["mean_ttft_ms"].iloc[0] != table["mean_ttft_ms"].iloc[1]
    assert (table["slo_met"] == (table["p99_ttft_ms"] <= 300)).all()
    # Cost: GPU-hours per request times the price.
    expected = 1000 * 2.0 / (table["request_throughput"] * 3600)
    assert np.allclose(table["usd_per_1k_requests"], expected)
    # M/G/1 inputs only for the batch-size-1 configuration.
    assert table.loc[table["scheduler.max_num_seqs"] == 1, "service_mean_s"].notna().all()
    assert table.loc[table["scheduler.max_num_seqs"] == 4, "service_mean_s"].isna().all()


def test_rerun_hits_the_cache_and_recomputes_only_changes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run_sweep(load_sweep(write_sweep(tmp_path)), out, jobs=1)
    again = run_sweep(load_sweep(write_sweep(tmp_path)), out, jobs=1)
    assert again.num_computed == 0 and again.num_cached == 8
    pd.testing.assert_frame_equal(first.table, again.table)
    changed = with_changes(
        grid={"scheduler.max_num_seqs": [1, 4], "workload.arrival.rate_per_s": [2.0, 7.0]}
    )
    third = run_sweep(load_sweep(write_sweep(tmp_path, changed)), out, jobs=1)
    assert third.num_computed == 4 and third.num_cached == 4
    # A damaged cache entry is computed again, never trusted.
    plan = load_sweep(write_sweep(tmp_path, changed))
    (out / "cache" / f"{jobs_for(plan)[5].key}.json").write_text("{not json")
    assert run_sweep(plan, out, jobs=1).num_computed == 1


def test_config_hash_covers_scenario_seed_folder_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = load_sweep(write_sweep(tmp_path))
    keys = [job.key for job in jobs_for(plan)]
    assert len(set(keys)) == len(keys) == 8
    doc = jobs_for(plan)[0].task["scenario"]
    assert config_hash(doc, tmp_path) == config_hash(dict(doc), tmp_path)
    assert config_hash(doc, tmp_path) != config_hash(doc, tmp_path / "elsewhere")
    before = config_hash(doc, tmp_path)
    monkeypatch.setattr(sim, "__version__", "9.9.9")
    assert config_hash(doc, tmp_path) != before


def test_worker_processes_give_the_same_table(tmp_path: Path) -> None:
    plan = load_sweep(write_sweep(tmp_path))
    serial = run_sweep(plan, tmp_path / "a", jobs=1).table
    parallel = run_sweep(plan, tmp_path / "b", jobs=2).table
    pd.testing.assert_frame_equal(serial, parallel)


def test_ray_and_local_executors_give_identical_tables(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    plan = load_sweep(write_sweep(tmp_path))
    local = run_sweep(plan, tmp_path / "local", jobs=1).table
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_sweep(plan, tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    assert remote.num_computed == 8
    pd.testing.assert_frame_equal(local, remote.table)


def test_missing_ray_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(ConfigError, match="pip install"):
        execute([], executor="ray")
    with pytest.raises(ConfigError, match="unknown executor"):
        execute([], executor="dask")
    with pytest.raises(ConfigError, match="--address"):
        execute([], executor="local", address="ray://x:10001")


# --- reading the table -------------------------------------------------------------------------


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(1, 1e4)), min_size=1, max_size=30))
def test_pareto_front_is_exactly_the_undominated_points(pairs: list[tuple[float, float]]) -> None:
    thr = np.array([p[0] for p in pairs])
    lat = np.array([p[1] for p in pairs])
    front = pareto_mask(thr, lat)
    assert front.any()
    for i in range(len(pairs)):
        dominated = np.any((thr >= thr[i]) & (lat <= lat[i]) & ((thr > thr[i]) | (lat < lat[i])))
        assert front[i] == (not dominated)


def test_cheapest_meeting_the_slos(tmp_path: Path) -> None:
    plan = load_sweep(write_sweep(tmp_path))
    table = run_sweep(plan, tmp_path / "out", jobs=1).table
    points = per_point(table, plan.targets, plan.override_keys)
    assert len(points) == 4 and (points["num_seeds"] == 2).all()
    assert points.loc[0, "scheduler.max_num_seqs"] == 1  # overrides are not averaged
    means = table.groupby("point")["p99_ttft_ms"].mean().to_numpy()
    assert np.allclose(points["p99_ttft_ms"], means)
    assert list(points["slo_met"]) == list(means <= 300)
    best, unit, refusal = cheapest(points)
    assert best is not None and unit == "usd_per_1k_requests" and best["slo_met"] and not refusal
    meeting = points[points["slo_met"] == True]  # noqa: E712
    assert best["usd_per_1k_requests"] == meeting["usd_per_1k_requests"].min()
    text = format_report(points, plan.targets, plan.override_keys)
    assert f"point {int(best['point'])}" in text and "cheapest meeting the SLOs" in text
    none_meet = points.assign(slo_met=False)
    assert cheapest(none_meet) == (None, "", "")
    assert "no configuration meets" in format_report(none_meet, plan.targets, [])


def test_plots_and_the_mg1_curve(tmp_path: Path) -> None:
    plan = load_sweep(write_sweep(tmp_path))
    table = run_sweep(plan, tmp_path / "out", jobs=1).table
    points = per_point(table, plan.targets, plan.override_keys)
    paths = plot_sweep(points, table, plan.targets, plan.load_key, tmp_path / "out")
    assert [p.name for p in paths] == ["latency_vs_load.png", "throughput_vs_ttft.png"]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in paths)
    batch1 = mg1_curve(table[table["scheduler.max_num_seqs"] == 1], 6.0)
    assert batch1 is not None
    rates, ttft_ms = batch1
    assert rates[0] == 0 and np.all(np.diff(ttft_ms) > 0)  # the queue only grows with load
    assert mg1_curve(table[table["scheduler.max_num_seqs"] == 4], 6.0) is None


def test_sweep_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "1", "-q"]) == 0
    text = capsys.readouterr().out
    assert "8 runs computed, 0 from cache" in text and "cheapest" in text
    for name in ("results.parquet", "results.csv", "points.csv", "latency_vs_load.png"):
        assert (out / name).exists()
    assert len(pd.read_parquet(out / "results.parquet")) == 8
    assert main(["sweep", str(path), "--out", str(out), "-q"]) == 0
    assert "0 runs computed, 8 from cache" in capsys.readouterr().out


# --- the point function and small helpers ------------------------------------------------------


def test_batch_size_one_covers_both_policies() -> None:
    from sim.planning.sweep_exec import batch_size_one
    from sim.scenario import scenario_from_dict

    def with_scheduler(scheduler: dict[str, Any]) -> Any:
        return scenario_from_dict({**BASE, "scheduler": scheduler})

    assert batch_size_one(with_scheduler({"kind": "continuous", "max_num_seqs": 1}))
    assert not batch_size_one(with_scheduler({"kind": "continuous", "max_num_seqs": 2}))
    assert batch_size_one(with_scheduler({"kind": "static", "max_batch_size": 1}))
    assert not batch_size_one(with_scheduler({"kind": "static", "max_batch_size": 8}))


def test_offered_rate_is_nominal_measured_or_none() -> None:
    from sim.planning.sweep_exec import offered_rate_per_s
    from sim.scenario import load_scenario, scenario_from_dict

    synthetic = scenario_from_dict(BASE)
    assert offered_rate_per_s(synthetic, np.array([0.0, 100.0])) == 2.0
    trace = load_scenario(SCENARIOS / "azure_trace.yaml")
    assert offered_rate_per_s(trace, np.array([0.0, 1.0, 2.0, 4.0])) == pytest.approx(0.75)
    assert offered_rate_per_s(trace, np.array([3.0])) is None
    closed = load_scenario(SCENARIOS / "closed_loop.yaml")
    assert offered_rate_per_s(closed, np.array([0.0, 1.0])) is None


def test_run_point_measures_a_deterministic_service_time(tmp_path: Path) -> None:
    from sim.planning.sweep_exec import run_point
    from sim.scenario import scenario_from_dict

    frontend = {
        "way_in_s_per_request": 0,
        "tokenize_s_per_token": 0,
        "detokenize_s_per_token": 0,
        "output_step_s": 0,
    }
    doc = {**BASE, "frontend": frontend}
    doc["workload"] = {**BASE["workload"], "output_tokens": {"kind": "fixed", "tokens": 10}}
    scenario = scenario_from_dict(doc).model_dump(mode="json")
    record = run_point({"scenario": scenario, "base_dir": str(tmp_path)})
    assert all(v is None or isinstance(v, (int, float, str, bool)) for v in record.values())
    assert record["arrival_kind"] == "poisson" and record["offered_rate_per_s"] == 2.0
    # One 10 ms prefill step and nine 10 ms decode steps, every time: E[S^2] = E[S]^2.
    assert record["service_mean_s"] == pytest.approx(0.1)
    assert record["service_m2_s2"] == pytest.approx(0.01)
    assert record["ttft_excl_queue_mean_s"] == pytest.approx(0.01)
    assert record["mean_ttft_ms"] >= 10.0


def test_mg1_needs_poisson_arrivals_and_batch_size_one(tmp_path: Path) -> None:
    from sim.planning.sweep_plots import load_axis

    sweep = with_changes(overrides={"workload.arrival.kind": "constant"})
    plan = load_sweep(write_sweep(tmp_path, sweep))
    table = run_sweep(plan, tmp_path / "out", jobs=1).table
    assert mg1_curve(table[table["scheduler.max_num_seqs"] == 1], 6.0) is None
    points = per_point(table, plan.targets, plan.override_keys)
    assert load_axis(points, plan.load_key)[0] == "offered_rate_per_s"
    assert load_axis(points, None)[0] == "request_throughput"
    assert load_axis(points, "workload.num_users")[0] == "request_throughput"


def test_structured_override_values_become_json_cells(tmp_path: Path) -> None:
    lengths = [{"kind": "fixed", "tokens": 4}, {"kind": "fixed", "tokens": 8}]
    sweep = with_changes(grid={"workload.output_tokens": lengths}, seeds=[5])
    plan = load_sweep(write_sweep(tmp_path, sweep))
    outcome = run_sweep(plan, tmp_path / "out", jobs=1)
    cells = list(outcome.table["workload.output_tokens"])
    assert cells == ['{"kind": "fixed", "tokens": 4}', '{"kind": "fixed", "tokens": 8}']
    assert list(outcome.table["seed"]) == [5, 5]
    output_tokens = outcome.table["total_output_tokens"].to_numpy()
    assert output_tokens[1] == 2 * output_tokens[0]
    from sim.planning.sweep import write_table

    paths = write_table(outcome.table, tmp_path / "out")
    pd.testing.assert_frame_equal(pd.read_parquet(paths[0]), outcome.table)


def test_config_labels_drop_the_load_and_disambiguate(tmp_path: Path) -> None:
    from sim.planning.sweep import config_label

    plan = load_sweep(write_sweep(tmp_path))
    assert config_label(plan, plan.points[1].overrides) == "max_num_seqs=1"
    only_load = load_sweep(
        write_sweep(tmp_path, with_changes(grid={"workload.arrival.rate_per_s": [1, 2]}))
    )
    assert config_label(only_load, only_load.points[0].overrides) == only_load.name == "sweep"
    clash = with_changes(
        grid={"workload.prompt_tokens.tokens": [50, 60], "workload.output_tokens.tokens": [5, 6]},
        overrides={"workload.output_tokens": {"kind": "fixed", "tokens": 5}},
    )
    labelled = load_sweep(write_sweep(tmp_path, clash))
    assert config_label(labelled, labelled.points[0].overrides) == (
        "workload.prompt_tokens.tokens=50, workload.output_tokens.tokens=5"
    )


@pytest.mark.parametrize("seeds", [[1, 1], [], [-1]])
def test_seed_lists_must_be_distinct_and_non_negative(tmp_path: Path, seeds: list[int]) -> None:
    with pytest.raises(ConfigError, match="seeds"):
        load_sweep(write_sweep(tmp_path, with_changes(seeds=seeds)))


def test_long_reports_are_cut_and_unpriced_hardware_ranks_by_gpu_hours(tmp_path: Path) -> None:
    plan = load_sweep(write_sweep(tmp_path, with_changes(gpu_price_per_hour=None)))
    table = run_sweep(plan, tmp_path / "out", jobs=1).table.assign(gpu_price_per_hour=None)
    points = per_point(table, plan.targets, plan.override_keys)
    points["usd_per_1k_requests"] = None  # e.g. a custom accelerator without a price
    best, unit, refusal = cheapest(points)
    # One kind of GPU: GPU-hours rank its points.
    assert unit == "gpu_hours_per_1k_requests" and best is not None and not refusal
    text = format_report(points, plan.targets, plan.override_keys, max_rows=2)
    assert "... 2 more points in results.csv" in text and "GPU-hours per 1k requests" in text


# --- prices across GPUs --------------------------------------------------------------------


def test_every_gpu_preset_has_a_price() -> None:
    from sim.hardware.specs import HARDWARE_PRESETS
    from sim.planning.pricing import GPU_PRICE_PER_HOUR

    assert set(HARDWARE_PRESETS) <= set(GPU_PRICE_PER_HOUR)
    assert all(price > 0 for price in GPU_PRICE_PER_HOUR.values())


def _gpu_grid(tmp_path: Path, price: Any) -> tuple[pd.DataFrame, Any]:
    # An inline GPU (a preset renamed) has no list price.
    grid = {"hardware": ["h100", {"preset": "h200", "name": "my-asic"}]}
    plan = load_sweep(
        write_sweep(tmp_path, with_changes(grid=grid, seeds=1, gpu_price_per_hour=price))
    )
    table = run_sweep(plan, tmp_path / "out", jobs=1).table
    return per_point(table, plan.targets, plan.override_keys), plan


def test_a_comparison_across_gpus_without_every_price_is_refused(tmp_path: Path) -> None:
    points, plan = _gpu_grid(tmp_path, None)
    best, unit, refusal = cheapest(points)
    assert best is None and unit == ""
    assert refusal.startswith("no cheapest: GPU-hours of different GPUs are not comparable")
    assert "no price is known for my-asic;" in refusal
    assert refusal in format_report(points, plan.targets, plan.override_keys)


def test_a_price_per_gpu_ranks_a_comparison_across_gpus_in_dollars(tmp_path: Path) -> None:
    points, _ = _gpu_grid(tmp_path, {"my-asic": 1.5})
    prices = dict(zip(points["hardware"], points["gpu_price_per_hour"], strict=True))
    assert prices == {"h100": 3.0, "my-asic": 1.5}  # the table's H100 price, the file's
    best, unit, refusal = cheapest(points)
    assert best is not None and unit == "usd_per_1k_requests" and not refusal
    meeting = points[points["slo_met"] == True]  # noqa: E712
    assert best["usd_per_1k_requests"] == meeting["usd_per_1k_requests"].min()
