"""benchmarks/vllm_oracle.py without vLLM: the comparison, our side's step log, the skip."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.benchmark_module import load_benchmark

oracle = load_benchmark("vllm_oracle")


def _step(scheduled: list[list[int]], finished: list[int] | None = None) -> dict[str, object]:
    return {"scheduled": scheduled, "admitted": [], "preempted": [], "finished": finished or []}


def test_logs_differing_at_step_k_report_k_first() -> None:
    ours = [_step([[0, 5]]), _step([[0, 1]]), _step([[0, 1], [1, 7]]), _step([[1, 1]], [0])]
    theirs = [*ours[:2], _step([[0, 1], [1, 6]]), ours[3]]
    result = oracle.compare(ours, theirs)
    assert result.num_steps_compared == 4
    assert result.num_steps_identical == 3
    assert result.first_difference is not None
    assert result.first_difference.startswith("step 2: scheduled")


def test_identical_logs_have_no_difference_and_extra_steps_count() -> None:
    ours = [_step([[0, 5]]), _step([[0, 1]], [0])]
    assert oracle.compare(ours, list(ours)) == oracle.Comparison(2, 2, None)
    longer = oracle.compare(ours, [*ours, _step([[3, 1]])])
    assert (longer.num_steps_compared, longer.num_steps_identical) == (3, 2)
    assert longer.first_difference == "step 2: ours had already ended"


def test_preemptions_in_order_from_the_queue_front() -> None:
    # Running 1..4; 4 then 3 preempted: each requeued at the front, so the queue
    # reads 3, 4, then the earlier waiting 9.
    assert oracle.preempted_in_order([1, 2, 3, 4], [1, 2], [3, 4, 9]) == [4, 3]


def test_our_side_chunks_a_long_prompt_and_logs_every_request_once() -> None:
    spec = oracle.TraceSpec("hand", 2, (1, 1), (1, 1), 1.0, num_kv_blocks=1000)
    spec = replace(spec, max_num_batched_tokens=2048)
    requests = [
        # 3000-token prompt: chunks 2048 then 952 (budget 2048), first token after
        # the second chunk; 3 outputs: two decode steps follow.
        {"request_id": 0, "arrival_s": 0.0, "num_prompt_tokens": 3000,
         "num_output_tokens": 3, "prefix_group": None, "num_shared_prefix_tokens": 0},
        # Arrives at 1 s (step 1 plans at 1 s): 100-token prompt beside the 952 chunk.
        {"request_id": 1, "arrival_s": 1.0, "num_prompt_tokens": 100,
         "num_output_tokens": 1, "prefix_group": None, "num_shared_prefix_tokens": 0},
    ]  # fmt: skip
    log = oracle.run_ours(spec, requests)
    assert [r["scheduled"] for r in log] == [[[0, 2048]], [[0, 952], [1, 100]], [[0, 1]], [[0, 1]]]
    assert [r["new_visible"] for r in log] == [[0], [1], [], []]
    assert [r["admitted"] for r in log] == [[[0, 0]], [[1, 0]], [], []]
    assert [r["finished"] for r in log] == [[], [1], [], [0]]


def test_shared_prefix_hit_is_logged_at_admission() -> None:
    spec = oracle.TraceSpec("hand", 2, (1, 1), (1, 1), 1.0, num_kv_blocks=1000)
    head = 64  # 4 whole blocks of 16 tokens shared by group 0
    requests = [
        {"request_id": i, "arrival_s": float(i), "num_prompt_tokens": head + 10,
         "num_output_tokens": 2, "prefix_group": 0, "num_shared_prefix_tokens": head}
        for i in range(2)
    ]  # fmt: skip
    log = oracle.run_ours(spec, requests)
    # Request 1 finds request 0's 64 shared tokens cached and computes its 10 own.
    assert log[1]["admitted"] == [[1, head]]
    assert [1, 10] in log[1]["scheduled"]


def test_every_trace_runs_on_our_side_and_finishes_every_request() -> None:
    for spec in oracle.TRACES.values():
        small = replace(spec, num_requests=20)
        log = oracle.run_ours(small, oracle.trace_requests(small))
        assert sorted(rid for r in log for rid in r["finished"]) == list(range(20))
        assert sorted(rid for r in log for rid in r["new_visible"]) == list(range(20))


def test_missing_venv_skips_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert oracle.main(["--venv", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("skipped: no vLLM venv")
