"""GuideLLM imports that keep what the run knew (issue 31, item 4).

``tests/data/imports/guidellm_report_v2.json`` is handwritten, following the
report schema of GuideLLM 0.8.1 (``metadata.version: 2``; ``benchmarks[i].config``
with ``strategy`` and ``backend.model``; ``info.timings`` per request; the
synthetic data's ``prefix_buckets``): five benchmarks of six requests, one per
strategy (synchronous, concurrent at 2 streams, throughput capped at 3,
constant at 4/s, poisson at 4/s capped at 2), every prompt starting with the
same 64 tokens.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from calibration.compare_measured import load_measured
from sim.cli import main
from sim.errors import ConfigError
from sim.scenario import Scenario, scenario_from_dict
from sim.validation.formats.guidellm import read_guidellm, strategy_load
from sim.validation.importers import detect_format, import_phases, import_run
from sim.validation.predict import predict, replay_work
from sim.validation.runs import load_run
from sim.workload.listed_loop import ListedClosedLoop

DATA = Path(__file__).parent / "data" / "imports"
REPORT = DATA / "guidellm_report_v2.json"
OLD_REPORT = DATA / "guidellm_report.json"
VLLM_BENCH = DATA / "vllm_bench_detailed.json"


def gzipped(source: Path, folder: Path) -> Path:
    target = folder / (source.name + ".gz")
    target.write_bytes(gzip.compress(source.read_bytes()))
    return target


def scenario(num_requests: int = 6, prefix_caching: bool = True) -> Scenario:
    return scenario_from_dict(
        {
            "name": "replay",
            "model": "llama-3-8b",
            "hardware": "l4",
            "cost": {"kind": "roofline"},
            "engine": {"enable_prefix_caching": prefix_caching},
            "workload": {
                "kind": "synthetic",
                "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                "prompt_tokens": {"kind": "fixed", "tokens": 100},
                "output_tokens": {"kind": "fixed", "tokens": 10},
                "num_requests": num_requests,
            },
        }
    )


def in_flight(requests: pd.DataFrame) -> int:
    """Most requests between send and the engine's finish at one time."""
    events = sorted(
        [(t, 1) for t in requests["arrival_s"]] + [(t, -1) for t in requests["engine_finish_s"]]
    )
    return int(np.max(np.cumsum([step for _, step in events])))


def test_v2_report_names_its_model_from_the_benchmark_backend() -> None:
    run = read_guidellm(REPORT, 0)
    assert run.meta["engine"]["model"] == "Qwen/Qwen3-0.6B"
    assert read_guidellm(OLD_REPORT).meta["engine"]["model"] == "Qwen/Qwen3-8B"  # v1: args.model


def test_gzipped_reports_are_read_wherever_json_is(tmp_path: Path) -> None:
    for source, name in ((REPORT, "guidellm"), (VLLM_BENCH, "vllm-bench")):
        packed = gzipped(source, tmp_path)
        assert detect_format(packed) == name
        plain = import_phases(source)[0].requests
        pd.testing.assert_frame_equal(import_phases(packed)[0].requests, plain)


def test_a_broken_gzip_file_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "report.json.gz"
    broken.write_bytes(gzip.compress(REPORT.read_bytes())[:200])
    with pytest.raises(ConfigError, match="cannot read") as error:
        read_guidellm(broken, 0)
    assert "\n" not in str(error.value) and str(broken) in str(error.value)


def test_every_benchmark_imports_as_a_phase_with_its_load() -> None:
    runs = import_phases(REPORT)
    assert [run.meta["benchmark"] for run in runs] == [0, 1, 2, 3, 4]
    assert [run.meta["load"] for run in runs] == [
        {"profile": "synchronous"},
        {"profile": "concurrent", "streams": 2},
        {"profile": "throughput", "max_concurrency": 3},
        {"profile": "constant", "rate_per_s": 4.0},
        {"profile": "poisson", "rate_per_s": 4.0, "max_concurrency": 2},
    ]
    chosen = import_phases(REPORT, benchmarks=[3, 1])
    assert [run.meta["benchmark"] for run in chosen] == [3, 1]
    with pytest.raises(ConfigError, match=r"--benchmark 5 out of range 0\.\.4"):
        import_phases(REPORT, benchmarks=[5])
    with pytest.raises(ConfigError, match=r"choose one with --benchmark 0\.\.4, or import"):
        import_run(REPORT)


def test_cli_writes_one_folder_per_phase_that_validate_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "phases"
    assert main(["import-run", str(REPORT), "--out", str(out), "--benchmark", "0,2"]) == 0
    printed = capsys.readouterr().out
    assert (
        "benchmark 2: imported 6 requests" in printed and "throughput max_concurrency 3" in printed
    )
    listing = json.loads((out / "phases.json").read_text())
    assert [row["folder"] for row in listing["phases"]] == ["phase-0", "phase-2"]
    phase = load_run(out / "phase-2")
    assert phase.meta["load"] == {"profile": "throughput", "max_concurrency": 3}
    assert detect_format(out / "phase-2") == "imported"
    with pytest.raises(ConfigError, match=r"a run of 2 phases \(phase-0, phase-2\); give one"):
        detect_format(out)
    with pytest.raises(ConfigError, match=r"--measured .*a run of 2 phases"):
        load_measured(out)  # what validate --measured reads
    measured = load_measured(out / "phase-2")
    assert measured.summary["load"] == {"profile": "throughput", "max_concurrency": 3}
    # One benchmark chosen: the folder itself is the run, as before.
    single = tmp_path / "one"
    assert main(["import-run", str(REPORT), "--out", str(single), "--benchmark", "1"]) == 0
    assert load_run(single).meta["benchmark"] == 1


@pytest.mark.parametrize("flag", ["x", "-1", "1,1"])
def test_cli_bad_benchmark_list_is_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["import-run", str(REPORT), "--out", "o", "--benchmark", flag])
    assert "--benchmark" in capsys.readouterr().err


def test_the_reports_prefix_is_declared_and_prefix_tokens_overrides_it(tmp_path: Path) -> None:
    run = read_guidellm(REPORT, 0)
    assert run.meta["shared_prefix"]["tokens"] == 64
    assert set(run.requests["num_shared_prefix_tokens"]) == {64}
    assert set(run.requests["prefix_group"]) == {0}
    out = tmp_path / "declared"
    assert main(["import-run", str(REPORT), "--out", str(out), "--benchmark", "0",
                 "--prefix-tokens", "32"]) == 0  # fmt: skip
    declared = load_run(out)
    assert set(declared.requests["num_shared_prefix_tokens"]) == {32}
    assert declared.meta["shared_prefix"]["declared_by"] == "--prefix-tokens"
    # Any format takes the flag; a report without a prefix declares none.
    assert "prefix_group" not in read_guidellm(OLD_REPORT).requests.columns
    bench = import_run(VLLM_BENCH, prefix_tokens=8).requests
    assert (bench["num_shared_prefix_tokens"] == np.minimum(bench["num_prompt_tokens"], 8)).all()


def test_several_prefixes_in_a_report_need_a_declared_one(tmp_path: Path) -> None:
    document = json.loads(REPORT.read_text())
    buckets = document["config"]["data"][0]["prefix_buckets"]
    buckets.append({"bucket_weight": 50, "prefix_count": 1, "prefix_tokens": 256})
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"several prefixes .*--prefix-tokens N"):
        read_guidellm(path, 0)
    assert len(read_guidellm(path, 0, prefix_tokens=64).requests) == 6


def test_prefix_given_as_argument_text_is_found(tmp_path: Path) -> None:
    document = json.loads(REPORT.read_text())
    document["config"]["data"] = ["prompt_tokens=128,output_tokens=16,prefix_tokens=48"]
    for bench in document["benchmarks"]:
        bench["config"]["requests"] = {}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    assert read_guidellm(path, 0).meta["shared_prefix"]["tokens"] == 48


@pytest.mark.parametrize(
    ("strategy", "load"),
    [
        ({"type_": "synchronous"}, {"profile": "synchronous"}),
        ({"type_": "concurrent", "streams": 8}, {"profile": "concurrent", "streams": 8}),
        ({"type_": "throughput", "max_concurrency": None}, {"profile": "throughput"}),
        ({"type_": "constant", "rate": 2}, {"profile": "constant", "rate_per_s": 2.0}),
        ({"type_": "trace", "time_scale": 1.0}, None),
        (None, None),
    ],
)
def test_strategies_map_to_profiles(strategy: Any, load: Any) -> None:
    assert strategy_load(strategy, "here") == load


def test_a_bad_strategy_is_one_line() -> None:
    with pytest.raises(ConfigError, match="here: streams must be a finite number"):
        strategy_load({"type_": "concurrent"}, "here")


def test_each_phase_is_replayed_with_its_own_profile() -> None:
    runs = {run.meta["benchmark"]: run for run in import_phases(REPORT)}
    synchronous = replay_work(runs[0].requests, runs[0].meta["load"])
    assert isinstance(synchronous, ListedClosedLoop) and synchronous.num_users == 1
    replayed = predict(scenario(), runs[0].requests, load=runs[0].meta["load"]).raw.requests
    assert in_flight(replayed) == 1  # one at a time, whatever the simulated pace
    np.testing.assert_array_equal(
        replayed.sort_values("request_id")["num_prompt_tokens"],
        runs[0].requests["num_prompt_tokens"],
    )
    concurrent = predict(scenario(), runs[1].requests, load=runs[1].meta["load"]).raw.requests
    assert in_flight(concurrent) == 2
    throughput = predict(scenario(), runs[2].requests, load=runs[2].meta["load"]).raw.requests
    assert in_flight(throughput) == 3
    assert (throughput["arrival_s"] == 0.0).sum() == 3  # three at once, the rest as slots free
    capped = replay_work(runs[4].requests, runs[4].meta["load"])
    assert not isinstance(capped, ListedClosedLoop) and capped.max_concurrency == 2
    # The poisson phase's schedule, not its delayed sends, is what the cap replays.
    np.testing.assert_allclose(capped.arrival_s, [0.0, 0.1, 0.15, 0.5, 0.55, 0.6], atol=1e-6)
    constant = replay_work(runs[3].requests, runs[3].meta["load"])
    assert not isinstance(constant, ListedClosedLoop) and constant.max_concurrency is None
    np.testing.assert_array_equal(constant.arrival_s, runs[3].requests["arrival_s"])


def test_a_declared_prefix_gives_the_replay_its_prefix_hits() -> None:
    with_prefix = read_guidellm(REPORT, 0)
    load = with_prefix.meta["load"]
    hits = predict(scenario(), with_prefix.requests, load=load).raw.requests
    without = with_prefix.requests.drop(columns=["prefix_group", "num_shared_prefix_tokens"])
    none = predict(scenario(), without, load=load).raw.requests
    # 64 tokens are four 16-token blocks: every request after the first reuses them.
    assert hits["num_prefix_hit_tokens"].sum() >= 5 * 64
    assert none["num_prefix_hit_tokens"].sum() < hits["num_prefix_hit_tokens"].sum()


def test_measured_folder_of_a_phase_round_trips(tmp_path: Path) -> None:
    copy = tmp_path / "report.json"
    shutil.copy(REPORT, copy)
    run = import_run(copy, benchmark=4)
    assert "scheduled_s" in run.requests.columns
    run.write(tmp_path / "phase")
    again = load_run(tmp_path / "phase")
    pd.testing.assert_frame_equal(again.requests, run.requests)


@pytest.mark.parametrize(
    ("rate", "load"),
    [(4.0, {"max_concurrency": 2}), ("inf", {"profile": "throughput", "max_concurrency": 2})],
)
def test_a_capped_vllm_bench_run_keeps_its_cap_and_schedule(
    tmp_path: Path, rate: Any, load: dict[str, Any]
) -> None:
    document = json.loads(VLLM_BENCH.read_text())
    document |= {"max_concurrency": 2, "request_rate": rate}
    document["queue_times"] = [0.0, 0.0, 0.0, 0.125, 0.25]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(document))
    run = import_run(path)
    assert run.meta["load"] == load
    # Kept requests (the third failed) were sent at 0, .25, .5, 1.0 and held 0, 0, .125, .25.
    np.testing.assert_allclose(run.requests["arrival_s"], [0.0, 0.25, 0.5, 1.0])
    np.testing.assert_allclose(run.requests["scheduled_s"], [0.0, 0.25, 0.375, 0.75])
    work = replay_work(run.requests, load)
    assert not isinstance(work, ListedClosedLoop) and work.max_concurrency == 2
    expected = np.zeros(4) if "profile" in load else [0.0, 0.25, 0.375, 0.75]
    np.testing.assert_allclose(work.arrival_s, expected)
    assert import_run(VLLM_BENCH).meta["load"] is None
