"""trace.json's flow arrows (request prefill -> engine step) and the way in's token counts."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from trace_checks import EPS_US, check_format, check_nesting, doc, traced

from sim import api
from sim.metrics.trace import FIRST_STEP_FLOW, TOKEN_STEP_FLOW, trace_document
from sim.scenario import scenario_from_dict

CHAT = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"


def varied_prompts(num_requests: int = 40, budget: int = 64) -> dict[str, Any]:
    """The hand-traceable scenario with prompts of 20 to 200 tokens: some fit in one
    step's budget, some take several chunks."""
    document = doc(num_requests=num_requests, rate_per_s=40.0, budget=budget)
    document["workload"]["prompt_tokens"] = {"kind": "uniform", "min_tokens": 20, "max_tokens": 200}
    return document


def flows(trace: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    events = trace["traceEvents"]
    return [e for e in events if e["ph"] == "s"], [e for e in events if e["ph"] == "f"]


def slices(trace: dict[str, Any], cat: str) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """The complete events of ``cat`` by (pid, tid)."""
    out: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in trace["traceEvents"]:
        if event["ph"] == "X" and event["cat"] == cat:
            out[event["pid"], event["tid"]].append(event)
    return out


def enclosing(candidates: list[dict[str, Any]], ts: float) -> list[dict[str, Any]]:
    return [e for e in candidates if e["ts"] - EPS_US <= ts <= e["ts"] + e["dur"] + EPS_US]


def check_flows(trace: dict[str, Any], requests: pd.DataFrame) -> dict[int, list[str]]:
    """Every arrow's two ends pair up and bind where they should; the arrows by request."""
    starts, finishes = flows(trace)
    ids = [e["id"] for e in starts]
    assert len(ids) == len(set(ids)), "flow ids repeat"
    assert sorted(ids) == sorted(e["id"] for e in finishes), "a start without its finish"
    finish_of = {e["id"]: e for e in finishes}
    phases, steps = slices(trace, "phase"), slices(trace, "step")
    by_request: dict[int, list[str]] = defaultdict(list)
    engine = requests.set_index("request_id")
    for start in starts:
        finish = finish_of[start["id"]]
        assert (start["name"], start["cat"]) == (finish["name"], finish["cat"])
        assert start["ts"] <= finish["ts"] + EPS_US  # an arrow never points back in time
        assert start["pid"] == 1 and finish["pid"] >= 2 and finish["bp"] == "e"
        # The start sits in one of its request's prefill spans, the finish in one step.
        (phase,) = enclosing(phases[1, start["tid"]], start["ts"])
        assert phase["name"] == "prefill"
        (step,) = enclosing(steps[finish["pid"], finish["tid"]], finish["ts"])
        assert step["args"]["num_prefill_tokens"] > 0  # the step computed prompt tokens
        row = engine.loc[start["tid"]]
        if start["name"] == TOKEN_STEP_FLOW:  # that step ends when the engine's first token does
            assert step["ts"] + step["dur"] == pytest.approx(row["engine_first_token_s"] * 1e6)
        else:
            assert start["name"] == FIRST_STEP_FLOW  # starts when the request was first scheduled
            assert step["ts"] == pytest.approx(row["first_scheduled_s"] * 1e6, abs=1e-3)
        by_request[start["tid"]].append(start["name"])
    return by_request


def test_each_prefill_links_to_its_first_step_and_its_first_token_step() -> None:
    result, trace = traced(varied_prompts(), num_traced=40)
    check_format(trace)
    check_nesting(trace)
    by_request = check_flows(trace, result.raw.requests)
    prefill_chunks = Counter(
        e["tid"] for e in trace["traceEvents"] if e.get("cat") == "phase" and e["name"] == "prefill"
    )
    assert set(by_request) == set(prefill_chunks)  # every traced request with a prefill
    for request_id, names in by_request.items():
        # One chunk: one step both began the prefill and made the first token.
        expected = (
            [FIRST_STEP_FLOW]
            if prefill_chunks[request_id] == 1
            else [
                FIRST_STEP_FLOW,
                TOKEN_STEP_FLOW,
            ]
        )
        assert names == expected, request_id
    assert any(len(n) == 2 for n in by_request.values())
    assert any(len(n) == 1 for n in by_request.values())


def test_arrows_from_reconstructed_spans_agree() -> None:
    # Untraced: one prefill span from first scheduled step to first token, rebuilt
    # from the records; the arrows land on the same steps.
    document = varied_prompts()
    traced_result, traced_trace = traced(document, num_traced=40)
    plain = api.run(scenario_from_dict(document))
    rebuilt = plain.trace(40)
    check_format(rebuilt)

    def ends(trace: dict[str, Any]) -> list[tuple[str, int, int]]:
        starts, finishes = flows(trace)
        finish_of = {f["id"]: f for f in finishes}
        steps = slices(trace, "step")
        out = []
        for s in starts:
            f = finish_of[s["id"]]
            (step,) = enclosing(steps[f["pid"], 0], f["ts"])
            out.append((s["name"], s["tid"], round(step["ts"])))
        return sorted(out)

    check_flows(rebuilt, plain.raw.requests)
    assert ends(rebuilt) == ends(traced_trace)
    assert traced_result.summary["mean_ttft_ms"] == plain.summary["mean_ttft_ms"]


def test_arrows_only_to_steps_the_file_holds() -> None:
    result, _ = traced(varied_prompts(), num_traced=40)
    raw = result.raw
    document = trace_document(result.spans(40), raw.records, raw.step_table, raw.series, None, 5)
    starts, finishes = flows(document)
    steps = slices(document, "step")
    assert sum(len(v) for v in steps.values()) == 5
    assert 0 < len(starts) == len(finishes) < 40
    for finish in finishes:
        assert len(enclosing(steps[finish["pid"], 0], finish["ts"])) == 1


def test_way_in_spans_carry_the_prompt_tokens_they_tokenized() -> None:
    result, trace = traced(varied_prompts(), num_traced=40)
    prompts = result.raw.requests.set_index("request_id")["num_prompt_tokens"]
    way_in = [e for e in trace["traceEvents"] if e.get("cat") == "phase" and e["name"] == "way_in"]
    assert len(way_in) == 40
    assert {e["tid"]: e["args"]["num_tokens"] for e in way_in} == {
        i: int(prompts[i]) for i in range(40)
    }
    assert len({e["args"]["num_tokens"] for e in way_in}) > 1  # the varied prompts


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload.num_requests=300", "workload.arrival.rate_per_s=20"],
        [
            "workload.num_requests=300",
            "workload.arrival.rate_per_s=20",
            "engine.async_scheduling=false",
        ],
    ],
    ids=["async", "sync"],
)
def test_arrows_hold_on_a_shipped_scenario(overrides: list[str]) -> None:
    # vLLM's defaults (async scheduling), kernel-table costs, lengths drawn at random.
    result = api.run(CHAT, overrides, trace_requests=60)
    trace = json.loads(json.dumps(result.trace(), allow_nan=False))
    check_format(trace)
    by_request = check_flows(trace, result.raw.requests)
    assert len(by_request) == 60 and all(1 <= len(n) <= 2 for n in by_request.values())
