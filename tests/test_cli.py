"""``servesim run``: outputs of a good run, one-line errors (exit 2) for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "scenarios" / "chat.yaml"

VLLM_KEYS = [
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    *(
        f"{stat}_{metric}_ms"
        for metric in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "std", "p90", "p99")
    ),
]


def servesim(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run in-process; expect exit status 2 and one line on stderr; return that line.

    Into a folder of its own: the default, ``runs/<name>`` under the working
    directory, may already hold a run (the README's first command writes
    ``runs/chat``), which ``servesim run`` notes on stderr.
    """
    with tempfile.TemporaryDirectory() as folder:
        status = main(["run", *args, "--out", str(Path(folder) / "out"), "-q"])
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("servesim: error: ")
    assert "Traceback" not in err
    return lines[0]


def write_yaml(path: Path, doc: Any) -> Path:
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def chat_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CHAT.read_text())
    return doc


# -- the happy path -------------------------------------------------------------------


def test_run_chat_writes_summary_table_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = servesim(
        "run", "scenarios/chat.yaml", "--out", str(out), "--set", "workload.num_requests=200", "-q"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    missing = [key for key in VLLM_KEYS if key not in summary]
    assert not missing
    assert summary["completed"] + summary["num_rejected"] == 200
    assert summary["completed"] > 0
    for key in ("p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "p99_e2el_ms"):
        assert isinstance(summary[key], float) and summary[key] > 0
    assert summary["median_ttft_ms"] <= summary["p99_ttft_ms"]
    assert summary["request_goodput"] is not None  # chat.yaml sets an SLO
    assert 0 <= summary["request_goodput"] <= summary["request_throughput"] + 1e-12
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == 200
    assert {"request_id", "arrival_s", "first_token_s", "finish_s", "ttft_s"} <= set(
        requests.columns
    )
    for png in ("latency_cdf.png", "timeseries.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "timeseries.csv").stat().st_size > 0
    assert not (out / "steps.parquet").exists()


def test_a_run_prints_whether_its_cost_model_is_measured_or_a_guess(tmp_path: Path) -> None:
    # The printout says it in the words every face uses (sim.cost.label), not only
    # the raw label: a roofline's "guess", kernel tables' "measured" and their source.
    for cost, words in (("{kind: roofline}", "roofline (guess: uncalibrated)"),
                        ("{kind: auto}", "kernel tables (measured")):  # fmt: skip
        proc = servesim(
            "run", "scenarios/chat.yaml", "--out", str(tmp_path / cost[7:11]),
            "--set", "workload.num_requests=20", "--set", f"cost={cost}",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (line,) = [s for s in proc.stdout.splitlines() if s.startswith("cost source: ")]
        assert line.startswith(f"cost source: {words}")


def test_write_steps_and_default_out_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    status = main(["run", str(CHAT), "--set", "workload.num_requests=30", "--write-steps", "-q"])
    assert status == 0
    out = tmp_path / "runs" / "chat"
    steps = pd.read_parquet(out / "steps.parquet")
    assert {"start_s", "end_s", "num_prefill_tokens", "num_decode_seqs"} <= set(steps.columns)
    assert "wrote" in capsys.readouterr().out


def run_summary(tmp_path: Path, name: str, *sets: str) -> tuple[dict[str, Any], pd.DataFrame]:
    out = tmp_path / name
    args = ["run", str(CHAT), "--out", str(out), "-q", "--set", "workload.num_requests=200"]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    return summary, pd.read_parquet(out / "requests.parquet")


def test_set_overrides_take_effect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, base_requests = run_summary(tmp_path, "base")
    same, same_requests = run_summary(tmp_path, "same")
    pd.testing.assert_frame_equal(base_requests, same_requests)
    assert same == base
    assert base["seed"] == 0
    seeded, seeded_requests = run_summary(tmp_path, "seed", "seed=1")
    assert seeded["seed"] == 1
    assert seeded_requests["arrival_s"].tolist() != base_requests["arrival_s"].tolist()
    # Half the rate: 200 Poisson arrivals take about twice as long (sd ~7 % each).
    slow, slow_requests = run_summary(tmp_path, "slow", "workload.arrival.rate_per_s=5")
    ratio = slow_requests["arrival_s"].max() / base_requests["arrival_s"].max()
    assert ratio == pytest.approx(2.0, rel=0.3)
    assert slow["duration"] > 1.5 * base["duration"]
    # The name override renames the scenario in the summary.
    renamed, _ = run_summary(tmp_path, "renamed", "name=other")
    assert renamed["scenario"] == "other"
    capsys.readouterr()


# -- bad input: one line on stderr, exit status 2 ----------------------------------


def test_malformed_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_yaml(tmp_path / "bad.yaml", "name: x\nworkload:\n  kind: synthetic\n   n: 3\n")
    line = run_error(capsys, str(path))
    assert "bad.yaml" in line and "line 4" in line


def test_unknown_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = chat_doc()
    doc["scheduler"]["max_seqs"] = 3
    line = run_error(capsys, str(write_yaml(tmp_path / "unknown.yaml", doc)))
    assert "unknown.yaml" in line and "scheduler" in line and "max_seqs" in line


def test_wrong_typed_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = chat_doc()
    doc["engine"]["block_size_tokens"] = "sixteen"
    line = run_error(capsys, str(write_yaml(tmp_path / "typed.yaml", doc)))
    assert "typed.yaml" in line and "block_size_tokens" in line


def test_negative_arrival_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = chat_doc()
    doc["workload"]["arrival"]["rate_per_s"] = -3
    line = run_error(capsys, str(write_yaml(tmp_path / "rate.yaml", doc)))
    assert "rate.yaml" in line and "rate_per_s" in line


def test_trace_with_a_malformed_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").write_text("timestamp,prompt_tokens,output_tokens\n0,5,5\n1,7,x\n")
    doc = chat_doc()
    doc["workload"] = {"kind": "trace", "format": "csv", "path": "t.csv"}
    line = run_error(capsys, str(write_yaml(tmp_path / "trace.yaml", doc)))
    assert "t.csv" in line and "line 3" in line and "output_tokens" in line


def test_model_that_does_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = chat_doc()
    doc["model"], doc["hardware"] = "llama-3-70b", "l4"
    line = run_error(capsys, str(write_yaml(tmp_path / "big.yaml", doc)))
    assert "big.yaml" in line and "llama-3-70b" in line


def test_unknown_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = chat_doc()
    doc["hardware"] = "tpu-v9"
    line = run_error(capsys, str(write_yaml(tmp_path / "hw.yaml", doc)))
    assert "hw.yaml" in line and "hardware" in line and "tpu-v9" in line


def test_missing_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_error(capsys, str(tmp_path / "none.yaml"))
    assert "none.yaml" in line


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("workload.nope=3", "nope"),
        ("nothere.x.y=3", "nothere"),
        ("seed.x=3", "seed"),
        ("workload.num_requests=many", "num_requests"),
    ],
)
def test_set_on_a_bad_key_path(
    capsys: pytest.CaptureFixture[str], item: str, expected: str
) -> None:
    line = run_error(capsys, str(CHAT), "--set", item)
    assert "chat.yaml" in line and expected in line


@pytest.mark.parametrize("item", ["workload", "=5"])
def test_malformed_set(capsys: pytest.CaptureFixture[str], item: str) -> None:
    line = run_error(capsys, str(CHAT), "--set", item)
    assert "--set" in line and "key=value" in line


def test_errors_from_a_real_process_have_no_traceback(tmp_path: Path) -> None:
    doc = chat_doc()
    doc["bogus"] = True
    path = write_yaml(tmp_path / "bogus.yaml", doc)
    proc = servesim("run", str(path), "-q")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bogus.yaml" in lines[0] and "bogus" in lines[0]
    assert proc.stdout == ""


def test_usage_errors_exit_nonzero() -> None:
    with pytest.raises(SystemExit) as info:
        main(["run"])
    assert info.value.code == 2


@pytest.mark.parametrize(("port", "says"), [("-1", "got -1"), ("65536", "got 65536"), ("x", "'x'")])
def test_serve_refuses_a_port_out_of_range_in_one_line(
    capsys: pytest.CaptureFixture[str], port: str, says: str
) -> None:
    """``--port -1`` was an OverflowError traceback from the socket (issue 30)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "scenarios/validate_tiny_cpu.yaml", "--port", port])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --port" in last and says in last and "Traceback" not in last
