"""Helpers for the trace tests: a hand-traceable scenario and checks of the trace-event format."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from typing import Any

from sim import api
from sim.scenario import scenario_from_dict

EPS_US = 1e-6  # rounding slack: times are written to the nanosecond (1e-3 us)
OVERHEAD_S, PER_PREFILL_TOKEN_S, PER_DECODE_SEQ_S = 0.001, 1e-4, 0.008
WAY_IN_S, TOKENIZE_S, DETOKENIZE_S, OUTPUT_STEP_S = 3e-3, 1e-5, 2e-5, 2e-4
# The frontend's time for a step with one output: its per-step cost plus one detokenization.
DELIVERY_S = OUTPUT_STEP_S + DETOKENIZE_S


def doc(
    num_requests: int = 30,
    rate_per_s: float = 20.0,
    prompt: int = 100,
    output: int = 5,
    budget: int = 64,
    **extra: Any,
) -> dict[str, Any]:
    """A linear-cost scenario with fixed lengths and synchronous scheduling (hand-traceable)."""
    return {
        "cost": {
            "kind": "linear",
            "step_overhead_s": OVERHEAD_S,
            "per_prefill_token_s": PER_PREFILL_TOKEN_S,
            "per_decode_seq_s": PER_DECODE_SEQ_S,
        },
        "scheduler": {
            "kind": "continuous",
            "max_num_seqs": 8,
            "max_num_batched_tokens": budget,
            "chunked_prefill": True,
            **extra.pop("scheduler", {}),
        },
        "engine": {"async_scheduling": False, **extra.pop("engine", {})},
        "frontend": {
            "way_in_s_per_request": WAY_IN_S,
            "tokenize_s_per_token": TOKENIZE_S,
            "detokenize_s_per_token": DETOKENIZE_S,
            "output_step_s": OUTPUT_STEP_S,
        },
        "workload": {
            "kind": "synthetic",
            "num_requests": num_requests,
            "arrival": {"kind": "constant", "rate_per_s": rate_per_s},
            "prompt_tokens": {"kind": "fixed", "tokens": prompt},
            "output_tokens": {"kind": "fixed", "tokens": output},
        },
        **extra,
    }


def traced(document: dict[str, Any], num_traced: int = 10) -> tuple[api.Result, dict[str, Any]]:
    result = api.run(scenario_from_dict(document), trace_requests=num_traced)
    trace = json.loads(json.dumps(result.trace(), allow_nan=False))  # what the file holds
    return result, trace


def phases_of(trace: dict[str, Any], request_id: int) -> list[dict[str, Any]]:
    return [
        e
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == request_id and e["cat"] == "phase"
    ]


def check_format(trace: dict[str, Any]) -> None:
    """Every event as the trace-event format wants it; times in microseconds."""
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    assert trace["displayTimeUnit"] in ("ms", "ns")
    for event in trace["traceEvents"]:
        assert event["ph"] in ("X", "M", "C", "i", "s", "f"), event
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["pid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index")
            assert isinstance(event["args"], dict)
            continue
        assert isinstance(event["ts"], float | int) and event["ts"] >= 0
        if event["ph"] == "X":
            assert isinstance(event["tid"], int)
            assert isinstance(event["dur"], float | int) and event["dur"] >= 0
        if event["ph"] == "C":
            assert event["args"] and all(isinstance(v, int) for v in event["args"].values())
        if event["ph"] == "i":
            assert event["s"] in ("t", "p", "g") and isinstance(event["tid"], int)
        if event["ph"] in ("s", "f"):  # a flow arrow's ends: matched by cat, name and id
            assert isinstance(event["id"], int) and isinstance(event["tid"], int)
            assert event["cat"] == "flow" and event.get("bp", "e") == "e"


def check_nesting(trace: dict[str, Any]) -> None:
    """Within a track, two spans are disjoint or one contains the other; phases never overlap."""
    tracks: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    for event in trace["traceEvents"]:
        if event["ph"] == "X":
            tracks[event["pid"], event["tid"]].append(
                (event["ts"], event["ts"] + event["dur"], event["cat"])
            )
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[float] = []  # a stack of enclosing spans' ends
        for start, end, _ in spans:
            while open_ends and open_ends[-1] <= start + EPS_US:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + EPS_US, "spans cross"
            open_ends.append(end)
        leaves = sorted((s, e) for s, e, cat in spans if cat in ("phase", "step"))
        for (_, end), (start, _) in itertools.pairwise(leaves):
            assert end <= start + EPS_US, "two phases (or steps) of one track overlap"
