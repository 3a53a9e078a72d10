"""Session 13's audit of the serving faces: what ``servesim serve`` and ``servesim lab``
dropped silently.

- vLLM's own request fields that change what is generated (``stop_token_ids``,
  ``truncate_prompt_tokens``, ``use_beam_search``, the chat API's ``echo``, guided
  decoding, ``cache_salt`` ...) were taken as unknown fields: a warning in the
  server's log, a 200 answer that ignored them. vLLM honours them; servesim cannot,
  so they are refused with a 400 naming the field, as ``min_tokens`` is.
- The lab's page sends every control's value on each move. Started from a scenario
  whose lengths are not lognormal, or a disaggregated cluster, writing back what the
  page showed broke the scenario (every run answered "median_tokens: Field
  required", or "num_replicas (1) must equal ... (4)").
- ``--save-result``'s ``max_concurrent_requests`` was the peak at one instant, not
  vLLM's (the most requests in one whole second).
- ``Result.spans(-1)`` / ``Result.trace(-2)`` drew all requests but the last few;
  ``Result.trace(0)`` drew 100.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from scripted_backend import ScriptedBackend
from test_http_routes import events, post
from test_vllm_bench_face import run_cli, small

from sim import api
from sim.lab.controls import RATE_KEY, doc_for, scenario_for, values_of
from sim.scenario import read_yaml

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
PROMPT = {"prompt": "hi", "max_tokens": 3}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        # The byte tokenizer's "d" is id 103: vLLM would stop at it.
        ("/v1/completions", {**PROMPT, "stop_token_ids": [103]}, "stop_token_ids"),
        ("/v1/completions", {**PROMPT, "truncate_prompt_tokens": 1}, "truncate_prompt_tokens"),
        ("/v1/completions", {**PROMPT, "use_beam_search": True}, "use_beam_search"),
        ("/v1/completions", {**PROMPT, "allowed_token_ids": [100]}, "allowed_token_ids"),
        ("/v1/completions", {**PROMPT, "guided_choice": ["a", "b"]}, "guided_choice"),
        ("/v1/completions", {**PROMPT, "cache_salt": "user-7"}, "cache_salt"),
        (
            "/v1/completions",
            {**PROMPT, "response_format": {"type": "json_object"}},
            "response_format",
        ),
        ("/v1/chat/completions", {**CHAT, "echo": True}, "echo"),
        ("/v1/chat/completions", {**CHAT, "guided_json": {"type": "object"}}, "guided_json"),
        ("/v1/chat/completions", {**CHAT, "stop_token_ids": [103]}, "stop_token_ids"),
    ],
)
def test_a_field_vllm_honours_and_servesim_cannot_is_refused(
    path: str, body: dict[str, Any], field: str
) -> None:
    engine = ScriptedBackend(max_model_len_tokens=64)
    status, raw = post(engine, path, body)
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == field, raw
    assert error["message"] == f"{field}: not supported by servesim serve"
    assert engine.submitted == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", {**PROMPT, "stop_token_ids": [], "use_beam_search": False}),
        ("/v1/completions", {**PROMPT, "response_format": {"type": "text"}}),
        ("/v1/chat/completions", {**CHAT, "echo": False, "truncate_prompt_tokens": None}),
    ],
)
def test_those_fields_at_values_that_ask_for_nothing_are_accepted(
    path: str, body: dict[str, Any]
) -> None:
    status, raw = post(ScriptedBackend(max_model_len_tokens=64), path, body)
    assert status == 200, raw


@pytest.mark.parametrize("name", ["summarization.yaml", "disaggregated.yaml"])
def test_the_lab_s_values_written_back_leave_its_scenario_as_it_was(name: str) -> None:
    # summarization's lengths are not lognormal (the page shows no median); the
    # disaggregated cluster has no num_replicas (the page shows 1).
    base = read_yaml(SCENARIOS / name, "scenario")
    shown = values_of(base)
    assert scenario_for(doc_for(shown, base), SCENARIOS) == scenario_for(base, SCENARIOS)
    # A move of the rate alone changes the rate alone.
    moved = scenario_for(doc_for({**shown, RATE_KEY: 0.5}, base), SCENARIOS)
    assert moved.workload.arrival.rate_per_s == 0.5  # type: ignore[union-attr]
    expected = read_yaml(SCENARIOS / name, "scenario")
    expected["workload"]["arrival"]["rate_per_s"] = 0.5
    assert moved == scenario_for(expected, SCENARIOS)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**PROMPT, "top_k": -2}, "top_k: Input should be greater than or equal to -1"),
        ({**PROMPT, "min_p": 1.5}, "min_p: Input should be less than or equal to 1"),
        ({**PROMPT, "min_p": -0.1}, "min_p: Input should be greater than or equal to 0"),
    ],
)
def test_a_sampling_value_vllm_refuses_is_refused_though_sampling_is_greedy(
    body: dict[str, Any], message: str
) -> None:
    # vLLM's SamplingParams refuses them (top_k below -1, min_p outside [0, 1]);
    # servesim ignores sampling, but a client relying on the 400 gets it here too.
    engine = ScriptedBackend(max_model_len_tokens=64)
    status, raw = post(engine, "/v1/completions", body)
    error = json.loads(raw)["error"]
    assert status == 400 and error["message"].startswith(message), raw
    assert engine.submitted == []


def test_the_result_json_s_peaks_are_vllm_s_per_second_buckets(tmp_path: Path) -> None:
    # vllm bench serve's calculate_metrics, written out from its definition: buckets of
    # one second from the first send; a request's chunks (its first token, then one per
    # ITL) in theirs, the request itself in every second from its start's to its end's.
    # servesim wrote the peak at one instant instead (here about a third of vLLM's).
    detailed = tmp_path / "detailed.json"
    run_cli(tmp_path, small(tmp_path), "--save-detailed", str(detailed))
    doc = json.loads(detailed.read_text())
    start = doc["start_times"]
    first = min(start)
    end = [s + latency for s, latency in zip(start, doc["latencies"], strict=True)]
    num_seconds = math.ceil(max(end) - first) + 1
    tokens, requests = [0] * num_seconds, [0] * num_seconds
    for s, ttft, itls, e in zip(start, doc["ttfts"], doc["itls"], end, strict=True):
        times = [s + ttft]
        for gap in itls:
            times.append(times[-1] + gap)
        for t in times:
            tokens[int(t - first)] += 1
        for second in range(int(s - first), int(e - first) + 1):
            requests[second] += 1
    assert doc["max_output_tokens_per_s"] == max(tokens)
    assert doc["max_concurrent_requests"] == max(requests)


def test_a_negative_count_of_requests_to_draw_is_refused_and_zero_is_zero(
    tmp_path: Path,
) -> None:
    # Result.spans(-1) took all requests but the last few (a slice's negative end),
    # Result.trace(0) the default 100 requests (0 read as "not given").
    result = api.run(small(tmp_path))
    with pytest.raises(ValueError, match="num_requests must be >= 0, got -1"):
        result.spans(-1)
    with pytest.raises(ValueError, match="num_requests must be >= 0, got -2"):
        result.trace(-2)
    assert len(result.spans(0)) == 0
    assert result.trace(0)["otherData"]["num_traced_requests"] == 0


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_continuous_usage_stats_without_include_usage_adds_no_usage(path: str) -> None:
    # vLLM: include_continuous_usage = include_usage and continuous_usage_stats; servesim
    # put usage on every chunk with continuous_usage_stats alone.
    body = {**(CHAT if "chat" in path else PROMPT), "stream": True}
    body["stream_options"] = {"continuous_usage_stats": True}
    status, raw = post(ScriptedBackend(max_model_len_tokens=64), path, body)
    chunks = [c for c in events(raw) if c != "[DONE]"]
    assert status == 200 and chunks
    assert all(chunk["usage"] is None for chunk in chunks)
    # With include_usage too, every chunk has it.
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    status, raw = post(ScriptedBackend(max_model_len_tokens=64), path, body)
    assert all(c["usage"] is not None for c in events(raw) if c != "[DONE]")
