"""Capacity search: SLO names, verdicts, the M/D/1 saturation point, monotonicity, fleet sizing."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
import queueing_formulas as formulas
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.planning.capacity
from sim.cli import main
from sim.cost.label import cost_model_tag
from sim.errors import ConfigError
from sim.metrics.slo_targets import (
    meets,
    metric_value,
    parse_target,
    parse_targets,
    per_request_slo,
    targets_from_mapping,
)
from sim.planning.capacity import (
    CapacitySearch,
    LoadKnob,
    LoadPoint,
    Searcher,
    judge,
    load_knob,
    mean_interval,
    search,
    t95,
)
from sim.planning.capacity_report import cost_models, fleet_for, format_capacity, to_json
from sim.planning.pricing import (
    GPU_PRICE_PER_HOUR,
    gpu_price_per_hour,
    usd_per_unit,
)
from sim.planning.sweep_exec import Record, Task, run_point
from sim.scenario import load_scenario, scenario_from_dict

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
PREFILL_S, DECODE_S, OUTPUT_TOKENS = 0.01, 0.01, 10
SERVICE_S = PREFILL_S + (OUTPUT_TOKENS - 1) * DECODE_S  # 0.1 s per request, one at a time


def md1_doc(num_requests: int = 1000, rate_per_s: float = 2.0, seed: int = 0) -> dict[str, Any]:
    """Batch size 1, deterministic service, Poisson arrivals: an M/D/1 queue."""
    return {
        "name": "md1",
        "seed": seed,
        "cost": {"kind": "linear", "per_prefill_seq_s": PREFILL_S, "per_decode_seq_s": DECODE_S},
        "scheduler": {"kind": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 8192},
        "frontend": {
            "way_in_s_per_request": 0,
            "tokenize_s_per_token": 0,
            "detokenize_s_per_token": 0,
            "output_step_s": 0,
        },
        "workload": {
            "kind": "synthetic",
            "num_requests": num_requests,
            "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": OUTPUT_TOKENS},
        },
    }


@pytest.fixture
def memo(monkeypatch: pytest.MonkeyPatch) -> dict[str, Record]:
    """Memoise simulations: searches under different SLOs revisit the same loads."""
    cache: dict[str, Record] = {}

    def execute(
        tasks: Sequence[Task],
        executor: str = "local",
        jobs: int | None = None,
        address: str | None = None,
    ) -> Iterator[tuple[int, Record]]:
        for index, task in enumerate(tasks):
            key = json.dumps(task, sort_keys=True)
            if key not in cache:
                cache[key] = run_point(task)
            yield index, cache[key]

    monkeypatch.setattr(sim.planning.capacity, "execute", execute)
    return cache


def capacity(
    doc: dict[str, Any], slos: list[str], seeds: int = 3, max_num_sims: int = 60, rel: float = 0.05
) -> CapacitySearch:
    searcher = Searcher(scenario_from_dict(doc), parse_targets(slos), seeds, 1)
    return search(searcher, rel, max_num_sims)


# --- SLO targets ---------------------------------------------------------------------------


def test_target_names_map_to_summary_keys() -> None:
    target = parse_target("ttft_p99_ms", "500")
    assert (target.metric, target.stat, target.limit_ms) == ("ttft", "p99", 500.0)
    assert target.summary_key == "p99_ttft_ms"
    assert str(target) == "ttft_p99_ms=500"
    names = [t.name for t in parse_targets(["tpot_mean_ms=50", "e2el_median_ms=9e3"])]
    assert names == ["tpot_mean_ms", "e2el_median_ms"]


@pytest.mark.parametrize(
    "pair",
    ["ttft_p98_ms=5", "ttft_p99=5", "latency_p99_ms=5", "ttft_p99_ms", "p99_ttft_ms=5"],
)
def test_bad_slo_names_are_one_line_errors_listing_valid_forms(pair: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_targets([pair])
    message = str(error.value)
    assert "\n" not in message
    assert "ttft|tpot|itl|e2el" in message and "mean|median|p90|p99" in message


@pytest.mark.parametrize(
    "pairs", [["ttft_p99_ms=abc"], ["ttft_p99_ms=-1"], ["ttft_p99_ms=1", "ttft_p99_ms=2"]]
)
def test_bad_slo_values_are_errors(pairs: list[str]) -> None:
    with pytest.raises(ConfigError):
        parse_targets(pairs)


def test_bad_slo_on_the_command_line_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "md1.yaml"
    path.write_text(yaml.safe_dump(md1_doc()))
    assert main(["capacity", str(path), "--slo", "ttft_p98_ms=500", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("servesim: error: --slo: unknown SLO 'ttft_p98_ms'")
    assert len(err.splitlines()) == 1


def test_metric_value_scores_missing_statistics() -> None:
    target = parse_target("tpot_p99_ms", 50)
    assert metric_value({"p99_tpot_ms": 20.0, "completed": 5}, target) == 20.0
    assert metric_value({"p99_tpot_ms": None, "completed": 5}, target) == 0.0  # no 2-token request
    assert metric_value({"p99_tpot_ms": None, "completed": 0}, target) == math.inf
    assert meets({"p99_tpot_ms": 50.0, "completed": 1}, [target])
    assert not meets({"p99_tpot_ms": 50.1, "completed": 1}, [target])


def test_per_request_slo_takes_each_metrics_largest_limit() -> None:
    slo = per_request_slo(targets_from_mapping({"ttft_p99_ms": 500, "ttft_mean_ms": 200}, "x"))
    assert slo is not None and slo.ttft_ms == 500 and slo.tpot_ms is None
    assert per_request_slo(parse_targets(["itl_p99_ms=30"])) is None


# --- statistics and verdicts ---------------------------------------------------------------


def test_t_critical_values_shrink_towards_normal() -> None:
    values = [t95(d) for d in (1, 2, 5, 10, 30, 45, 100, 10_000)]
    assert values == sorted(values, reverse=True)
    # Closed forms: t with 1 degree of freedom is Cauchy's, with 2 it is
    # (2p - 1) / sqrt(2 p (1 - p)); with many, the normal's z plus (z^3 + z) / (4 dof).
    assert t95(1) == pytest.approx(math.tan(math.pi * 0.475))
    assert t95(2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025))
    z = NormalDist().inv_cdf(0.975)
    assert t95(10_000) == pytest.approx(z + (z**3 + z) / 40_000, rel=1e-7)
    with pytest.raises(ValueError):
        t95(0)


@given(st.lists(st.floats(0, 1e4), min_size=2, max_size=10))
def test_mean_interval_contains_the_mean_and_is_zero_for_constants(values: list[float]) -> None:
    mean, half = mean_interval(values)
    assert half >= 0
    assert min(values) - 1e-6 <= mean <= max(values) + 1e-6
    assert mean_interval([values[0]] * len(values))[1] == pytest.approx(0, abs=1e-9)


def test_judge_separates_pass_fail_and_unclear() -> None:
    target = parse_targets(["ttft_mean_ms=100"])

    def records(*values: float) -> list[Record]:
        return [{"mean_ttft_ms": v, "completed": 10} for v in values]

    assert judge(1.0, records(50, 52, 48), target).status == "pass"
    assert judge(1.0, records(150, 152, 148), target).status == "fail"
    unclear = judge(1.0, records(60, 140, 100), target)
    assert unclear.status == "unclear" and unclear.ratio == pytest.approx(1.0)
    assert judge(1.0, [{"completed": 0}], target).status == "fail"


# --- the search ------------------------------------------------------------------------------


def test_search_finds_the_md1_saturation_point(memo: dict[str, Record]) -> None:
    limit_ms = 200.0  # mean TTFT = M/D/1 wait + the 10 ms prefill step
    truth = formulas.md1_max_rate_per_s(SERVICE_S, limit_ms / 1000 - PREFILL_S)
    result = capacity(md1_doc(), [f"ttft_mean_ms={limit_ms}"])
    low, high = result.interval
    assert low is not None and high is not None and result.estimate is not None
    assert low <= truth <= high
    assert low <= result.estimate <= high
    assert result.estimate == pytest.approx(truth, rel=0.15)
    assert result.num_sims <= 60
    assert result.at_estimate is not None and result.at_estimate.load == result.estimate
    # Every load is simulated under the same seeds.
    assert all(len(p.records) == 3 for p in result.points)


@settings(deadline=None, max_examples=10)  # 26 SLO subsets; each example is a search
@given(st.lists(st.sampled_from([60, 120, 250, 500, 2000]), min_size=2, max_size=3, unique=True))
def test_capacity_is_monotone_in_the_slo(limits_ms: list[int]) -> None:
    cache: dict[str, Record] = {}
    original = sim.planning.capacity.execute

    def execute(
        tasks: Sequence[Task],
        executor: str = "local",
        jobs: int | None = None,
        address: str | None = None,
    ) -> Iterator[tuple[int, Record]]:
        for index, task in enumerate(tasks):
            key = json.dumps(task, sort_keys=True)
            if key not in cache:
                cache[key] = run_point(task)
            yield index, cache[key]

    # Patched by hand: hypothesis does not mix with function-scoped fixtures.
    sim.planning.capacity.execute = execute
    try:
        estimates: list[float] = []
        for limit in sorted(limits_ms):
            slos = [f"ttft_mean_ms={limit}", f"ttft_p99_ms={4 * limit}"]
            estimate = capacity(md1_doc(400), slos, seeds=2, max_num_sims=40, rel=0.1).estimate
            assert estimate is not None
            estimates.append(estimate)
    finally:
        sim.planning.capacity.execute = original
    assert estimates == sorted(estimates)


def test_unreachable_slo_gives_zero_capacity(memo: dict[str, Record]) -> None:
    result = capacity(
        md1_doc(100), ["ttft_mean_ms=5"], seeds=1, max_num_sims=10
    )  # prefill is 10 ms
    assert result.estimate == 0.0 and result.lower is None
    assert "fail" in result.stop_reason
    assert "0 req/s" in format_capacity(result, "md1", None, 1, None)


def closed_loop_doc(num_requests: int = 200, num_users: int = 2) -> dict[str, Any]:
    """The M/D/1 server, loaded by users who think 0.5 s between requests."""
    doc = md1_doc(num_requests)
    doc["workload"] = {
        "kind": "closed_loop",
        "num_users": num_users,
        "num_requests": num_requests,
        "think_time_s": {"kind": "exponential", "mean_s": 0.5},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": OUTPUT_TOKENS},
    }
    return doc


def test_unbounded_slo_reports_a_lower_bound(memo: dict[str, Record]) -> None:
    # A closed loop cannot be overloaded, so an SLO that always holds bounds nothing
    # (an open loop is bounded by the served check: tests/test_served.py).
    result = capacity(closed_loop_doc(100), ["ttft_mean_ms=1e9"], seeds=1, max_num_sims=6)
    assert result.upper is None and result.estimate == max(p.load for p in result.points)
    assert ">=" in format_capacity(result, "md1", None, 1, None)


def test_closed_loop_searches_over_whole_users(memo: dict[str, Record]) -> None:
    result = capacity(closed_loop_doc(), ["ttft_mean_ms=150"], seeds=2, max_num_sims=30)
    assert result.knob.integer and result.knob.unit == "users"
    assert all(p.load == int(p.load) >= 1 for p in result.points)
    assert result.estimate is not None and result.estimate == int(result.estimate)
    fleet = fleet_for(result, 10.0, 1, None)
    assert fleet is not None and fleet.capacity_rate_per_s > 0  # measured throughput


def test_trace_knob_scales_time() -> None:
    scenario = load_scenario(SCENARIOS / "azure_trace.yaml", ["workload.time_scale=0.5"])
    knob = load_knob(scenario)
    assert knob.kind == "time_scale" and knob.base_rate_per_s is not None
    assert knob.start == pytest.approx(2 * knob.base_rate_per_s)  # twice the trace's rate
    assert knob.value(knob.base_rate_per_s * 4) == pytest.approx(0.25)


def test_trace_replays_run_once_per_load(memo: dict[str, Record]) -> None:
    scenario = load_scenario(SCENARIOS / "azure_trace.yaml", ["workload.max_requests=60"])
    # A p90 (not a p99, which 60 requests cannot estimate: test_capacity_trust).
    searcher = Searcher(scenario, parse_targets(["ttft_p90_ms=500"]), 3, 1)
    assert searcher.result.seeds == (scenario.seed,)
    result = search(searcher, 0.2, 8)
    assert all(len(p.records) == 1 for p in result.points)


def test_cli_num_requests_overrides_each_workload_kind(tmp_path: Path) -> None:
    from sim.planning.capacity import run_length_overrides

    trace = str(SCENARIOS / "azure_trace.yaml")
    assert run_length_overrides(trace, [], 50).sets[-1] == "workload.max_requests=50"
    doc = md1_doc()
    doc["workload"].pop("num_requests")
    doc["workload"]["duration_s"] = 10.0
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(doc))
    extra = run_length_overrides(str(path), [], 50).sets
    assert extra == ["workload.num_requests=50", "workload.duration_s=null"]
    load_scenario(path, extra)  # still a valid scenario
    # No --num-requests: a workload sized by its duration keeps it (a count-sized one
    # runs at least MIN_STEADY_REQUESTS: tests/test_trust_capacity_length.py).
    assert run_length_overrides(str(path), [], None).sets == []


def test_an_slo_at_the_unloaded_latency_searches_no_rate_the_clock_refuses(
    memo: dict[str, Record],
) -> None:
    # TTFT is the prompt's prefill, 1e-4 s a token over 10..190 tokens: 10 ms on
    # average when unloaded. A 1% looser limit holds on average at every low rate but
    # never with confidence (the seeds' means straddle it), so the search looks ever
    # lower for a confident pass. Starting at 1e-6 req/s it used to reach rates whose
    # 200 requests outlast the clock, and stopped with its refusal instead of an answer.
    doc = md1_doc(num_requests=200, rate_per_s=1e-6)
    doc["cost"] = {"kind": "linear", "per_prefill_token_s": 1e-4, "per_decode_seq_s": DECODE_S}
    doc["workload"]["prompt_tokens"] = {"kind": "uniform", "min_tokens": 10, "max_tokens": 190}
    unloaded_ttft_ms = 1e-4 * (10 + 190) / 2 * 1e3
    slo = f"ttft_mean_ms={1.01 * unloaded_ttft_ms}"
    res = capacity(doc, [slo], seeds=3, max_num_sims=90)
    assert res.knob.min_load is not None
    assert min(p.load for p in res.points) >= res.knob.min_load
    assert res.lower is None and res.estimate is not None and res.estimate > 1e-6
    assert "the lowest rate whose run the simulator's clock can hold" in res.stop_reason


# --- fleet and cost --------------------------------------------------------------------------


def point(load: float, throughput: float, tokens: int = 1000, completed: int = 10) -> LoadPoint:
    record = {
        "request_throughput": throughput,
        "total_output_tokens": tokens,
        "completed": completed,
    }
    return LoadPoint(load, [record], {}, {}, "pass", 0.5)


def test_fleet_is_ceil_of_target_over_capacity_and_costs_add_up() -> None:
    result = sim.planning.capacity.CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0, 1))
    result.points = [point(8.0, 7.9), point(10.0, 9.8)]
    result.lower, result.upper, result.estimate = 8.0, 12.0, 10.0
    result.at_estimate = result.points[1]
    fleet = fleet_for(result, 95.0, gpus_per_replica=2, gpu_price_per_hour=3.0)
    assert fleet is not None
    assert fleet.num_replicas == 10 and fleet.num_replicas_at_lower_bound == 12
    assert fleet.num_gpus == 20 and fleet.usd_per_hour == pytest.approx(60.0)
    # 95 req/s x 100 tokens = 9500 tok/s = 34.2M tok/h for $60/h.
    assert fleet.usd_per_million_output_tokens == pytest.approx(60.0 / 34.2)
    no_price = fleet_for(result, 100.0, 1, None)
    assert no_price is not None and no_price.usd_per_hour is None
    text = format_capacity(result, "x", fleet, 2, 3.0)
    assert "perfect load balancer" in text and "10 = ceil(95 / 10)" in text
    doc = json.loads(json.dumps(to_json(result, fleet, "x")))
    assert doc["fleet"]["num_gpus"] == 20 and doc["ci95_lower"] == 8.0


def test_the_report_and_json_name_the_cost_models_that_priced_it(
    memo: dict[str, Record],
) -> None:
    """Neither named the cost model, so a guess could pass for a measurement (issue 30)."""
    result = capacity(md1_doc(100), ["ttft_mean_ms=5"], seeds=1, max_num_sims=10)
    (name,) = cost_models(result)
    assert name == result.points[0].records[0]["cost_model"]
    assert "cost model:".ljust(24) + name in format_capacity(result, "md1", None, 1, None)
    # ... and in the words every face uses for measured or a guess (sim.cost.label).
    source = "cost source:".ljust(24) + cost_model_tag(name)
    assert source in format_capacity(result, "md1", None, 1, None)
    assert to_json(result, None, "md1")["cost_models"] == [name]
    # Two hardware in one search (a knob over GPUs): both, in the order met; none ran: said so.
    mixed = sim.planning.capacity.CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0,))
    mixed.points = [
        LoadPoint(1.0, [{"cost_model": "a"}, {"cost_model": "b"}], {}, {}, "pass", 0.5),
        LoadPoint(2.0, [{"cost_model": "a"}, {}], {}, {}, "pass", 0.5),
    ]
    assert cost_models(mixed) == ["a", "b"]
    empty = sim.planning.capacity.CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0,))
    assert "cost model:".ljust(24) + "none ran" in format_capacity(empty, "x", None, 1, None)
    assert "cost source:".ljust(24) + "none ran" in format_capacity(empty, "x", None, 1, None)


def test_prices_are_overridable_and_gpus_default_to_one() -> None:
    assert gpu_price_per_hour("h100") == GPU_PRICE_PER_HOUR["h100"]
    assert gpu_price_per_hour("h100", 1.25) == 1.25
    assert gpu_price_per_hour("my-asic") is None
    assert scenario_from_dict(md1_doc()).parallelism.num_gpus == 1
    assert usd_per_unit(0.0, 1, 3.0) == math.inf
    assert usd_per_unit(1.0, 2, 3600.0) == pytest.approx(2.0)


def test_capacity_cli_reports_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "md1.yaml"
    path.write_text(yaml.safe_dump(md1_doc(300)))
    out = tmp_path / "out"
    argv = ["capacity", str(path), "--slo", "ttft_mean_ms=200", "--seeds", "2", "--jobs", "1"]
    argv += ["--target-rate", "50", "--gpu-price-per-hour", "2", "--out", str(out), "-q"]
    argv += ["--max-sims", "24", "--rel-width", "0.1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for needle in ("capacity:", "replicas:", "GPUs:", "$", "goodput:", "95% interval"):
        assert needle in text
    doc = json.loads((out / "capacity.json").read_text())
    assert doc["load_key"] == "workload.arrival.rate_per_s"
    assert doc["ci95_lower"] <= doc["capacity"] <= doc["ci95_upper"]
    assert doc["fleet"]["num_replicas"] == math.ceil(50 / doc["capacity"])
    assert doc["num_simulations"] <= 24


def test_interval_widens_to_hold_the_estimate() -> None:
    result = sim.planning.capacity.CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0,))
    result.lower, result.upper, result.estimate = 8.0, 12.0, 7.5
    assert result.interval == (7.5, 12.0)
    result.estimate = 12.5
    assert result.interval == (8.0, 12.5)
    result.lower = None
    assert result.interval == (None, 12.5)


def test_knob_values_for_each_kind() -> None:
    assert LoadKnob("rate", "workload.arrival.rate_per_s", 4.0).value(6.5) == 6.5
    users = LoadKnob("users", "workload.num_users", 8.0)
    assert users.value(12.0) == 12 and isinstance(users.value(12.0), int)
    assert users.integer and users.unit == "users"
    trace = LoadKnob("time_scale", "workload.time_scale", 2.0, base_rate_per_s=2.0)
    assert trace.value(8.0) == pytest.approx(0.25) and trace.unit == "req/s"


def test_reports_of_a_failed_search_serialise(memo: dict[str, Record]) -> None:
    from sim.planning.capacity_report import format_points

    result = capacity(md1_doc(100), ["ttft_mean_ms=5", "tpot_p99_ms=50"], seeds=1, max_num_sims=6)
    table = format_points(result)
    loads = [float(line.split()[0]) for line in table.splitlines()[1:]]
    assert loads == sorted(loads) and "ttft_mean_ms" in table.splitlines()[0]
    assert fleet_for(result, 10.0, 1, 3.0) is None
    doc = to_json(result, None, "md1")
    assert doc["capacity"] == 0.0 and doc["fleet"] is None and doc["at_capacity"] is None
    json.dumps(doc, allow_nan=False)  # no inf or NaN leaks into capacity.json


def test_searcher_rejects_bad_arguments() -> None:
    scenario = scenario_from_dict(md1_doc())
    with pytest.raises(ConfigError, match="at least one SLO"):
        Searcher(scenario, ())
    with pytest.raises(ConfigError, match="--seeds"):
        Searcher(scenario, parse_targets(["ttft_p99_ms=1"]), num_seeds=0)
    searcher = Searcher(scenario, parse_targets(["ttft_p99_ms=1"]), 3)
    with pytest.raises(ConfigError, match="--rel-width"):
        search(searcher, rel_width=1.5)
    with pytest.raises(ConfigError, match="--max-sims"):
        search(searcher, max_num_sims=5)
    assert searcher.result.num_sims == 0  # nothing ran


def test_goodput_counts_requests_within_the_targets(memo: dict[str, Record]) -> None:
    result = capacity(md1_doc(300), ["ttft_p99_ms=400"], seeds=2, max_num_sims=24, rel=0.1)
    assert result.at_estimate is not None
    goodput = result.at_estimate.mean_of("request_goodput")
    throughput = result.at_estimate.mean_of("request_throughput")
    assert goodput is not None and throughput is not None and 0 < goodput <= throughput


@pytest.mark.slow
def test_md1_interval_covers_the_truth_across_seed_sets() -> None:
    """The ~95% interval should hold the analytic rate for (nearly) every seed set."""
    limit_ms = 200.0
    truth = formulas.md1_max_rate_per_s(SERVICE_S, limit_ms / 1000 - PREFILL_S)
    hits = 0
    for base in range(6):
        result = capacity(md1_doc(1000, seed=100 * base), [f"ttft_mean_ms={limit_ms}"])
        low, high = result.interval
        hits += low is not None and high is not None and low <= truth <= high
    assert hits >= 5
