"""vllm bench serve's face on ``servesim run`` (issue 31, item 5): its workload flags
as scenario shortcuts, ``--goodput``, ``--percentile-metrics`` /
``--metric-percentiles``, the ``--save-result`` / ``--save-detailed`` JSON (read back
by ``servesim import-run``), summary.json's traffic keys and ``--save-trace``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from cli_errors import run_error

from sim.cli import main
from sim.errors import ConfigError
from sim.metrics.vllm_result import (
    UNFINISHED,
    chunk_times_s,
    parse_metric_percentiles,
    parse_percentile_metrics,
    stream_peaks,
)
from sim.scenario import BenchFlags, load_scenario
from sim.scenario.bench_flags import apply_bench_flags, parse_goodput, random_length
from sim.validation.formats.vllm_bench import read_vllm_bench
from tests.small_scenario import write_scenario

# vLLM's result JSON keys before the per-request lists (vllm/benchmarks/serve.py).
VLLM_HEAD = [
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
]
VLLM_LISTS = ["input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times"]
VLLM_LISTS += ["generated_texts", "errors"]


def small(folder: Path, name: str = "small", **workload: Any) -> Path:
    """60 requests of 96 + 24 tokens, Poisson at 20 per second (``workload`` keys replace)."""
    path = write_scenario(folder, name, 60, 20.0, 96, 24)
    doc = yaml.safe_load(path.read_text())
    doc["workload"] |= workload
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items()}))
    return path


def run_cli(folder: Path, scenario: Path, *args: str) -> dict[str, Any]:
    """``servesim run`` in-process into ``folder / "out"``; its summary.json."""
    out = folder / "out"
    status = main(["run", str(scenario), "--out", str(out), "-q", "--figure-process", "no", *args])
    assert status == 0
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def dump(scenario: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = scenario.model_dump()
    return dumped


# -- flags are the --set they stand for -------------------------------------------


@pytest.mark.parametrize(
    ("flags", "sets"),
    [
        (BenchFlags(request_rate_per_s=7.5), ["workload.arrival.rate_per_s=7.5"]),
        (BenchFlags(request_rate_per_s=math.inf), ["workload.arrival.rate_per_s=.inf"]),
        (BenchFlags(num_prompts=33), ["workload.num_requests=33"]),
        (
            BenchFlags(burstiness=0.5),
            ["workload.arrival.kind=gamma", "workload.arrival.burstiness=0.5"],
        ),
        (
            BenchFlags(random_input_len_tokens=200, random_output_len_tokens=40),
            [
                "workload.prompt_tokens={kind: fixed, tokens: 200}",
                "workload.output_tokens.tokens=40",
            ],
        ),
        (
            BenchFlags(random_input_len_tokens=100, random_range_ratio=0.25),
            ["workload.prompt_tokens={kind: uniform, min_tokens: 75, max_tokens: 125}"],
        ),
        (BenchFlags(goodput_ms=("ttft:500", "e2el:2000")), ["slo={ttft_ms: 500, e2el_ms: 2000}"]),
    ],
)
def test_each_flag_loads_the_scenario_its_set_does(
    tmp_path: Path, flags: BenchFlags, sets: list[str]
) -> None:
    path = small(tmp_path)
    assert dump(load_scenario(path, (), flags)) == dump(load_scenario(path, sets))
    assert dump(load_scenario(path, (), flags)) != dump(load_scenario(path))


def test_burstiness_keeps_the_rate_and_draws_vllms_gamma_gaps(tmp_path: Path) -> None:
    from sim import api

    path = small(tmp_path)
    flagged = load_scenario(path, (), BenchFlags(burstiness=0.25, request_rate_per_s=4.0))
    arrival = dump(flagged)["workload"]["arrival"]
    assert arrival == {
        "kind": "gamma",
        "rate_per_s": 4.0,
        "burstiness": 0.25,
        "spacing": "vllm_bench",
    }
    # Bursty gaps: the coefficient of variation of gamma gaps is 1 / sqrt(shape) = 2.
    many = load_scenario(path, ["workload.num_requests=4000"], BenchFlags(burstiness=0.25))
    gaps = np.diff(api.run(many).requests["arrival_s"].to_numpy())
    assert 1.7 < gaps.std() / gaps.mean() < 2.3


def test_vllms_random_lengths() -> None:
    assert random_length("--random-input-len", 1024, 0.0) == {"kind": "fixed", "tokens": 1024}
    assert random_length("--random-input-len", 10, 0.33) == {
        "kind": "uniform",
        "min_tokens": math.floor(10 * 0.67),
        "max_tokens": math.ceil(10 * 1.33),
    }
    # An output of at least one token, as vLLM's; a prompt that may be empty is refused.
    assert random_length("--random-output-len", 1, 0.9)["min_tokens"] == 1
    with pytest.raises(ConfigError, match="0 tokens"):
        random_length("--random-input-len", 1, 0.5)


def test_num_prompts_replaces_a_duration_and_caps_a_trace(tmp_path: Path) -> None:
    timed = small(tmp_path, "timed", duration_s=5.0)
    doc = yaml.safe_load(timed.read_text())
    del doc["workload"]["num_requests"]
    timed.write_text(yaml.safe_dump(doc))
    loaded = load_scenario(timed, (), BenchFlags(num_prompts=12))
    workload = dump(loaded)["workload"]
    assert (workload["num_requests"], workload["duration_s"]) == (12, None)
    trace: dict[str, Any] = {"workload": {"kind": "trace", "path": "t.csv", "format": "csv"}}
    apply_bench_flags(trace, BenchFlags(num_prompts=7, max_concurrency=3), (), "doc")
    assert trace["workload"]["max_requests"] == 7 and trace["workload"]["max_concurrency"] == 3


def test_a_profile_workload_takes_its_own_keys() -> None:
    doc: dict[str, Any] = {"workload": {"profile": "poisson", "rate_per_s": 4}}
    with pytest.raises(ConfigError, match="--request-rate does not apply to a profile workload"):
        apply_bench_flags(doc, BenchFlags(request_rate_per_s=8.0), (), "doc")


def test_max_concurrency_is_the_workload_key() -> None:
    doc: dict[str, Any] = {"workload": {"kind": "synthetic"}}
    apply_bench_flags(doc, BenchFlags(max_concurrency=64), (), "doc")
    assert doc["workload"]["max_concurrency"] == 64


@pytest.mark.parametrize(
    ("kind", "args", "named"),
    [
        ("closed_loop", ["--request-rate", "5"], "--request-rate"),
        ("closed_loop", ["--burstiness", "2"], "--burstiness"),
        ("closed_loop", ["--max-concurrency", "8"], "--max-concurrency"),
        ("trace", ["--request-rate", "5"], "--request-rate"),
        ("trace", ["--random-input-len", "64"], "--random-input-len"),
    ],
)
def test_a_flag_on_a_kind_it_does_not_fit_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, args: list[str], named: str
) -> None:
    scenario = Path(
        "scenarios/closed_loop.yaml" if kind == "closed_loop" else "scenarios/azure_trace.yaml"
    )
    assert yaml.safe_load(scenario.read_text())["workload"]["kind"] == kind
    line = run_error(capsys, tmp_path, str(scenario), *args)
    assert named in line and f"a {kind} workload" in line


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--request-rate", "5", "--set", "workload.arrival.rate_per_s=3"], "both set"),
        (
            ["--burstiness", "2", "--set", "workload.arrival={kind: constant, rate_per_s: 1}"],
            "both set",
        ),
        (["--num-prompts", "9", "--set", "workload.duration_s=4"], "both set"),
        (["--goodput", "itl:5"], "NAME:MS"),
        (["--goodput", "ttft:0"], "positive"),
        (["--random-range-ratio", "0.5"], "needs --random-input-len"),
        (["--random-input-len", "64", "--random-range-ratio", "1.0"], "[0, 1)"),
        (["--request-rate", "-1"], "--request-rate"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--percentile-metrics", "ttft,queue"], "--percentile-metrics"),
        (["--metric-percentiles", "50,x"], "--metric-percentiles"),
        (["--metric-percentiles", "50,101"], "--metric-percentiles"),
        (["--save-trace", "requests.txt"], ".jsonl"),
    ],
)
def test_bad_flags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    line = run_error(capsys, tmp_path, str(small(tmp_path)), *args)
    assert words in line


def test_save_detailed_refuses_speculative_decoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = run_error(
        capsys, tmp_path, "scenarios/speculative.yaml", "--save-detailed", str(tmp_path / "x.json")
    )
    assert "--save-detailed" in line and "speculative" in line


def test_parsers() -> None:
    assert parse_percentile_metrics("ttft,e2el,ttft") == ("ttft", "e2el")
    assert parse_metric_percentiles("50,99.9") == (50.0, 99.9)
    assert parse_goodput(["ttft:500", "tpot:50"]) == {"ttft_ms": 500.0, "tpot_ms": 50.0}


# -- what a run reports ------------------------------------------------------------


def test_goodput_flag_counts_what_the_same_slo_in_the_scenario_counts(tmp_path: Path) -> None:
    path = small(tmp_path)
    # Limits at the run's medians: the SLO keeps some requests and drops others.
    plain = run_cli(tmp_path / "plain", path)
    ttft_ms, tpot_ms = plain["median_ttft_ms"], plain["median_tpot_ms"]
    flagged = run_cli(tmp_path / "a", path, "--goodput", f"ttft:{ttft_ms}", f"tpot:{tpot_ms}")
    stated = run_cli(
        tmp_path / "b", path, "--set", f"slo={{ttft_ms: {ttft_ms}, tpot_ms: {tpot_ms}}}"
    )
    assert flagged["request_goodput"] == stated["request_goodput"]
    assert 0 < flagged["request_goodput"] < flagged["request_throughput"]


def test_summary_json_has_vllms_traffic_keys(tmp_path: Path) -> None:
    path = small(tmp_path)
    summary = run_cli(tmp_path / "a", path, "--request-rate", "15", "--burstiness", "3")
    assert summary["num_prompts"] == 60
    assert summary["failed"] == 60 - summary["completed"]
    assert (summary["request_rate"], summary["burstiness"]) == (15.0, 3.0)
    assert summary["max_concurrency"] is None
    at_once = run_cli(tmp_path / "b", path, "--request-rate", "inf")
    assert (at_once["request_rate"], at_once["burstiness"]) == ("inf", 1.0)


def test_an_infinite_rate_is_a_number_in_python_and_inf_in_the_files(tmp_path: Path) -> None:
    from sim import api

    path = small(tmp_path)
    summary = api.run(
        load_scenario(path, ["workload.arrival={kind: constant, rate_per_s: .inf}"])
    ).summary
    assert (
        summary["request_rate"] == math.inf and summary["burstiness"] == math.inf
    )  # a sweep's column
    result = tmp_path / "result.json"
    saved = run_cli(
        tmp_path, path, "--request-rate", "inf", "--burstiness", "inf", "--save-result", str(result)
    )
    assert (saved["request_rate"], saved["burstiness"]) == ("inf", "inf")
    document = json.loads(result.read_text())
    assert (document["request_rate"], document["burstiness"]) == ("inf", "inf")


def test_metric_percentiles_restate_summary_json(tmp_path: Path) -> None:
    summary = run_cli(tmp_path, small(tmp_path), "--metric-percentiles", "50,75")
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    done = requests["finish_s"].notna()
    for metric in ("ttft", "tpot", "e2el"):
        values_ms = requests.loc[done, f"{metric}_s"].dropna().to_numpy() * 1e3
        assert summary[f"p75_{metric}_ms"] == pytest.approx(np.percentile(values_ms, 75))
        assert summary[f"p50_{metric}_ms"] == pytest.approx(summary[f"median_{metric}_ms"])
        assert f"p99_{metric}_ms" not in summary and f"p90_{metric}_ms" not in summary
    assert summary["p50_itl_ms"] == pytest.approx(summary["median_itl_ms"])


def test_a_caveat_names_the_key_the_summary_has_at_any_precision(tmp_path: Path) -> None:
    # 99.99999 has more digits than "%g" keeps (it read "p100"): a caveat must name
    # the summary's own key, which keeps every digit (vllm's spelling).
    summary = run_cli(tmp_path, small(tmp_path), "--metric-percentiles", "50,99.99999")
    percentile_caveats = [c for c in summary["caveats"] if c.startswith("p")]
    assert percentile_caveats  # 60 samples: p99.99999 rests on none beyond it
    for caveat in percentile_caveats:
        assert caveat.split(" ")[0] in summary, caveat
    assert any(c.startswith("p99.99999_ttft_ms ") for c in percentile_caveats)


def test_percentile_metrics_choose_the_printout_and_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "result.json"
    run_cli(
        tmp_path, small(tmp_path), "--percentile-metrics", "ttft,e2el", "--save-result", str(result)
    )
    printed = capsys.readouterr().out
    assert "Mean TTFT (ms):" in printed and "Mean E2EL (ms):" in printed
    assert "Mean TPOT (ms):" not in printed and "Mean ITL (ms):" not in printed
    document = json.loads(result.read_text())
    assert "p99_e2el_ms" in document and "mean_tpot_ms" not in document


def test_save_result_is_vllms_document_without_the_lists(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    summary = run_cli(tmp_path, small(tmp_path), "--save-result", str(result))
    document = json.loads(result.read_text())
    assert list(document)[: len(VLLM_HEAD)] == VLLM_HEAD
    assert not set(VLLM_LISTS) - {"latencies"} & set(document)
    assert len(document["latencies"]) == 60  # vLLM keeps it without --save-detailed
    for key in ("completed", "failed", "duration", "mean_itl_ms", "p99_ttft_ms", "std_e2el_ms"):
        assert document[key] == summary[key], key


def test_detailed_json_imports_back_to_the_run(tmp_path: Path) -> None:
    detailed = tmp_path / "detailed.json"
    run_cli(tmp_path, small(tmp_path), "--save-detailed", str(detailed))
    document = json.loads(detailed.read_text())
    assert list(document)[: len(VLLM_HEAD) + len(VLLM_LISTS)] == VLLM_HEAD + VLLM_LISTS
    run = read_vllm_bench(detailed)
    simulated = pd.read_parquet(tmp_path / "out" / "requests.parquet").sort_values("arrival_s")
    imported = run.requests
    assert len(imported) == len(simulated) == 60
    origin = simulated["arrival_s"].iloc[0]
    for column in ("arrival_s", "first_token_s", "finish_s"):
        got, want = imported[column].to_numpy(), simulated[column].to_numpy() - origin
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=column)
    assert (imported["num_generated_tokens"].to_numpy() == simulated["num_generated_tokens"]).all()
    # One chunk per distinct client time of a request's tokens: at most one per token.
    assert run.tokens is not None
    per_request = run.tokens.groupby("request_id").size().to_numpy()
    assert (per_request <= imported["num_generated_tokens"].to_numpy()).all()
    # The token times and the request records agree: the last chunk is the finish.
    last_chunk_s = np.array(document["ttfts"]) + [sum(gaps) for gaps in document["itls"]]
    np.testing.assert_allclose(last_chunk_s, document["latencies"], rtol=0, atol=1e-9)
    assert document["max_concurrent_requests"] >= 1


def test_import_run_reads_the_detailed_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    detailed = tmp_path / "detailed.json"
    run_cli(tmp_path, small(tmp_path), "--save-detailed", str(detailed))
    assert main(["import-run", str(detailed), "--out", str(tmp_path / "imported")]) == 0
    assert "vllm-bench" in capsys.readouterr().out
    settings = json.loads((tmp_path / "imported" / "run.json").read_text())["settings"]
    assert settings["num_prompts"] == 60 and settings["request_rate"] == 20.0


def test_rejected_requests_are_vllms_failures(tmp_path: Path) -> None:
    detailed = tmp_path / "detailed.json"
    path = small(tmp_path, prompt_tokens={"kind": "uniform", "min_tokens": 32, "max_tokens": 400})
    summary = run_cli(
        tmp_path, path, "--set", "engine.max_model_len_tokens=256", "--save-detailed", str(detailed)
    )
    document = json.loads(detailed.read_text())
    errors = [e for e in document["errors"] if e]
    assert summary["num_rejected"] > 0 and len(errors) == summary["failed"] == document["failed"]
    assert UNFINISHED not in errors
    failed = [i for i, e in enumerate(document["errors"]) if e]
    assert all(document["output_lens"][i] == 0 and document["itls"][i] == [] for i in failed)
    assert read_vllm_bench(detailed).meta["num_failed"] == summary["failed"]


def test_done_when_command_writes_a_detailed_json_that_imports(tmp_path: Path) -> None:
    """Issue 31's "done when", on a short chat. ``--max-concurrency`` sets
    ``workload.max_concurrency``, which open-loop workloads gain in a branch of
    their own: until both are merged this test fails at that key."""
    detailed = tmp_path / "out.json"
    args = ["--request-rate", "20", "--max-concurrency", "64", "--save-detailed", str(detailed)]
    summary = run_cli(tmp_path, Path("scenarios/chat.yaml"), "--num-prompts", "200", *args)
    assert summary["max_concurrency"] == 64 and summary["request_rate"] == 20.0
    assert main(["import-run", str(detailed), "--out", str(tmp_path / "imported")]) == 0
    assert json.loads(detailed.read_text())["max_concurrency"] == 64


# -- traces ---------------------------------------------------------------------------


def test_save_trace_jsonl_is_guidellms_format(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    run_cli(tmp_path, small(tmp_path), "--save-trace", str(trace))
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert all(set(row) == {"timestamp", "input_length", "output_length"} for row in rows)
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet").sort_values("arrival_s")
    assert [row["timestamp"] for row in rows] == requests["arrival_s"].tolist()
    assert [row["input_length"] for row in rows] == requests["num_prompt_tokens"].tolist()
    assert [row["output_length"] for row in rows] == requests["num_output_tokens"].tolist()


def test_save_trace_csv_replays_the_same_requests(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    run_cli(tmp_path / "first", small(tmp_path), "--save-trace", str(trace))
    replay = tmp_path / "replay.yaml"
    replay.write_text(
        yaml.safe_dump(
            {
                "name": "replay",
                "cost": {"kind": "roofline"},
                "workload": {"kind": "trace", "format": "csv", "path": str(trace)},
            }
        )
    )
    run_cli(tmp_path / "second", replay)
    first = pd.read_parquet(tmp_path / "first" / "out" / "requests.parquet").sort_values(
        "arrival_s"
    )
    second = pd.read_parquet(tmp_path / "second" / "out" / "requests.parquet").sort_values(
        "arrival_s"
    )
    origin = first["arrival_s"].iloc[0]
    np.testing.assert_allclose(second["arrival_s"], first["arrival_s"] - origin, atol=1e-12)
    for column in ("num_prompt_tokens", "num_output_tokens", "finish_s"):
        if column == "finish_s":
            np.testing.assert_allclose(second[column], first[column] - origin, atol=1e-9)
        else:
            assert second[column].tolist() == first[column].tolist()


# -- the pieces -------------------------------------------------------------------------


def test_tokens_reaching_the_client_together_are_one_chunk() -> None:
    times = np.array([1.0, 1.5, 1.5, 1.5, 2.0, 3.0, 3.0])
    assert chunk_times_s(times).tolist() == [1.0, 1.5, 2.0, 3.0]
    assert chunk_times_s(np.array([4.0])).tolist() == [4.0]


def test_peaks_count_whole_seconds() -> None:
    start = np.array([0.0, 1.0, 2.0])
    # Seconds 0-2, 1-3 and 2-4 (vLLM counts a request in each second from its start's
    # to its end's, both included): three in second 2, though two at most at once.
    latency = np.array([2.0, 2.0, 2.0])
    chunks = [np.array([0.1, 0.2, 0.3]), np.array([1.5]), np.array([2.5, 3.5])]
    per_s, in_flight = stream_peaks(start, latency, chunks)
    assert in_flight == 3
    assert per_s == 3.0  # three chunks in second 0


def test_save_files_go_into_folders_made_for_them(tmp_path: Path) -> None:
    """A --save-* file in a folder that does not exist yet is written there (the
    folder made, as --out's is), not a traceback after the run."""
    result = tmp_path / "new" / "deeper" / "result.json"
    trace = tmp_path / "other" / "trace.jsonl"
    run_cli(tmp_path, small(tmp_path), "--save-detailed", str(result), "--save-trace", str(trace))
    assert json.loads(result.read_text())["completed"] == 60
    assert len(trace.read_text().splitlines()) == 60
