"""Short runs read capacity high (issue 39, item 24).

A finite open-loop run ends before a server near saturation has built its
steady backlog, so its tail latencies read low and the capacity high
(scenarios/chat.yaml: 27.9 req/s from runs of 1,000 requests, 25.5 from
10,000; benchmarks/capacity_length_bias.py). ``servesim capacity`` therefore
runs at least ``MIN_STEADY_REQUESTS`` requests by default, and an answer from
shorter runs carries a caveat saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import (
    MIN_STEADY_REQUESTS,
    CapacitySearch,
    LoadKnob,
    caveats,
    judge,
    run_length_overrides,
)
from sim.scenario import load_scenario

CHAT = str(Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml")


def _requests(path: str, sets: list[str]) -> Any:
    return load_scenario(path, sets).workload.num_requests


def test_the_default_run_is_long_enough_to_reach_steady_state() -> None:
    assert _requests(CHAT, []) < MIN_STEADY_REQUESTS  # chat.yaml's own 2,000 ...
    raised = run_length_overrides(CHAT, [], None).sets  # ... raised
    assert _requests(CHAT, raised) >= MIN_STEADY_REQUESTS
    # An explicit --num-requests is the user's choice, and a longer scenario stays as it is.
    assert _requests(CHAT, run_length_overrides(CHAT, [], 1000).sets) == 1000
    longer = ["workload.num_requests=20000"]
    assert _requests(CHAT, run_length_overrides(CHAT, longer, None).sets) == 20000


def test_a_closed_loop_keeps_its_own_length(tmp_path: Path) -> None:
    doc = yaml.safe_load(Path(CHAT).read_text())
    doc["workload"] = {
        "kind": "closed_loop",
        "num_users": 4,
        "num_requests": 200,
        "think_time_s": {"kind": "fixed", "value_s": 0.0},
        "prompt_tokens": doc["workload"]["prompt_tokens"],
        "output_tokens": doc["workload"]["output_tokens"],
    }
    path = tmp_path / "closed.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert run_length_overrides(str(path), [], None).sets == []


def _record(completed: int) -> dict[str, Any]:
    return {"p99_ttft_ms": 100.0, "served_ratio": 1.0, "completed": completed, "num_rejected": 0}


@pytest.mark.parametrize(
    ("kind", "completed", "warned"),
    [
        ("rate", 1000, True),
        ("rate", MIN_STEADY_REQUESTS, False),
        ("users", 1000, False),  # users wait for their answers: no backlog to build
    ],
)
def test_an_answer_from_short_open_loop_runs_says_it_reads_high(
    kind: Any, completed: int, warned: bool
) -> None:
    targets = tuple(parse_targets(["ttft_p99_ms=500"]))
    res = CapacitySearch(LoadKnob(kind, "k", 1.0), targets, (0, 1))
    res.at_estimate = judge(5.0, [_record(completed)] * 2, targets)
    notes = [n for n in caveats(res, None) if n.startswith(f"runs of {completed} requests")]
    assert bool(notes) == warned
    if warned:
        assert notes[0].endswith(f"--num-requests >= {MIN_STEADY_REQUESTS} removes most of that")
