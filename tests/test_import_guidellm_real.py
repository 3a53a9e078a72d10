"""The GuideLLM importer on a report GuideLLM 0.8.1 wrote itself.

``tests/data/imports/guidellm_0.8.1_real_report.json.gz``: ``guidellm run`` with
a 3-benchmark sweep (synchronous, throughput, constant) of 24 requests each
against ``servesim serve scenarios/validate_tiny_cpu.yaml`` (the tiny model on
CPU), synthetic prompts of 64 tokens after a 16-token shared prefix, 32 output
tokens (how exactly: ``tests/data/imports/README.md``). The expectations are
read from the report (its strategies, its own metrics, the bodies it sent),
never copied from a run: the importer's reading is checked against GuideLLM's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.cli import main
from sim.scenario import load_scenario
from sim.validation.importers import detect_format, import_phases
from sim.validation.predict import predict, replay_work
from sim.validation.runs import load_run
from sim.workload.listed_loop import ListedClosedLoop

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "tests" / "data" / "imports" / "guidellm_0.8.1_real_report.json.gz"
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(gzip.decompress(REPORT.read_bytes()))
    return loaded


@pytest.fixture(scope="module")
def runs() -> list[Any]:
    return import_phases(REPORT)


def in_flight(requests: pd.DataFrame) -> int:
    """Most requests between send and the engine's finish at one time."""
    events = sorted(
        [(t, 1) for t in requests["arrival_s"]] + [(t, -1) for t in requests["engine_finish_s"]]
    )
    return int(np.max(np.cumsum([step for _, step in events])))


def expected_load(strategy: dict[str, Any]) -> dict[str, Any]:
    """The servesim profile a GuideLLM strategy is, written out per kind."""
    kind = strategy["type_"]
    if kind == "synchronous":
        return {"profile": "synchronous"}
    cap = {"max_concurrency": strategy["max_concurrency"]}
    if kind == "throughput":
        return {"profile": "throughput"} | cap
    assert kind == "constant", kind  # what this sweep ran
    return {"profile": "constant", "rate_per_s": strategy["rate"]} | cap


def test_it_is_a_guidellm_v2_report_of_a_three_benchmark_sweep(document: dict[str, Any]) -> None:
    assert detect_format(REPORT) == "guidellm"
    assert document["metadata"]["version"] == 2
    assert document["metadata"]["guidellm_version"] == "0.8.1"
    kinds = [bench["config"]["strategy"]["type_"] for bench in document["benchmarks"]]
    assert kinds == ["synchronous", "throughput", "constant"]


def test_import_run_writes_every_benchmark_as_a_phase_with_its_model_and_load(
    tmp_path: Path, document: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "phases"
    assert main(["import-run", str(REPORT), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    benches = document["benchmarks"]
    listing = json.loads((out / "phases.json").read_text())["phases"]
    assert [row["folder"] for row in listing] == [f"phase-{i}" for i in range(len(benches))]
    for i, (row, bench) in enumerate(zip(listing, benches, strict=True)):
        totals = bench["metrics"]["request_totals"]
        assert totals["errored"] == totals["incomplete"] == 0
        phase = load_run(out / row["folder"])
        assert phase.meta["benchmark"] == row["benchmark"] == i
        assert phase.meta["engine"]["model"] == bench["config"]["backend"]["model"] == "tiny"
        assert phase.meta["load"] == row["load"] == expected_load(bench["config"]["strategy"])
        assert len(phase.requests) == row["num_requests"] == totals["successful"]
        assert phase.meta["num_failed"] == phase.meta["num_incomplete"] == 0
        assert f"benchmark {i}: imported {totals['successful']} requests" in printed
        assert detect_format(out / row["folder"]) == "imported"


def test_times_and_lengths_agree_with_guidellms_own_metrics(
    runs: list[Any], document: dict[str, Any]
) -> None:
    """The importer's first token and finish are GuideLLM's first and last token:
    its TTFT and per-request ITL (vLLM's TPOT) come out as GuideLLM computed them."""
    for run, bench in zip(runs, document["benchmarks"], strict=True):
        table, metrics = run.requests, bench["metrics"]
        ttft_ms = (table["first_token_s"] - table["arrival_s"]) * 1e3
        tpot_ms = (
            (table["finish_s"] - table["first_token_s"]) / (table["num_output_tokens"] - 1) * 1e3
        )
        one = np.ones(len(table))
        intervals = (table["num_output_tokens"] - 1).to_numpy(dtype=np.float64)
        # GuideLLM weighs a request's ITL by its intervals (one sample per interval).
        ours = {
            "time_to_first_token_ms": (ttft_ms, one),
            "inter_token_latency_ms": (tpot_ms, intervals),
            "prompt_token_count": (table["num_prompt_tokens"], one),
            "output_token_count": (table["num_output_tokens"], one),
        }
        for name, (values, weights) in ours.items():
            theirs = metrics[name]["successful"]
            assert weights.sum() == theirs["count"], name
            mean = np.average(values, weights=weights)
            assert mean == pytest.approx(theirs["mean"], rel=1e-9), name
            assert values.min() == pytest.approx(theirs["min"], rel=1e-9), name
            assert values.max() == pytest.approx(theirs["max"], rel=1e-9), name
        assert table["arrival_s"].min() == 0.0 and table["arrival_s"].is_monotonic_increasing


def test_the_declared_prefix_is_the_system_message_every_request_sent(
    runs: list[Any], document: dict[str, Any]
) -> None:
    (bucket,) = document["config"]["spec"]["data"][0]["prefix_buckets"]
    for run, bench in zip(runs, document["benchmarks"], strict=True):
        assert run.meta["shared_prefix"]["tokens"] == bucket["prefix_tokens"]
        assert run.meta["shared_prefix"]["groups"] == bucket["prefix_count"] == 1
        assert set(run.requests["num_shared_prefix_tokens"]) == {bucket["prefix_tokens"]}
        # What was sent: one system message, the same for all, of that many bytes
        # (the server's tokenizer is one token a byte).
        systems = {
            json.loads(request["request_args"])["body"]["messages"][0]["content"]
            for request in bench["requests"]["successful"]
        }
        (system,) = systems
        assert len(system.encode()) == bucket["prefix_tokens"]


def test_each_phase_is_replayed_as_guidellm_drove_it(runs: list[Any]) -> None:
    synchronous, throughput, constant = runs
    scenario = load_scenario(SCENARIO)
    work = replay_work(synchronous.requests, synchronous.meta["load"])
    assert isinstance(work, ListedClosedLoop) and work.num_users == 1
    replayed = predict(scenario, synchronous.requests, load=synchronous.meta["load"])
    assert in_flight(replayed.raw.requests) == 1
    # Throughput: every request sent at once (24 under the cap of 512).
    flood = predict(scenario, throughput.requests, load=throughput.meta["load"]).raw.requests
    assert (flood["arrival_s"] == 0.0).all()
    # Constant: GuideLLM's schedule (targeted starts) a request every 1/rate
    # seconds, which the capped replay keeps.
    rate = constant.meta["load"]["rate_per_s"]
    np.testing.assert_allclose(np.diff(constant.requests["scheduled_s"]), 1.0 / rate, rtol=1e-3)
    capped = replay_work(constant.requests, constant.meta["load"])
    assert not isinstance(capped, ListedClosedLoop) and capped.max_concurrency == 512
    np.testing.assert_allclose(capped.arrival_s, constant.requests["scheduled_s"])


def request_set(table: pd.DataFrame) -> list[str]:
    """``--set`` overrides giving a scenario the run's request set: its one prompt
    length, its one output length (GuideLLM's fixed synthetic data), its count."""
    (prompt,) = set(table["num_prompt_tokens"])
    (output,) = set(table["num_output_tokens"])
    return [
        f"workload.prompt_tokens={{kind: fixed, tokens: {prompt}}}",
        f"workload.output_tokens={{kind: fixed, tokens: {output}}}",
        f"workload.num_requests={len(table)}",
    ]


def test_validate_takes_a_phase_against_the_servers_scenario(
    tmp_path: Path, runs: list[Any], document: dict[str, Any]
) -> None:
    """The server's scenario with the report's request set (its lengths, its
    count): ``validate --measured`` predicts the synchronous phase."""
    assert main(["import-run", str(REPORT), "--out", str(tmp_path / "phases")]) == 0
    table = runs[0].requests
    sets = [*request_set(table), "workload.duration_s=null"]
    args = ["validate", str(SCENARIO), *(x for s in sets for x in ("--set", s)), "-q"]
    measured = ["--measured", str(tmp_path / "phases" / "phase-0")]
    # GuideLLM records no device; the user vouches it ran on the scenario's.
    out = tmp_path / "validation"
    assert main([*args, *measured, "--assume-device", "cpu-2core", "--out", str(out)]) == 0
    result = json.loads((out / "validation.json").read_text())
    assert "guidellm format" in result["facts"]["measured"]
    (comparison,) = result["predictions"].values()
    theirs = document["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]
    for metric in ("ttft", "tpot", "e2el"):
        assert comparison[metric]["count"] == {"measured": len(table), "predicted": len(table)}
        assert comparison[metric]["predicted_ms"]["mean"] > 0.0
    assert comparison["ttft"]["measured_ms"]["mean"] == pytest.approx(theirs["mean"], rel=1e-9)
    # No per-chunk times in a GuideLLM report: ITL is predicted, not measured.
    assert comparison["itl"]["count"]["measured"] == 0
    assert comparison["itl"]["count"]["predicted"] > 0


SIMULATED_REPORT = ROOT / "tests" / "data" / "imports" / "guidellm_0.8.1_simulated_server.json.gz"
SIMULATED_SCENARIO = ROOT / "scenarios" / "llama70b_tp.yaml"


def test_guidellm_against_serve_simulate_round_trips_within_the_target(tmp_path: Path) -> None:
    """GuideLLM's report of a run against ``servesim serve --simulate`` (README in
    tests/data/imports) imports and validates against the scenario the server
    simulated, and the prediction meets issue 31's check: TTFT and TPOT within 5 %
    at p50 of what GuideLLM measured (the server's own HTTP path is all that lies
    between them)."""
    out = tmp_path / "imported"
    assert main(["import-run", str(SIMULATED_REPORT), "--out", str(out)]) == 0
    table = load_run(out).requests
    sets = request_set(table)
    validation = tmp_path / "validation"
    args = ["validate", str(SIMULATED_SCENARIO), *(x for s in sets for x in ("--set", s)), "-q"]
    args += ["--measured", str(out), "--assume-model", "llama-3-70b", "--assume-device", "h100"]
    assert main([*args, "--out", str(validation)]) == 0
    (comparison,) = json.loads((validation / "validation.json").read_text())["predictions"].values()
    assert comparison["ttft"]["count"] == {"measured": len(table), "predicted": len(table)}
    assert abs(comparison["ttft"]["error_pct"]["p50"]) <= 5.0
    assert abs(comparison["tpot"]["error_pct"]["p50"]) <= 5.0
