"""trace.json through the faces: clusters, the CLI, and requests that never finished."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from trace_checks import check_format, check_nesting, doc

from sim import api
from sim.cli import main
from sim.engine.records import RequestTable
from sim.engine.step_runs import StepTable
from sim.metrics.lifecycle import SPAN_COLUMNS, reconstructed_spans


def test_cluster_and_disaggregated_runs_trace_every_replica() -> None:
    root = Path(__file__).parent.parent / "scenarios"
    for name, replicas in (("replicas.yaml", 4), ("disaggregated.yaml", 4)):
        result = api.run(root / name, ["workload.num_requests=60"], trace_requests=20)
        trace = result.trace()
        check_format(trace)
        check_nesting(trace)
        pids = {e["pid"] for e in trace["traceEvents"] if e.get("cat") == "step"}
        assert pids <= {2 + r for r in range(replicas)} and len(pids) >= 2
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "phase"}
    assert "kv_transfer" in names  # disaggregated: prefill replica to decode replica


def test_cli_writes_trace_json_only_when_asked(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(doc(num_requests=20)))
    assert main(["run", str(scenario), "--out", str(tmp_path / "a"), "-q"]) == 0
    assert (tmp_path / "a" / "waterfall.png").exists()
    assert not (tmp_path / "a" / "trace.json").exists()
    line = ["run", str(scenario), "--out", str(tmp_path / "b"), "-q", "--trace"]
    assert main([*line, "--trace-requests", "5"]) == 0
    trace = json.loads((tmp_path / "b" / "trace.json").read_text())
    check_format(trace)
    assert trace["otherData"]["num_traced_requests"] == 5
    assert {e["tid"] for e in trace["traceEvents"] if e.get("cat") == "request"} == set(range(5))


def test_cli_rejects_a_non_positive_trace_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(doc(num_requests=5)))
    line = ["run", str(scenario), "--out", str(tmp_path), "-q", "--trace", "--trace-requests"]
    assert main([*line, "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trace-requests" in err[0]


def test_unfinished_requests_are_drawn_up_to_where_they_got() -> None:
    requests = pd.DataFrame(
        {
            "request_id": [0],
            "arrival_s": [0.0],
            "ready_s": [0.5],
            "first_scheduled_s": [float("nan")],
            "first_token_s": [float("nan")],
            "finish_s": [float("nan")],
            "num_prompt_tokens": [10],
            "num_output_tokens": [5],
            "num_generated_tokens": [0],
            "num_preemptions": [0],
            "replica": [0],
            "rejection_reason": [None],
        }
    )
    table = RequestTable.from_frame(requests)
    rows = reconstructed_spans(table, StepTable(()), {}, 10)
    spans = pd.DataFrame(rows, columns=SPAN_COLUMNS)
    assert spans[["phase", "start_s", "end_s"]].values.tolist() == [["way_in", 0.0, 0.5]]
