"""``servesim measure --endpoint``: whole runs against fake servers (failures, limits, layout)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from endpoint_fakes import FakeServer

from calibration.compare_measured import load_measured
from sim.cli import main as cli_main
from sim.errors import ConfigError
from sim.scenario import load_scenario
from sim.validation.endpoint import (
    EndpointOptions,
    EndpointRun,
    RunState,
    endpoint_run,
    run_endpoint,
)
from sim.workload.generate import RequestArrays

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"


def work(n: int, spacing_s: float = 0.005) -> RequestArrays:
    return RequestArrays(
        np.arange(n, dtype=np.float64) * spacing_s,
        np.full(n, 12, dtype=np.int64) + np.arange(n),
        np.full(n, 4, dtype=np.int64),
    )


def measure(server: FakeServer, requests: RequestArrays, **kw: Any) -> tuple[RunState, EndpointRun]:
    opts = EndpointOptions(url=server.url, progress=False, **kw)
    state = run_endpoint(requests, opts)
    return state, endpoint_run(load_scenario(SCENARIO), requests, state, opts)


def test_all_ok_run_records_exact_lengths_and_one_itl_per_chunk() -> None:
    with FakeServer() as server:
        state, run = measure(server, work(6))
    assert state.status == "complete" and state.model == "fake-model"
    req = run.requests
    assert list(req["request_id"]) == list(range(6))
    assert req["error"].isna().all() and run.summary["num_failed"] == 0
    assert run.summary["completed"] == 6 and not run.summary["partial"]
    # The fake tokenizer counts characters + 1: the prompts hit the targets exactly.
    assert list(req["num_prompt_tokens"]) == list(12 + np.arange(6))
    assert req["prompt_tokens_exact"].all()
    assert (req["num_generated_tokens"] == 4).all() and (req["num_chunks"] == 4).all()
    assert (req["first_token_s"] > req["arrival_s"]).all()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    assert len(run.tokens) == 24  # one row per chunk -> 3 ITL samples per request
    assert run.summary["prompt_tokens"].startswith("exact")
    assert run.summary["ignore_eos"] is True
    measured = [b for b in server.bodies if b["prompt"] != "hello"]
    assert all(b["ignore_eos"] and b["stream"] and b["model"] == "fake-model" for b in measured)
    assert sorted(b["max_tokens"] for b in measured) == [4] * 6


def test_failures_are_counted_and_kept() -> None:
    with FakeServer(behaviours=("ok", "500", "close", "merge")) as server:
        _, run = measure(server, work(8))
    req = run.requests
    assert run.summary["num_failed"] == 4 and run.summary["completed"] == 4
    assert run.summary["failures"] == {
        "HTTP 500: internal error second line": 2,
        "stream closed before [DONE]": 2,
    }
    failed = req[req["error"].notna()]
    assert failed["finish_s"].isna().all()
    assert sorted(failed["http_status"].tolist()) == [200, 200, 500, 500]
    merged = req[(req["num_chunks"] == 2) & req["error"].isna()]
    assert len(merged) == 2  # 4 tokens in 2 chunks: usage says 4, ITL has 1 sample each
    assert (merged["num_generated_tokens"] == 4).all()
    assert not run.summary["partial"]  # every request ran: failures are not a partial run


def test_timeouts_and_the_duration_limit_keep_what_completed() -> None:
    with FakeServer(behaviours=("ok", "hang")) as server:
        state, run = measure(server, work(4), timeout_s=30, max_duration_s=1.0)
    assert state.status == "time limit" and run.summary["partial"]
    req = run.requests
    assert run.summary["completed"] == 2
    assert (req["error"] == "in flight when the run stopped").sum() == 2
    with FakeServer(behaviours=("ok", "hang")) as server:
        _, run = measure(server, work(4), timeout_s=0.5)
    assert run.summary["failures"] == {"timed out after 0.5 s": 2}
    assert run.summary["status"] == "complete"


def test_a_server_without_tokenize_gets_approximate_prompts() -> None:
    with FakeServer(tokenize=False) as server:
        _, run = measure(server, work(3))
    assert run.summary["prompt_tokens"].startswith("approximate")
    # usage's prompt_tokens (characters + 1 here) is what the table keeps.
    assert run.requests["prompt_tokens_exact"].all()
    assert run.summary["completed"] == 3


def test_a_tokenize_that_never_answers_is_given_up_after_timeout_s() -> None:
    """The probe ignored --timeout-s and ``measure --endpoint`` hung (issue 30)."""
    with FakeServer(tokenize_hangs=True) as server:
        _, run = measure(server, work(2), timeout_s=0.5)  # before the fix: never returned
    assert run.summary["prompt_tokens"].startswith("approximate")
    assert run.summary["completed"] == 2


def test_the_folder_is_a_measure_folder(tmp_path: Path) -> None:
    with FakeServer(behaviours=("ok", "500")) as server:
        _, run = measure(server, work(4))
    paths = run.write(tmp_path)
    names = {p.name for p in paths}
    assert {"requests.parquet", "summary.json", "tokens.parquet", "steps.parquet"} <= names
    assert {"run.json", "timeseries.csv", "latency_cdf.png", "timeseries.png"} <= names
    loaded = load_measured(tmp_path)  # what servesim validate reads
    assert loaded.summary["mode"] == "measured" and len(loaded.requests) == 4
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["partial"] is False and meta["num_failed"] == 2
    assert meta["format"] == "servesim-endpoint"
    series = pd.read_csv(tmp_path / "timeseries.csv")
    assert series["num_running"].iloc[-1] == 0 and series["num_running"].min() >= 0
    assert series["num_waiting"].min() >= 0


def test_concurrency_bound_holds_requests_at_the_client() -> None:
    with FakeServer() as server:
        _, run = measure(server, work(5, spacing_s=0.0), max_concurrency=1)
    req = run.requests.sort_values("arrival_s")
    # One at a time: each is sent after the previous one finished.
    assert (req["arrival_s"].to_numpy()[1:] >= req["finish_s"].to_numpy()[:-1]).all()
    assert (req["scheduled_arrival_s"] == 0.0).all()


def test_unreachable_endpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeServer() as server:
        url = server.url  # a port that was free, and is closed again
    code = cli_main(["measure", str(SCENARIO), "--endpoint", url, "--out", str(tmp_path), "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"servesim: error: --endpoint {url}: cannot reach the server")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_options_are_checked_before_anything_is_sent() -> None:
    with pytest.raises(ConfigError, match="--max-concurrency"):
        run_endpoint(work(1), EndpointOptions(url="http://h", max_concurrency=0))
    with pytest.raises(ConfigError, match="--timeout-s"):
        run_endpoint(work(1), EndpointOptions(url="http://h", timeout_s=0))
    with pytest.raises(ConfigError, match="expected http"):
        run_endpoint(work(1), EndpointOptions(url="localhost:1"))


def test_the_cli_run_writes_the_folder_and_fails_when_nothing_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = ["measure", str(SCENARIO), "-q", "--set", "workload.duration_s=1"]
    with FakeServer() as server:
        assert cli_main([*line, "--endpoint", server.url, "--out", str(tmp_path / "a")]) == 0
    assert "measured fake-model" in capsys.readouterr().out
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["completed"] >= 1
    with FakeServer(behaviours=("500",)) as server:
        code = cli_main([*line, "--endpoint", server.url, "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and "no request completed (HTTP 500" in err
    assert (tmp_path / "b" / "requests.parquet").is_file()  # kept all the same


def test_the_client_imports_no_torch() -> None:
    code = (
        "import sys, sim.validation.endpoint, sim.cli.endpoint; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_server_that_refuses_ignore_eos_is_measured_without_it() -> None:
    with FakeServer(reject_ignore_eos=True) as server:
        _, run = measure(server, work(3))
    assert run.summary["ignore_eos"] is False and run.summary["completed"] == 3
    assert sum("ignore_eos" in b for b in server.bodies) == 1  # only the first probe


def test_the_model_comes_from_the_option_or_the_list() -> None:
    with FakeServer(models=("first", "second")) as server:
        state, _ = measure(server, work(1))
        named, _ = measure(server, work(1), model="second")
    assert (state.model, named.model) == ("first", "second")
    with FakeServer(models_status=404) as server:
        named, _ = measure(server, work(1), model="m")  # no model list: the option will do
        assert named.model == "m"
        with pytest.raises(ConfigError, match="answered 404; pass --model"):
            measure(server, work(1))
    with FakeServer(models=()) as server, pytest.raises(ConfigError, match="lists no model"):
        measure(server, work(1))


def test_a_server_that_refuses_the_test_request_stops_the_run_in_one_line() -> None:
    with FakeServer(probe_status=403) as server:
        opts = EndpointOptions(url=server.url, progress=False)
        with pytest.raises(ConfigError, match=r"a 1-token test request failed \(HTTP 403: no"):
            run_endpoint(work(2), opts)
    probes = [b for b in server.bodies if b["prompt"] == "hello"]
    assert [("ignore_eos" in b) for b in probes] == [True, False]  # tried with, then without
    assert server.num_measured == 0  # nothing was sent


def test_ctrl_c_keeps_what_completed_and_marks_the_run_partial(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeServer(behaviours=("ok", "hang")) as server:
        line = ["measure", str(SCENARIO), "--endpoint", server.url, "--out", str(out), "-q"]
        sets = ["--set", "workload.duration_s=1", "--set", "workload.arrival.rate_per_s=8"]
        # A child inherits an ignored SIGINT (pytest run as a background job, as in
        # `nohup ... &`) and would then never see the Ctrl-C: it gets a handled one.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sim.cli", *line, *sets],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        deadline = time.monotonic() + 60
        while server.num_measured < 4:  # two of them hang: the run cannot end by itself
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "interrupted (Ctrl-C): kept what completed" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True and summary["status"] == "interrupted"
    assert summary["completed"] >= 2
    requests = pd.read_parquet(out / "requests.parquet")
    stopped = requests["error"].isin(
        ["in flight when the run stopped", "never sent: the run stopped first"]
    )
    # Every request is kept: completed ones without an error, the others with
    # theirs (stopped by the interrupt, or cut off as it arrived).
    done = requests["finish_s"].notna()
    assert int(done.sum()) == summary["completed"]
    assert requests.loc[done, "error"].isna().all() and requests.loc[~done, "error"].notna().all()
    assert stopped.sum() >= 2  # the two hanging requests at least
    assert json.loads((out / "run.json").read_text())["partial"] is True


def test_a_partial_measurement_exits_non_zero_unless_failures_are_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = ["measure", str(SCENARIO), "-q", "--set", "workload.duration_s=1"]
    line += ["--set", "workload.arrival.rate_per_s=8"]  # several requests, every other a 500
    with FakeServer(behaviours=("ok", "500")) as server:
        code = cli_main([*line, "--endpoint", server.url, "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    num_failed, completed = summary["num_failed"], summary["completed"]
    assert num_failed >= 1 and completed >= 1  # kept, with the failures counted
    assert f"{num_failed} of {num_failed + completed} requests failed (HTTP 500" in err
    assert "--allow-failures" in err
    with FakeServer(behaviours=("ok", "500")) as server:
        argv = [*line, "--endpoint", server.url, "--out", str(tmp_path / "b"), "--allow-failures"]
        assert cli_main(argv) == 0


def test_a_prioritised_workload_sends_each_requests_priority() -> None:
    plain = work(4)
    urgency = np.array([2, 0, 1, 0], dtype=np.int64)
    prioritised = RequestArrays(
        plain.arrival_s, plain.num_prompt_tokens, plain.num_output_tokens, priority=urgency
    )
    with FakeServer() as server:
        measure(server, prioritised)
        # Request i's prompt is 12 + i tokens: ordered by length, the bodies are requests 0..3.
        measured = sorted(
            (b for b in server.bodies if b["prompt"] != "hello"), key=lambda b: len(b["prompt"])
        )
    assert [b["priority"] for b in measured] == urgency.tolist()
    with FakeServer() as server:
        measure(server, plain)
    assert not any("priority" in b for b in server.bodies)
