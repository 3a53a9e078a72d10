"""Session 13's audit of the planning answers (capacity, plan, cost-breakdown): each
figure recomputed from the run's own records, and bad input refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main
from tests.cli_errors import one_line_error
from tests.test_model_error import PLAN_SPACE, _write
from tests.test_model_error import SCENARIO as MODEL_ERROR_SCENARIO

# A small plan: Llama-3.1-8B on one H100 (kernel tables), fixed lengths: the model-error
# tests' own, so both files plan the same thing.
SCENARIO: dict[str, Any] = {**MODEL_ERROR_SCENARIO, "name": "answers"}


def test_plan_headroom_sizes_the_fleet_but_prices_the_tokens_of_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: $/Mtok divided the fleet's cost by the tokens of the target plus the
    # headroom (rate the fleet is sized for, not the traffic it serves): 1 / (1 + h)
    # of the true figure; and the SLOs "at the target's share per unit" were measured
    # at the sized rate's share.
    out = tmp_path / "out"
    argv = ["plan", str(_write(tmp_path / "s.yaml", SCENARIO))]
    argv += ["--plan", str(_write(tmp_path / "plan.yaml", PLAN_SPACE))]
    argv += ["--slo", "ttft_mean_ms=2000", "--target-rate", "10", "--headroom", "50"]
    argv += ["--num-requests", "40", "--workers", "1", "-q", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    stdout = capsys.readouterr().out
    doc = json.loads((out / "plan.json").read_text())
    best = doc["best"]
    search = best["search"]
    assert best["sized_rate_per_s"] == pytest.approx(15.0)
    # The units serve the sized rate, one price per GPU-hour each.
    units = search["num_units"]
    capacity = search["capacity_rate_per_s"]
    assert units * capacity >= 15.0 > (units - 1) * capacity
    price = best["gpu_price_per_hour"]
    assert search["usd_per_hour"] == pytest.approx(units * best["gpus_per_unit"] * price)
    # The fleet's output is the target's: 10 req/s x the tokens a request.
    tokens_per_hour = 10 * search["output_tokens_per_request"] * 3600
    usd_mtok = 1e6 * search["usd_per_hour"] / tokens_per_hour
    assert search["usd_per_million_output_tokens"] == pytest.approx(usd_mtok)
    assert f"${usd_mtok:.3f} per million output tokens" in stdout
    assert search["per_unit_rate_per_s"] == pytest.approx(10 / units)


@pytest.mark.parametrize("price", ["inf", "nan", "0", "-1"])
def test_capacity_refuses_a_gpu_price_that_is_not_a_positive_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], price: str
) -> None:
    # Before: inf was taken, printed as "$inf/hour" and written as null in capacity.json.
    scenario = _write(tmp_path / "s.yaml", SCENARIO)
    argv = ["capacity", str(scenario), "--slo", "ttft_mean_ms=2000", "--target-rate", "10"]
    argv += ["--gpu-price-per-hour", price, "-q", "--out", str(tmp_path / "out")]
    message = one_line_error(capsys, argv)
    assert message.startswith("--gpu-price-per-hour"), message


KERNELS = ["--set", "cost.kind=auto", "--set", "model=llama-3.1-8b"]  # H100 kernel tables


@pytest.mark.parametrize("step", ["512p+60d", "60d@2048", "2048p"])
@pytest.mark.parametrize("sets", [[], KERNELS], ids=["roofline", "kernels"])
def test_cost_breakdown_rows_sum_to_the_step_under_speculative_decoding(
    capsys: pytest.CaptureFixture[str], step: str, sets: list[str]
) -> None:
    # Before: the verification's LM head over each drafting sequence's k more
    # positions was in the step but in no row, so the rows fell short of it.
    argv = ["cost-breakdown", "scenarios/speculative.yaml", "--step", step, "--json", *sets]
    assert main(argv) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    parts = [result["other_ms"], *result["speculative_ms"].values()]
    if "ops_ms" in result:
        parts += result["ops_ms"].values()
    else:  # the roofline: the larger of its compute and memory times
        parts.append(max(result["roofline_ms"].values()))
    assert sum(parts) == pytest.approx(result["step_ms"], rel=1e-9)


@pytest.mark.parametrize("sets", [[], ["--set", "cost.kind=roofline"]], ids=["kernels", "roofline"])
def test_cost_breakdown_json_names_the_cost_source_as_the_printout_does(
    capsys: pytest.CaptureFixture[str], sets: list[str]
) -> None:
    # Before: only the printout said whether the step was measured or a guess.
    argv = ["cost-breakdown", "scenarios/chat.yaml", "--step", "512p+60d", *sets]
    assert main(argv) == 0, capsys.readouterr().err
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cost source:"))
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert line == f"cost source: {result['cost_source']}"


def test_capacity_json_names_the_cost_source_as_the_printout_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: only the printout said the roofline's steps are a guess.
    scenario = _write(tmp_path / "s.yaml", {**SCENARIO, "cost": {"kind": "roofline"}})
    out = tmp_path / "out"
    argv = ["capacity", str(scenario), "--slo", "ttft_mean_ms=2000", "--num-requests", "40"]
    argv += ["--seeds", "1", "--max-sims", "3", "-q", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cost source:"))
    doc = json.loads((out / "capacity.json").read_text())
    assert line.removeprefix("cost source:").strip() == "; ".join(doc["cost_sources"])
    assert "guess" in line


def test_a_ratio_a_rounding_error_under_one_is_not_simulated_again() -> None:
    # Before: a served ratio of exactly 0.95 put the ratio at 0.9999999999999999, and
    # the crossing a hair above that load (15.000000000000004): a second evaluation,
    # three more simulations and a second row of the same load in the printout.
    from sim.planning.capacity import LoadPoint, crossing

    low = LoadPoint(15.0, [], {}, {}, "unclear", math.nextafter(1.0, 0.0))
    high = LoadPoint(15.625, [], {}, {}, "unclear", 1.02)
    assert crossing(low, high) == 15.0
    # A crossing that is really between the two is still interpolated.
    assert 15.0 < crossing(LoadPoint(15.0, [], {}, {}, "pass", 0.99), high) < 15.625


def test_a_plan_level_in_no_accepted_combination_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: max_num_seqs 4096 (over every token budget) and chunked_prefill false
    # (every budget under max_model_len) were searched nowhere, and nothing said so.
    space = {**PLAN_SPACE, "max_num_seqs": [64, 4096], "max_num_batched_tokens": [1024]}
    space["chunked_prefill"] = [True, False]
    out = tmp_path / "out"
    argv = ["plan", str(_write(tmp_path / "s.yaml", SCENARIO))]
    argv += ["--plan", str(_write(tmp_path / "plan.yaml", space))]
    argv += ["--slo", "ttft_mean_ms=2000", "--target-rate", "10"]
    argv += ["--num-requests", "40", "--workers", "1", "-q", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    warnings = json.loads((out / "plan.json").read_text())["warnings"]
    seqs = next(w for w in warnings if w.startswith("plan: max_num_seqs 4096: "))
    assert "max_model_len_tokens 2048" in seqs
    assert any(w.startswith("plan: chunked_prefill False: ") for w in warnings)
    assert "plan: max_num_seqs 4096" in err  # the first warning, on the terminal


def test_capacity_json_has_the_printouts_price_and_full_load_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "GPU price" and "at full load" were printed but in no field of capacity.json
    # (without --target-rate there is no fleet to carry the price).
    out = tmp_path / "out"
    argv = ["capacity", str(_write(tmp_path / "s.yaml", SCENARIO)), "--slo", "ttft_mean_ms=2000"]
    argv += ["--num-requests", "40", "--seeds", "1", "--max-sims", "3", "-q", "--out", str(out)]
    assert main([*argv, "--gpu-price-per-hour", "2.5"]) == 0, capsys.readouterr().err
    stdout = capsys.readouterr().out
    doc = json.loads((out / "capacity.json").read_text())
    assert doc["gpu_price_per_hour"] == 2.5
    # One GPU at capacity, every request 20 output tokens (SCENARIO's fixed length).
    one = doc["usd_per_million_output_tokens_at_capacity"]
    assert one == pytest.approx(1e6 * 2.5 / (doc["capacity_rate_per_s"] * 20 * 3600))
    assert f"at full load:           ${one:.3f} per million output tokens" in stdout


def _open_above(cell_upper: float | None) -> Any:
    """A finished 2-seed search: 48 passed with confidence, 52 and 54 unclear, no
    confident fail; the means cross between 52 and 54 (or, without 54, nowhere)."""
    from sim.metrics.slo_targets import parse_targets
    from sim.planning.capacity import CapacitySearch, LoadKnob, judge

    targets = parse_targets(["ttft_p99_ms=100"])
    result = CapacitySearch(LoadKnob("rate", "k", 1.0), targets, (0, 1))

    def point(load: float, ttft_ms: float, spread_ms: float) -> Any:
        runs = [{"p99_ttft_ms": ttft_ms + k * spread_ms, "completed": 10} for k in (-1, 1)]
        return judge(load, runs, targets)

    result.points = [point(48, 50, 1), point(52, 90, 50)]
    if cell_upper is not None:
        result.points.append(point(cell_upper, 110, 50))
    assert [p.status for p in result.points][:2] == ["pass", "unclear"]
    result.lower, result.upper, result.estimate = 48, None, 52
    result.cell, result.at_estimate = (52, cell_upper), result.points[1]
    return result


@pytest.mark.parametrize(("cell_upper", "lower"), [(54.0, 48.0), (None, 48.0), (54.0, None)])
def test_capacity_open_ended_prints_the_estimate_the_json_and_fleet_use(
    cell_upper: float | None, lower: float | None
) -> None:
    # Before: "capacity: >= 48 req/s (no SLO failure found)" where capacity.json and
    # the fleet said 52, and the means had failed at 54; with no load passed with
    # confidence, "capacity: 0 req/s" above a fleet sized for 52.
    from sim.planning.capacity_report import fleet_for, format_capacity, to_json

    result = _open_above(cell_upper)
    result.lower = lower
    fleet = fleet_for(result, 100.0, 1, None)
    text = format_capacity(result, "x", fleet, 1, None)
    line = next(x for x in text.splitlines() if x.startswith("capacity:"))
    assert to_json(result, fleet, "x")["capacity"] == 52
    assert fleet is not None and fleet.capacity_rate_per_s == 52
    answer = line.removeprefix("capacity:").split()[0:2]
    assert answer == (["52", "req/s"] if cell_upper else [">=", "52"]), line
    assert ("no SLO failure found" in line) == (cell_upper is None), line
