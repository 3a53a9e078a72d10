"""``/metrics``' request histograms: what each phase measures, its buckets, and the token
histograms (issue 39's mutation check, ``benchmarks/mutants.py``: ``metrics-*``).

vLLM's v1 metrics (``vllm/v1/metrics/loggers.py``) observe a finished request's
queue, prefill, decode and inference times in the request-latency buckets
``request_latency_buckets`` (0.3 s to 7680 s, below), and its prompt and
generated token counts in ``vllm:request_prompt_tokens`` /
``vllm:request_generation_tokens``. The queue time starts when the engine core
gets the request (after the server's way in), not at the HTTP arrival.
"""

from __future__ import annotations

from prometheus_client import parser as prometheus_parser

from sim.engine.request import Request
from sim.openai.metrics import ServerMetrics
from sim.serving.stream import EngineLoad, RequestTiming, timing_of

# vLLM's request_latency_buckets, copied from its source (not from servesim).
VLLM_REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
PHASES = ("queue", "prefill", "decode", "inference")


def _samples(metrics: ServerMetrics) -> dict[tuple[str, str], float]:
    """(sample name, its ``le`` label or "") -> value, over one rendered page."""
    page = metrics.render(EngineLoad(num_running=0, num_waiting=0, kv_cache_usage=0.0))
    return {
        (s.name, s.labels.get("le", "")): s.value
        for family in prometheus_parser.text_string_to_metric_families(page.decode())
        for s in family.samples
    }


def test_the_queue_time_starts_when_the_engine_gets_the_request() -> None:
    request = Request(request_id=0, arrival_s=10.0, num_prompt_tokens=5, num_output_tokens=3)
    request.ready_s = 10.25  # the way in: 0.25 s of HTTP, tokenization and IPC
    request.first_scheduled_s, request.first_token_s, request.last_token_s = 11.0, 11.5, 13.0
    timing = timing_of(request)
    assert timing is not None
    assert timing.queue_s == 11.0 - 10.25
    assert (timing.prefill_s, timing.decode_s) == (0.5, 1.5)
    assert timing.inference_s == 0.5 + 1.5  # first scheduled to last token


def test_without_a_way_in_the_queue_time_starts_at_the_arrival() -> None:
    request = Request(request_id=0, arrival_s=10.0, num_prompt_tokens=5, num_output_tokens=3)
    request.first_scheduled_s, request.first_token_s, request.last_token_s = 11.0, 11.5, 13.0
    timing = timing_of(request)
    assert timing is not None and timing.queue_s == 1.0


def test_the_phase_histograms_take_vllms_request_latency_buckets() -> None:
    metrics = ServerMetrics("m")
    metrics.engine_timing(RequestTiming(0.4, 0.9, 3.0, 0, 0, 0))  # inference: 3.9 s
    got = _samples(metrics)
    expected_edges = {repr(float(e)) for e in VLLM_REQUEST_LATENCY_BUCKETS_S} | {"+Inf"}
    for phase in PHASES:
        name = f"vllm:request_{phase}_time_seconds_bucket"
        assert {le for n, le in got if n == name} == expected_edges, phase
    # Each observation in its own bucket: 0.4 s is above 0.3 and within 0.5.
    assert got[("vllm:request_queue_time_seconds_bucket", "0.3")] == 0
    assert got[("vllm:request_queue_time_seconds_bucket", "0.5")] == 1
    assert got[("vllm:request_inference_time_seconds_bucket", "2.5")] == 0
    assert got[("vllm:request_inference_time_seconds_bucket", "5.0")] == 1
    assert got[("vllm:request_inference_time_seconds_sum", "")] == 0.9 + 3.0


def test_the_token_histograms_observe_their_own_counts() -> None:
    metrics = ServerMetrics("m")
    metrics.finished("length", 2.0, num_prompt_tokens=7, num_generated=300)
    got = _samples(metrics)
    assert got[("vllm:request_prompt_tokens_sum", "")] == 7
    assert got[("vllm:request_generation_tokens_sum", "")] == 300
    assert got[("vllm:request_prompt_tokens_bucket", "10.0")] == 1  # 7 <= 10
    assert got[("vllm:request_generation_tokens_bucket", "200.0")] == 0  # 300 > 200
    assert got[("vllm:request_generation_tokens_bucket", "500.0")] == 1
