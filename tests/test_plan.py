"""``servesim plan``: the configuration search (sim.planning.plan) and its command line.

Known answers: two GPUs whose speed and price scale so that one is strictly
cheaper per unit of capacity; a configuration that does not fit; the pruned
search against the exhaustive one on a small space; one-line errors for bad
plans; best.yaml replayed by ``servesim run``. Roofline costs and small
workloads keep it fast.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim import api
from sim.cli import main
from sim.cost.config import auto_choice
from sim.cost.label import cost_model_tag
from sim.errors import ConfigError
from sim.hardware.specs import HARDWARE_PRESETS, hardware_preset
from sim.metrics.slo_targets import parse_targets
from sim.planning.plan import PlanResult, plan, run_length
from sim.planning.plan_bound import Limits, length_stats, lone_request_ms
from sim.planning.plan_file import PlanConfig
from sim.planning.plan_plots import plan_caption
from sim.planning.plan_report import _anchor_paths, format_best, format_table, outcome_doc
from sim.planning.pricing import GPU_PRICE_PER_HOUR, parse_gpu_prices
from sim.planning.sweep_exec import execute
from sim.scenario import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]

# A scenario whose every duration scales with the GPU: no engine CPU work, no
# frontend costs, so a GPU with twice the FLOP/s and bandwidth runs the same
# system twice as fast (the roofline prices a step as max(FLOPs / rate, bytes / rate)).
SCALING_DOC: dict[str, Any] = {
    "name": "scaling",
    "seed": 0,
    "model": "llama-3-8b",
    "hardware": "h100",
    "cost": {"kind": "roofline"},
    "engine": {
        "max_model_len_tokens": 2048,
        "cpu": {
            "per_step_s": 0,
            "scheduler_per_seq_s": 0,
            "sampling_per_seq_s": 0,
            "per_token_s": 0,
            "non_overlapped_s": 0,
        },
    },
    "frontend": {
        "way_in_s_per_request": 0,
        "tokenize_s_per_token": 0,
        "detokenize_s_per_token": 0,
        "output_step_s": 0,
    },
    "workload": {
        "kind": "synthetic",
        "num_requests": 200,
        "arrival": {"kind": "poisson", "rate_per_s": 10},
        "prompt_tokens": {"kind": "fixed", "tokens": 200},
        "output_tokens": {"kind": "fixed", "tokens": 50},
    },
}
SMALL_SPACE: dict[str, Any] = {
    "tensor_parallel_sizes": [1],
    "max_num_seqs": [64],
    "max_num_batched_tokens": [2048],
    "chunked_prefill": [True],
    "refine": False,
    "cost_model": "roofline",
    "max_loads": 8,
}


def _h100_variant(name: str, speed: float, **extra: Any) -> dict[str, Any]:
    h100 = hardware_preset("h100")
    return {
        "preset": "h100",
        "name": name,
        "peak_flops_per_s": h100.peak_flops_per_s * speed,
        "memory_bandwidth_bytes_per_s": h100.memory_bandwidth_bytes_per_s * speed,
        **extra,
    }


def _plan(
    gpus: list[Any],
    prices: dict[str, float],
    rate: float,
    slo: str = "tpot_mean_ms=20",
    **space: Any,
) -> PlanResult:
    scenario = scenario_from_dict(SCALING_DOC)
    config = PlanConfig.model_validate({**SMALL_SPACE, "gpus": gpus, **space})
    targets = parse_targets([slo])
    return plan(scenario, config, targets, rate, prices, workers=1)


def test_every_hardware_preset_has_a_price() -> None:
    assert set(HARDWARE_PRESETS) <= set(GPU_PRICE_PER_HOUR)


def test_gpu_prices_parse_and_refuse() -> None:
    assert parse_gpu_prices(["h100=2.5", "l4=0.5"]) == {"h100": 2.5, "l4": 0.5}
    for bad in ("h100", "h100=", "h100=-1", "=2", "h100=abc", "h100=inf"):
        with pytest.raises(ConfigError, match="--gpu-price"):
            parse_gpu_prices([bad])


def test_run_length_follows_the_tail_sample_rule() -> None:
    # 10 samples beyond p99 need 1000 requests; a mean needs no tail.
    assert run_length(parse_targets(["ttft_p99_ms=500", "tpot_mean_ms=50"])) == 1000
    assert run_length(parse_targets(["tpot_mean_ms=50"])) == 200


@pytest.mark.parametrize(("fast_price", "cheaper"), [(1.2, "fast"), (3.0, "slow")])
def test_cheaper_gpu_per_unit_of_capacity_wins(fast_price: float, cheaper: str) -> None:
    """``fast`` is ``slow`` at twice the FLOP/s and bandwidth. With every duration
    scaling, ``fast`` at rate 2x is ``slow`` at x in half the time, so where the
    served check bounds capacity (a loose SLO) it has exactly twice the capacity:
    at 1.2x the price it is strictly cheaper per unit of capacity, at 3x dearer."""
    gpus = [_h100_variant("slow", 1.0), _h100_variant("fast", 2.0)]
    prices = {"slow": 1.0, "fast": fast_price}
    result = _plan(gpus, prices, 2000.0, prune=False, num_requests=1000, slo="tpot_mean_ms=1000")
    by_gpu = {o.candidate.gpu: o.record or {} for o in result.searched}
    ratio = by_gpu["fast"]["capacity_rate_per_s"] / by_gpu["slow"]["capacity_rate_per_s"]
    assert ratio == pytest.approx(2.0, rel=0.15)  # the search's own resolution and noise
    assert result.best is not None and result.best.candidate.gpu == cheaper


def test_configuration_that_does_not_fit_is_refused_with_its_reason() -> None:
    # 12 GB: Llama-3-8B's 16 GB of weights fit only split over two GPUs.
    small = _h100_variant("small", 1.0, memory_bytes=12e9, cuda_memory_bytes=None)
    result = _plan([small], {"small": 1.0}, rate=50.0, tensor_parallel_sizes=[1, 2])
    by_tp = {o.candidate.tensor_parallel_size: o for o in result.outcomes}
    assert by_tp[1].status == "refused" and "weights" in by_tp[1].reason
    assert by_tp[2].status == "searched" and result.best is by_tp[2]
    with pytest.raises(ConfigError, match="fits no configuration"):
        _plan([small], {"small": 1.0}, rate=50.0, tensor_parallel_sizes=[1])


def test_pruned_search_finds_the_exhaustive_answer() -> None:
    space = {
        "gpus": ["h100", "l40s", "a100-80gb"],
        "tensor_parallel_sizes": [1, 2],
        "max_num_seqs": [16, 64],
        "max_num_batched_tokens": [256, 2048],
    }
    prices = {"h100": 3.0, "l40s": 0.9, "a100-80gb": 1.8}
    pruned = _plan(space.pop("gpus"), prices, 300.0, **space)
    exhaustive = _plan(["h100", "l40s", "a100-80gb"], prices, 300.0, prune=False, **space)
    pruning = ("cannot beat", "coarse-then-refined")
    assert not [o for o in exhaustive.outcomes if o.reason.startswith(pruning)]
    assert len(pruned.searched) < len(exhaustive.searched)  # pruning did something
    assert pruned.best is not None and exhaustive.best is not None
    assert pruned.best.usd_per_hour == exhaustive.best.usd_per_hour
    # A candidate's search does not depend on what ran before it: same records.
    records = {o.candidate: o.record for o in exhaustive.searched}
    for outcome in pruned.searched:
        assert outcome.record is not None
        mine = {k: v for k, v in outcome.record.items() if k != "wall_s"}
        theirs = {k: v for k, v in (records[outcome.candidate] or {}).items() if k != "wall_s"}
        assert mine == theirs
    # Every skip is sound: its bound, or the load where its search failed, could
    # not beat the answer, and the exhaustive search agrees.
    best_usd = exhaustive.best.usd_per_hour
    assert best_usd is not None
    usd = {o.candidate: o.usd_per_hour for o in exhaustive.searched}
    for outcome in pruned.outcomes:
        if outcome.status != "skipped" or not outcome.reason.startswith("cannot beat"):
            continue
        stopped_at = (outcome.record or {}).get("abandoned_at_rate_per_s")
        if stopped_at is None:
            assert outcome.bound_usd_per_hour is not None
            assert outcome.bound_usd_per_hour >= best_usd
        else:
            exhaustive_capacity = records[outcome.candidate] or {}
            assert (exhaustive_capacity.get("capacity_rate_per_s") or 0.0) < stopped_at
            assert (usd[outcome.candidate] or math.inf) >= best_usd
    # The bound is optimistic: no searched candidate beat it.
    for outcome in exhaustive.searched:
        capacity = (outcome.record or {}).get("capacity_rate_per_s") or 0.0
        assert outcome.bound_rate_per_s is not None
        assert capacity <= outcome.bound_rate_per_s


def _write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["plan", *args, "-q"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_cli_writes_table_json_figure_and_a_replayable_best(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Output lengths from a CSV beside the scenario, by a relative path: best.yaml,
    # written elsewhere, must still find it.
    (tmp_path / "scenario").mkdir()
    (tmp_path / "scenario" / "lengths.csv").write_text("out\n" + "\n".join(["40", "60"] * 20))
    workload = {
        **SCALING_DOC["workload"],
        "output_tokens": {"kind": "empirical", "path": "lengths.csv", "column": "out"},
    }
    scenario = _write(tmp_path / "scenario", "s.yaml", {**SCALING_DOC, "workload": workload})
    plan_file = _write(tmp_path, "plan.yaml", {**SMALL_SPACE, "gpus": ["h100", "l40s"]})
    out = tmp_path / "out"
    code, stdout, err = _cli(
        [
            str(scenario),
            "--plan",
            str(plan_file),
            "--slo",
            "tpot_mean_ms=20",
            "--target-rate",
            "40",
            "--gpu-price",
            "h100=2.5",
            "--workers",
            "1",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    assert "cheapest for 40 req/s" in stdout and "roofline (guess: uncalibrated)" in stdout
    doc = json.loads((out / "plan.json").read_text())
    assert doc["num_configurations"] == 2 and doc["num_simulations"] > 0
    assert doc["wall_s"] > 0 and doc["best"] is not None
    h100 = next(c for c in doc["configurations"] if c["gpu"] == "h100")
    assert h100["gpu_price_per_hour"] == 2.5
    assert (out / "cost_vs_capacity.png").stat().st_size > 0
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["workload"]["arrival"]["rate_per_s"] == 40
    assert best["model"] == "llama-3-8b" and best["frontend"] == SCALING_DOC["frontend"]
    units = doc["best"]["search"]["num_units"]
    assert best.get("cluster", {}).get("num_replicas", 1) == units
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.cli",
            "run",
            str(out / "best.yaml"),
            "--out",
            str(tmp_path / "replay"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "replay" / "summary.json").read_text())
    assert summary["completed"] > 0


def test_best_yaml_anchors_a_home_path_as_the_scenario_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A scenario's "~/lengths.csv" is in the user's home (sim.config.anchored), not in a
    # folder named "~" beside the scenario: best.yaml, written elsewhere, keeps it there.
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    doc: dict[str, Any] = {
        "workload": {
            "prompt_tokens": {"kind": "empirical", "path": "~/lengths.csv"},
            "output_tokens": {"kind": "empirical", "path": "out.csv"},
        }
    }
    _anchor_paths(doc, tmp_path / "scenario")
    assert doc["workload"]["prompt_tokens"]["path"] == str((home / "lengths.csv").resolve())
    beside = tmp_path / "scenario" / "out.csv"
    assert doc["workload"]["output_tokens"]["path"] == str(beside.resolve())


@pytest.mark.parametrize(
    ("plan_doc", "extra", "expected"),
    [
        ({"gpus": ["h300"]}, [], "plan: gpus[0]: unknown hardware preset 'h300'"),
        ({"gpus": [_h100_variant("asic", 1.0)]}, [], "no price for GPU 'asic'"),
        ({"gpus": ["h100"]}, ["--gpu-price", "l4=1"], "l4 is not among the plan's GPUs"),
        ({"gpus": ["h100"]}, ["--gpu-price", "h100"], "--gpu-price: 'h100': expected NAME=USD"),
        ({"gpus": ["l4"]}, ["--set", "model=llama-3-70b"], "fits no configuration"),
        ({"gpus": ["h100"], "seeds": 0}, [], "seeds: Input should be greater than or equal"),
        ({"gpus": [{"name": "x"}]}, [], "plan: gpus[0].peak_flops_per_s: Field required"),
        ({"gpus": ["h100"], "disaggregation": {"ratios": ["2"]}}, [], "expected P:D"),
        ({"gpus": ["h100"]}, ["--address", "ray://x:10001"], "--address applies only to"),
        (
            {"gpus": ["h100"]},
            ["--executor", "ray", "--workers", "2"],
            "--workers applies to --executor local",
        ),
    ],
)
def test_plan_cli_bad_input_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    plan_doc: dict[str, Any],
    extra: list[str],
    expected: str,
) -> None:
    scenario = _write(tmp_path, "s.yaml", SCALING_DOC)
    plan_file = _write(tmp_path, "plan.yaml", {**SMALL_SPACE, **plan_doc})
    code, _, err = _cli(
        [
            str(scenario),
            "--plan",
            str(plan_file),
            "--slo",
            "tpot_mean_ms=20",
            "--target-rate",
            "40",
            "--out",
            str(tmp_path / "out"),
            *extra,
        ],
        capsys,
    )
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("servesim: error")]
    assert len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in err


def test_plan_cli_an_slo_no_configuration_meets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _write(tmp_path, "s.yaml", SCALING_DOC)
    plan_file = _write(tmp_path, "plan.yaml", {**SMALL_SPACE, "gpus": ["h100", "l4"]})
    out = tmp_path / "out"
    code, stdout, err = _cli(
        [
            str(scenario),
            "--plan",
            str(plan_file),
            "--slo",
            "tpot_mean_ms=0.5",
            "--target-rate",
            "40",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("servesim: error")]
    assert len(lines) == 1 and "no configuration meets the SLOs (tpot_mean_ms=0.5)" in lines[0]
    # Each configuration says why: here a lone request's decode step is already too slow.
    assert "infeasible at any load" in stdout
    doc = json.loads((out / "plan.json").read_text())
    assert doc["best"] is None and not (out / "best.yaml").exists()
    assert math.isclose(doc["target_rate_per_s"], 40.0)


def test_disaggregated_units_are_searched_and_priced_per_gpu() -> None:
    result = _plan(["h100"], {"h100": 3.0}, 100.0, prune=False, disaggregation={"ratios": ["1:1"]})
    split = next(o for o in result.outcomes if o.candidate.split == (1, 1))
    assert split.status == "searched" and split.num_gpus == 2
    record = split.record or {}
    if record.get("usd_per_hour") is not None:  # a fleet of 2-GPU units
        assert record["usd_per_hour"] == pytest.approx(record["num_units"] * 2 * 3.0)


def _square(task: dict[str, Any]) -> dict[str, Any]:
    return {"x": task["x"] ** 2}


@pytest.mark.parametrize("jobs", [1, 2])
def test_local_executor_draws_the_next_task_only_when_one_finishes(jobs: int) -> None:
    """The planner's pruning decides each next candidate on the records seen so far."""
    drawn: list[int] = []

    def tasks() -> Iterator[dict[str, Any]]:
        for x in range(6):
            drawn.append(x)
            yield {"x": x}

    records = {}
    for index, record in execute(tasks(), "local", jobs, function=_square):
        assert len(drawn) <= len(records) + jobs  # in flight: at most jobs
        records[index] = record
    assert records == {x: {"x": x**2} for x in range(6)}


def test_lone_request_bound_is_below_the_simulated_latency_at_low_load() -> None:
    """A lone request's TTFT and TPOT (plan_bound) cannot exceed what a run at a
    load so low that requests rarely meet measures (frontend costs included)."""
    doc = {**SCALING_DOC, "frontend": {}, "engine": {"max_model_len_tokens": 2048}}
    doc["workload"] = {
        **SCALING_DOC["workload"],
        "arrival": {"kind": "poisson", "rate_per_s": 0.05},
        "prompt_tokens": {
            "kind": "lognormal",
            "median_tokens": 300,
            "sigma": 0.8,
            "max_tokens": 1500,
        },
        "output_tokens": {
            "kind": "lognormal",
            "median_tokens": 40,
            "sigma": 0.5,
            "max_tokens": 200,
        },
    }
    scenario = scenario_from_dict(doc)
    lengths = length_stats(scenario, 1)
    summary = api.run(scenario).summary
    cost = api.cost_model_for(scenario)
    limits = Limits(256, 2048, True)
    for name in ("ttft_p99_ms", "ttft_median_ms", "tpot_p99_ms", "tpot_mean_ms", "itl_p99_ms"):
        target = parse_targets([f"{name}=1"])[0]
        assert lone_request_ms(cost, target, lengths, limits) <= summary[target.summary_key] * (
            1 + 1e-9
        )


def test_a_cost_model_of_one_gpu_is_refused_not_replaced() -> None:
    doc = {**SCALING_DOC, "cost": {"kind": "linear", "step_overhead_s": 0.01}}
    config = PlanConfig.model_validate({**SMALL_SPACE, "gpus": ["h100"], "cost_model": "auto"})
    with pytest.raises(ConfigError, match=r"cost\.kind 'linear' prices one GPU"):
        plan(scenario_from_dict(doc), config, parse_targets(["tpot_mean_ms=20"]), 10.0)


def test_a_search_stops_where_its_fleet_already_loses() -> None:
    """On chat.yaml (roofline), the L40S's optimistic fleet ($9.10/h at 1.30/GPU-hour)
    undercuts the H100's $12/h, so it is searched; its first confident SLO failure
    comes at a load where its fleet would already cost more, and the search stops
    there. The exhaustive search confirms its capacity lies below that load."""
    scenario = load_scenario(ROOT / "scenarios" / "chat.yaml")
    targets = parse_targets(["ttft_p99_ms=500", "tpot_p99_ms=50"])
    prices = {"h100": 3.0, "l40s": 1.3}
    space = {**SMALL_SPACE, "gpus": ["h100", "l40s"], "max_num_seqs": [256], "max_loads": 10}
    results = {
        prune: plan(
            scenario,
            PlanConfig.model_validate({**space, "prune": prune}),
            targets,
            100.0,
            prices,
            workers=1,
        )
        for prune in (True, False)
    }
    l40s = {p: next(o for o in r.outcomes if o.candidate.gpu == "l40s") for p, r in results.items()}
    stopped_at = (l40s[True].record or {}).get("abandoned_at_rate_per_s")
    assert l40s[True].status == "skipped" and stopped_at is not None
    assert l40s[True].bound_usd_per_hour is not None and results[True].best is not None
    assert l40s[True].bound_usd_per_hour < (results[True].best.usd_per_hour or 0.0)
    full = l40s[False].record or {}
    assert (full.get("capacity_rate_per_s") or 0.0) < stopped_at
    assert (l40s[False].usd_per_hour or math.inf) >= (results[True].best.usd_per_hour or 0.0)
    assert results[True].num_simulations < results[False].num_simulations


def test_ray_finds_the_local_answer(tmp_path: Path) -> None:
    """On a Ray cluster a stage's tasks go out at once, so it prunes less, but a
    candidate's search is the same wherever it runs: the same cheapest answer, and
    every candidate both searched has the same record."""
    ray = pytest.importorskip("ray")
    gpus, prices = ["h100", "l40s"], {"h100": 3.0, "l40s": 0.9}
    space = {"tensor_parallel_sizes": [1], "max_num_seqs": [16, 64]}
    local = _plan(gpus, prices, 300.0, **space)
    scenario = scenario_from_dict(SCALING_DOC)
    config = PlanConfig.model_validate({**SMALL_SPACE, "gpus": gpus, **space})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = plan(
            scenario, config, parse_targets(["tpot_mean_ms=20"]), 300.0, prices,
            executor="ray",
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert remote.executor == "ray" and local.best is not None and remote.best is not None
    assert remote.best.usd_per_hour == local.best.usd_per_hour
    records = {o.candidate: o.record for o in remote.searched}
    for outcome in local.searched:
        if outcome.candidate in records and outcome.record is not None:
            mine = {k: v for k, v in outcome.record.items() if k != "wall_s"}
            theirs = {k: v for k, v in (records[outcome.candidate] or {}).items() if k != "wall_s"}
            assert mine == theirs


def test_a_plan_words_each_cost_source_as_every_face_does() -> None:
    """plan.json, the table, the verdict and the figure's caption say each GPU's cost
    source in ``cost_model_tag``'s words (figures, sweeps, serve), read from the cost
    model's label: on the RTX 4090 the shipped kernel tables, on the H100 PCIe (no
    tables for this model) the roofline, a guess. auto's reason stays beside it."""
    doc = {**SCALING_DOC, "cost": {"kind": "auto"}, "hardware": "rtx-4090"}
    gpus = ["rtx-4090", "h100-pcie"]
    config = PlanConfig.model_validate(
        {
            **SMALL_SPACE,
            "gpus": gpus,
            "cost_model": "auto",
            "seeds": 1,
            "max_loads": 4,
            "prune": False,
        }
    )
    scenario = scenario_from_dict(doc)
    prices = {"rtx-4090": 0.5, "h100-pcie": 2.0}
    result = plan(scenario, config, parse_targets(["tpot_mean_ms=200"]), 5.0, prices, 1)
    tags = {}
    for gpu in gpus:
        on_gpu = scenario_from_dict({**doc, "hardware": gpu})
        tags[gpu] = cost_model_tag(api.cost_model_for(on_gpu).label)
        outcome = next(o for o in result.outcomes if o.candidate.gpu == gpu)
        assert outcome.cost_model == tags[gpu]
        json_doc = outcome_doc(outcome)
        assert json_doc["cost_model"] == tags[gpu]
        assert json_doc["cost_model_choice"] == auto_choice(on_gpu.model, on_gpu.hardware)
        # The runs' summary.json label (cost_model_run) reads as the same tag.
        assert outcome.record is not None
        assert cost_model_tag(outcome.record["cost_model_run"]) == tags[gpu]
    assert tags["rtx-4090"].startswith("kernel tables (measured: LLMServingSim")
    assert tags["h100-pcie"] == "roofline (guess: uncalibrated)"
    assert len(result.ranked()) == 2
    table = format_table(result).splitlines()
    for gpu in gpus:
        row = next(line for line in table if line.split()[1:2] == [gpu])
        assert f"  {tags[gpu]}  " in row  # the cost model column, then the model error's
    assert result.best is not None
    assert f"({tags[result.best.candidate.gpu]}; prices approximate" in format_best(result)
    caption = plan_caption(result, "scaling", "llama-3-8b")
    assert f"{tags['rtx-4090']}: rtx-4090" in caption
    assert f"{tags['h100-pcie']}: h100-pcie" in caption
