"""Session 12's audit of the faces: input that was silently dropped or misread now
gets one line naming the file, line, field or flag (exit 2, no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.errors import ConfigError
from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import (
    MIN_STEADY_REQUESTS,
    CapacitySearch,
    LoadKnob,
    run_length_overrides,
)
from sim.planning.capacity_report import to_json
from sim.planning.sweep import load_sweep
from sim.planning.sweep_exec import check_executor
from sim.scenario import load_scenario
from sim.workload.trace import read_csv_columns
from sim.workload.traces.mooncake import read_mooncake
from tests.cli_errors import one_line_error, run_error

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _trace_scenario(tmp_path: Path, rows: str) -> Path:
    (tmp_path / "trace.csv").write_text(AZURE_HEADER + rows)
    scenario = tmp_path / "trace.yaml"
    scenario.write_text(
        "name: trace\ncost: {kind: roofline}\n"
        "workload: {kind: trace, path: trace.csv, format: azure}\n"
    )
    return scenario


@pytest.mark.parametrize(
    ("row", "cells"),
    [
        # '1,200' unquoted: the prompt would read 1 token, the output 200, the 44 dropped.
        ("2023-11-16 18:15:50.99,1,200,44\n", 4),
    ],
)
def test_a_csv_row_with_more_cells_than_the_header_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, row: str, cells: int
) -> None:
    scenario = _trace_scenario(tmp_path, "2023-11-16 18:15:46.68,374,44\n" + row)
    message = run_error(capsys, tmp_path, str(scenario))
    assert message.startswith(f"{tmp_path / 'trace.csv'}, line 3:"), message
    assert f"{cells} cells" in message and "3 columns" in message, message


def test_a_csv_row_short_of_a_column_not_read_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A cell missing from a row shifts the others left: the trace's last column (not
    # read) is absent, but which cell went missing is anyone's guess.
    scenario = _trace_scenario(tmp_path, "2023-11-16 18:15:46.68,374,44\n")
    csv = tmp_path / "trace.csv"
    csv.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens,Note\n" + "2023-11-16 18:15:46.68,374,44\n"
    )
    message = run_error(capsys, tmp_path, str(scenario))
    assert message == f"{csv}, line 2: 3 cells, the header has 4 columns", message


def test_a_csv_row_with_trailing_empty_cells_is_read(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n1,2,\n3,4,,\n")
    assert read_csv_columns(csv, ["a", "b"]).values == {"a": ["1", "3"], "b": ["2", "4"]}


def test_a_header_with_a_trailing_comma_reads_its_rows(tmp_path: Path) -> None:
    # A spreadsheet's export ends every line with a comma, the header's too: its last,
    # empty name is no column, so neither '1,2' nor '1,2,' is a row of the wrong width.
    csv = tmp_path / "t.csv"
    csv.write_text("a,b,\n1,2,\n3,4\n")
    assert read_csv_columns(csv, ["a", "b"]).values == {"a": ["1", "3"], "b": ["2", "4"]}


def test_trace_requests_without_trace_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # It only sizes trace.json: without --trace no trace.json is written.
    message = run_error(capsys, tmp_path, "scenarios/chat.yaml", "--trace-requests", "5")
    assert message == "--trace-requests applies only with --trace", message


@pytest.mark.parametrize(
    ("scenario", "sets", "why"),
    [
        ("scenarios/speculative.yaml", [], "speculative decoding"),
        ("scenarios/policies.yaml", ["scheduler.kind=orca"], "scheduler orca"),
    ],
)
def test_async_scheduling_true_where_no_step_is_planned_ahead_is_refused(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    scenario: str,
    sets: list[str],
    why: str,
) -> None:
    # Before, the run went on with async_scheduling=False: the setting silently dropped.
    argv = [scenario, "--set", "engine.async_scheduling=true", "--set", "workload.num_requests=5"]
    for item in sets:
        argv += ["--set", item]
    message = run_error(capsys, tmp_path, *argv)
    assert message.startswith(f"{scenario}: engine.async_scheduling: true"), message
    assert why in message, message


def _sweep(tmp_path: Path, **fields: object) -> Path:
    base = {
        "name": "base",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 5,
            "arrival": {"kind": "poisson", "rate_per_s": 2.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 10},
        },
    }
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"scenario": "base.yaml", **fields}, sort_keys=False))
    return path


@pytest.mark.parametrize("where", ["grid", "points"])
def test_a_sweep_point_that_sets_seed_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str
) -> None:
    # Before: the runs went, then the report died on a KeyError ('seed' both an
    # override column and the run's seed column), a traceback.
    values = {"grid": {"seed": [1, 2]}, "points": [{"seed": 1}, {"seed": 2}]}[where]
    sweep = _sweep(tmp_path, **{where: values})
    message = one_line_error(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "o"), "-q"])
    assert message.startswith(f"{sweep}: {where}"), message
    assert "seed" in message and "seeds:" in message, message
    assert not (tmp_path / "o" / "cache").exists()


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"grid": {"workload.arrival.rate_per_s": [1.0, 2.0]}}, "grid"),
        ({"points": [{"workload.arrival.rate_per_s": 1.0}]}, "every point"),
    ],
)
def test_a_sweep_override_every_point_replaces_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fields: dict[str, object], where: str
) -> None:
    # Before: overrides' rate 3.0 was used by no point, silently.
    sweep = _sweep(tmp_path, overrides={"workload.arrival.rate_per_s": 3.0}, **fields)
    message = one_line_error(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "o"), "-q"])
    assert message.startswith(f"{sweep}: overrides and {where} both set"), message
    assert "workload.arrival.rate_per_s" in message, message


def test_a_sweep_override_some_points_replace_is_their_default(tmp_path: Path) -> None:
    sweep = _sweep(
        tmp_path,
        overrides={"workload.arrival.rate_per_s": 3.0},
        points=[{"workload.arrival.rate_per_s": 1.0}, {"workload.num_requests": 4}],
    )
    rates = [p.scenario.workload.arrival.rate_per_s for p in load_sweep(sweep).points]  # type: ignore[union-attr]
    assert rates == [1.0, 3.0]


TINY = "scenarios/validate_tiny_cpu.yaml"


@pytest.mark.parametrize(
    "option",
    [
        ["--model", "m"],
        ["--api", "chat"],
        ["--timeout-s", "5"],
        ["--retries", "2"],
        ["--no-ignore-eos"],
        ["--allow-failures"],
    ],
)
def test_an_endpoint_option_without_an_endpoint_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: list[str]
) -> None:
    # Before: the in-process engine measured on, the option unused (--model m named
    # no model, --timeout-s 5 bounded nothing). --threads 0 refuses a run that got past.
    argv = ["measure", TINY, "--out", str(tmp_path / "m"), "-q", *option, "--threads", "0"]
    message = one_line_error(capsys, argv)
    assert message == f"{option[0]} applies with --endpoint (a live server) only", message


@pytest.mark.parametrize(
    "option",
    [["--temperature", "0.5"], ["--top-k", "5"], ["--top-p", "0.5"], ["--no-probe"]],
)
def test_an_in_process_option_with_an_endpoint_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: list[str]
) -> None:
    # Before: the server was sent temperature 0 and no top-k/top-p whatever was given
    # (and --endpoint runs no probe): the option silently dropped.
    argv = ["measure", TINY, "--out", str(tmp_path / "m"), "-q", *option, "--endpoint"]
    message = one_line_error(capsys, [*argv, "http://127.0.0.1:9"])
    assert message.startswith(f"{option[0]} "), message
    assert "no model runs in this process" in message, message


@pytest.mark.parametrize(
    "option",
    [["--grid", "small"], ["--fit", "linear"], ["--seed", "3"], ["--temperature", "0"]],
)
def test_a_timing_option_with_from_run_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: list[str]
) -> None:
    # Before: --from-run fitted the runs with the option unused (no model is timed).
    argv = ["calibrate", "--model", "llama-3-8b", "--hardware", "h100", *option]
    message = one_line_error(capsys, [*argv, "--from-run", str(tmp_path / "none")])
    assert message.startswith(f"{option[0]} {option[1]}: "), message
    assert "--from-run" in message, message


@pytest.mark.parametrize(
    "option",
    [
        ["--hardware", "h100"],
        ["--scenario", "scenarios/chat.yaml"],
        ["--fit-kind", "engine-cpu"],
        ["--free", "overhead_s"],
        ["--max-evals", "30"],
        ["--no-cross-validation"],
    ],
)
def test_a_from_run_option_without_from_run_is_refused(
    capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    # Before: the model was timed (minutes) with the option unused. --threads 0 stops
    # a run that got past the check.
    argv = ["calibrate", "--model", "llama-3-8b", *option, "--threads", "0"]
    message = one_line_error(capsys, argv)
    assert message == f"{option[0]} applies with --from-run only", message


@pytest.mark.parametrize("option", [["--fit", "linear"], ["--temperature", "0"]])
def test_an_option_kernels_does_not_read_is_refused(
    capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    argv = ["calibrate", "--model", "llama-3-8b", "--kernels", *option, "--threads", "0"]
    message = one_line_error(capsys, argv)
    assert message.startswith(f"{option[0]} {option[1]}: "), message
    assert "--kernels" in message, message


MEASURED = "docs/validation/blackbox/cpu-tiny-rate2"


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (["--endpoint", "http://127.0.0.1:9"], "--endpoint http://127.0.0.1:9: --measured"),
        (["--device", "cuda"], "--device cuda: no model runs in this process"),
        (["--temperature", "0.5"], "--temperature applies to the in-process engine"),
        (["--no-probe"], "--no-probe applies to the in-process engine"),
        (["--max-duration-s", "3"], "--max-duration-s 3: --measured"),
        (["--profile", "poisson"], "--profile applies with --endpoint"),
    ],
)
def test_a_measuring_option_with_measured_runs_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: list[str], expected: str
) -> None:
    # Before: validate read the measured run and never measured: the option unused.
    argv = ["validate", TINY, "--measured", MEASURED, "--out", str(tmp_path / "v"), "-q"]
    message = one_line_error(capsys, [*argv, *option])
    assert message.startswith(expected), message


def test_a_mooncake_line_with_an_unknown_field_is_refused(tmp_path: Path) -> None:
    # 'hash_id' for hash_ids: before, the line replayed with no shared prefix, silently.
    path = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
    path.write_text(good + good.replace("hash_ids", "hash_id"))
    with pytest.raises(ConfigError) as error:
        read_mooncake(path)
    message = str(error.value)
    assert message.startswith(f"{path}, line 2: unknown field 'hash_id'"), message
    assert "hash_ids" in message, message


@pytest.mark.parametrize(
    ("scenario", "key", "given"),
    [
        ("scenarios/chat.yaml", "workload.num_requests", "workload.num_requests=5000"),
        ("scenarios/azure_trace.yaml", "workload.max_requests", "workload.max_requests=5000"),
        # A mapping sets its leaves (before: it read as 'workload' and got through).
        ("scenarios/chat.yaml", "workload.num_requests", "workload={num_requests: 5000}"),
    ],
)
def test_capacity_num_requests_and_a_set_of_the_run_length_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenario: str, key: str, given: str
) -> None:
    # Before: --num-requests's override came last and won; the --set's 5000 was dropped.
    argv = ["capacity", scenario, "--slo", "ttft_p99_ms=500", "--set", given]
    argv += ["--num-requests", "200", "--seeds", "1", "--max-sims", "2", "-q"]
    message = one_line_error(capsys, [*argv, "--out", str(tmp_path / "c")])
    assert message == f"--num-requests 200 and --set {key} both set the run's length; give one"


@pytest.mark.parametrize(
    ("key", "given"),
    [
        ("workload.num_requests", "workload.num_requests=500"),
        ("workload.duration_s", "workload.duration_s=500"),
        ("workload.num_requests", "workload={num_requests: 500}"),
    ],
)
def test_plan_refuses_a_set_of_the_run_length_it_replaces(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, given: str
) -> None:
    # Before: plan sized every run itself (the plan file's num_requests or the SLOs'),
    # the --set silently replaced. --workers 0 stops a plan that got past the check.
    argv = ["plan", "scenarios/chat.yaml", "--slo", "ttft_p99_ms=500", "--target-rate", "5"]
    argv += ["--set", given]
    message = one_line_error(capsys, [*argv, "--workers", "0", "--out", str(tmp_path / "p")])
    assert message.startswith(f"--set {key}: plan sizes each run itself"), message
    assert "--num-requests" in message, message


def test_a_whole_workload_set_that_sets_no_length_is_no_run_length_set(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The trace replayed twice as slow; how many of its requests to run is not set.
    trace = "scenarios/azure_trace.yaml"
    given = "workload={kind: trace, path: data/azure_conv_sample.csv, format: azure, time_scale: 2}"
    # capacity: --num-requests sizes the run the --set's workload describes.
    workload = load_scenario(trace, run_length_overrides(trace, [given], 200).sets).workload
    assert (workload.max_requests, workload.time_scale) == (200, 2)
    # plan: past the check, --workers 0 is the first thing refused.
    argv = ["plan", trace, "--slo", "ttft_p99_ms=500", "--target-rate", "5", "--set", given]
    argv += ["--workers", "0", "--out", str(tmp_path / "p")]
    assert one_line_error(capsys, argv) == "--workers must be >= 1, got 0"


def test_a_set_of_one_key_given_twice_with_two_values_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: the last one won, the first silently dropped (a run of 30 requests).
    sets = ["--set", "workload.num_requests=20", "--set", "workload.num_requests = 30"]
    message = run_error(capsys, tmp_path, "scenarios/chat.yaml", *sets)
    assert message == (
        "--set workload.num_requests: given twice, 'workload.num_requests=20' and "
        "'workload.num_requests = 30'; give one"
    )


def test_a_set_repeated_with_the_same_value_is_one_setting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sets = ["--set", "workload.num_requests=5", "--set", "workload.num_requests=5"]
    argv = ["run", "scenarios/chat.yaml", *sets, "--out", str(tmp_path / "o"), "-q"]
    assert main([*argv, "--figure-process", "no"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("{kind: lognormal, median_tokens: .inf, sigma: 0.5, max_tokens: 500}", "median_tokens"),
        ("{kind: lognormal, median_tokens: 100, sigma: .inf, max_tokens: 500}", "sigma"),
        ("{kind: normal, mean_tokens: .inf, std_tokens: 1, max_tokens: 500}", "mean_tokens"),
        ("{kind: normal, mean_tokens: 100, std_tokens: .inf, max_tokens: 500}", "std_tokens"),
        ("{kind: exponential, mean_tokens: .inf, max_tokens: 500}", "mean_tokens"),
    ],
)
def test_an_infinite_length_parameter_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, section: str, field: str
) -> None:
    # Before: every prompt sat at max_tokens (or, sigma .inf, half at each bound) and
    # the run went on as if the distribution were the one asked for.
    sets = ["--set", "workload.num_requests=5", "--set", f"workload.prompt_tokens={section}"]
    message = run_error(capsys, tmp_path, "scenarios/chat.yaml", *sets)
    assert message.startswith(f"scenarios/chat.yaml: workload.prompt_tokens.{field}:"), message
    assert "finite" in message, message


def test_an_infinite_kv_transfer_latency_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: the run 'succeeded' with 0 successful requests, numpy warnings and n/a.
    key = "cluster.disaggregation.kv_transfer_latency_s"
    sets = ["--set", "workload.num_requests=5", "--set", f"{key}=.inf"]
    message = run_error(capsys, tmp_path, "scenarios/disaggregated.yaml", *sets)
    assert message.startswith(f"scenarios/disaggregated.yaml: {key}:"), message
    assert "finite" in message, message


def test_an_infinite_static_max_wait_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: a batch short of max_batch_size waited forever: a RuntimeError traceback
    # (generator raised StopIteration) out of the event loop.
    scheduler = "scheduler={kind: static, max_batch_size: 64, max_wait_s: .inf}"
    sets = ["--set", "workload.num_requests=5", "--set", scheduler]
    message = run_error(capsys, tmp_path, "scenarios/policies.yaml", *sets)
    assert message.startswith("scenarios/policies.yaml: scheduler."), message
    assert "max_wait_s" in message and "finite" in message, message


def test_sweep_jobs_with_the_ray_executor_is_refused() -> None:
    # Before: Ray placed the tasks itself and --jobs 2 was dropped, silently (plan's
    # --workers already said so).
    with pytest.raises(ConfigError, match=r"^--jobs applies to --executor local"):
        check_executor("ray", 2, None)


@pytest.mark.parametrize(
    ("scenario", "source"),
    [
        ("scenarios/mooncake_trace.yaml", "hash_ids"),
        ("scenarios/prefix_caching.yaml", "workload.prefix_groups"),
    ],
)
def test_save_trace_of_requests_sharing_prefixes_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenario: str, source: str
) -> None:
    # Before: the trace was written with lengths and times only, and a replay of it
    # shared no prefix (its prefix cache hit nothing), silently. (GuideLLM's format has
    # no ids; servesim's csv keeps them since session 13: test_bad_inputs_s13_workload.)
    trace = tmp_path / "t.jsonl"
    sets = [
        "--set",
        "workload.max_requests=5" if "mooncake" in scenario else "workload.num_requests=5",
    ]
    message = run_error(capsys, tmp_path, scenario, *sets, "--save-trace", str(trace))
    assert message.startswith(f"--save-trace {trace}: the trace would drop their shared"), message
    assert source in message, message
    assert not trace.exists()


def test_capacity_says_it_raises_a_short_run_and_records_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: runs of 10,000 requests for the --set's 100, without a word at run time
    # or in capacity.json. --jobs 0 stops the search after the line is printed.
    argv = ["capacity", "scenarios/chat.yaml", "--slo", "ttft_p99_ms=500", "-q"]
    argv += ["--set", "workload.num_requests=100", "--jobs", "0", "--out", str(tmp_path / "c")]
    assert main(argv) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"run length: {MIN_STEADY_REQUESTS} requests a run, raised from"), line
    # (the 100 is the --set's: the line says so, not "the scenario's 100")
    assert "raised from 100 (the scenario's, with its --set" in line, line
    assert "--num-requests" in line, line
    search = CapacitySearch(
        LoadKnob("rate", "k", 1.0), tuple(parse_targets(["ttft_p99_ms=500"])), (0,)
    )
    assert to_json(search, None, "chat", run_length=line)["run_length"] == line


@pytest.mark.parametrize(
    "given",
    [
        "workload.arrival.rate_per_s=5",
        "workload={kind: synthetic, num_requests: 5}",  # named by its first leaf
        "workload={}",
        "slo.ttft_ms=100",
        "frontend.detokenize_s_per_token=0.001",
        "cluster.num_replicas=2",
        "seed=3",
    ],
)
def test_cost_breakdown_refuses_a_set_the_step_price_never_reads(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    # Before: the step was priced as without the --set, which changed nothing, silently.
    argv = ["cost-breakdown", "scenarios/chat.yaml", "--step", "512p", "--set", given]
    message = one_line_error(capsys, argv)
    key, _, value = given.partition("=")
    name = f"{key}.kind" if value.startswith("{kind:") else key
    assert message.startswith(f"--set {name}: "), message
    assert "one step's price" in message, message


@pytest.mark.parametrize(
    "key",
    [
        "parallelism.tensor_parallel_size=2",
        "engine.block_size_tokens=32",
        "scheduler.max_num_seqs=128",
        "hardware=a100-80gb",
        "name=other",
    ],
)
def test_cost_breakdown_takes_a_set_the_step_price_may_read(
    capsys: pytest.CaptureFixture[str], key: str
) -> None:
    argv = ["cost-breakdown", "scenarios/chat.yaml", "--step", "512p", "--set", key]
    assert main(argv) == 0, capsys.readouterr().err
