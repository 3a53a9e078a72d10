"""``GET /metrics``: the server's Prometheus metrics, under vLLM's names and labels.

The names, types, labels and buckets are vLLM's v1 ones (``vllm/v1/metrics/loggers.py``,
``PrometheusStatLogger``, vLLM 0.11-0.12), so that tools built for vLLM read them;
docs/validation.md (``servesim serve``) says what each measures. Latencies are
measured at the HTTP server; a request's engine phases, preemptions and prefix-cache
lookups come from the engine's clock (``RequestTiming``) when it finishes; the gauges
are read from the engine at each scrape. Each app has its own registry, so two
servers in one process (the tests) do not share counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sim.errors import InvariantError
from sim.serving.stream import EngineLoad, FinishReason, RequestTiming

CONTENT_TYPE = CONTENT_TYPE_LATEST
# vLLM's buckets (seconds) for the latency histograms.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                  1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
# vllm:iteration_tokens_total's buckets: vLLM's fixed list in loggers.py.
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)  # vllm:request_params_n's, vLLM's list
LABELS = ("model_name", "engine")


def one_two_five_buckets(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value``: vLLM's ``build_1_2_5_buckets``, the
    per-request token histograms' buckets (of ``max_model_len``)."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return tuple(buckets)
            buckets.append(mantissa * scale)
        scale *= 10


class ServerMetrics:
    """One server's counters, gauges and histograms (vLLM's v1 names)."""

    def __init__(
        self,
        model_name: str,
        max_model_len_tokens: int = 50_000,
        invariants: tuple[str, ...] = (),
    ) -> None:
        """``max_model_len_tokens`` sets the per-request token histograms' buckets;
        ``invariants``: those the engine checks, each a series from 0."""
        token_buckets = one_two_five_buckets(max_model_len_tokens)
        # No ``*_created`` series (a timestamp per counter), as vLLM's page has none; the
        # switch is prometheus_client's, for the whole process, as vLLM sets it.
        disable_created_metrics()
        self.registry = r = CollectorRegistry()
        self._labels = {"model_name": model_name, "engine": "0"}

        def gauge(name: str, text: str) -> Gauge:
            return Gauge(name, text, LABELS, registry=r)

        def counter(name: str, text: str, labels: tuple[str, ...] = LABELS) -> Counter:
            return Counter(name, text, labels, registry=r)

        def histogram(name: str, text: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, text, LABELS, buckets=buckets, registry=r)

        self._running = gauge(
            "vllm:num_requests_running", "Requests in the engine's running batch."
        )
        self._waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self._kv = gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1).")
        self._prompt = counter("vllm:prompt_tokens", "Prompt tokens computed.")
        self._generation = counter(
            "vllm:generation_tokens", "Generated tokens streamed to clients."
        )
        self._success = counter(
            "vllm:request_success",
            "Finished requests, by finish reason.",
            (*LABELS, "finished_reason"),
        )
        self._ttft = histogram(
            "vllm:time_to_first_token_seconds", "Time to first token (s).", TTFT_BUCKETS_S
        )
        self._itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Gaps between a request's token events (s).",
            ITL_BUCKETS_S,
        )
        self._e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Arrival to last token (s).", E2E_BUCKETS_S
        )
        self._prompt_hist = histogram(
            "vllm:request_prompt_tokens", "Prompt tokens per request.", token_buckets
        )
        self._generation_hist = histogram(
            "vllm:request_generation_tokens", "Generated tokens per request.", token_buckets
        )
        # The engine's phases of a finished request (vLLM's request-latency buckets).
        phases = (
            ("queue", "Time in the engine's waiting queue: handed to it to first scheduled"),
            ("prefill", "First scheduled to first token"),
            ("decode", "First token to last"),
            ("inference", "First scheduled to last token"),
        )
        self._phases = {
            phase: histogram(f"vllm:request_{phase}_time_seconds", f"{what} (s).", E2E_BUCKETS_S)
            for phase, what in phases
        }
        self._preemptions = counter("vllm:num_preemptions", "Preemptions of finished requests.")
        self._prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache."
        )
        self._prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache."
        )
        # vLLM's FinishedRequestStats.mean_time_per_output_token: decode time /
        # (generated - 1), 0 with fewer than 2 tokens; aborted requests too.
        self._tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Mean time per output token of a finished request (s).",
            ITL_BUCKETS_S,
        )
        self._iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Tokens per engine step.", ITERATION_TOKEN_BUCKETS
        )
        # vLLM observes n once per client request (when its last choice finishes) and
        # max_tokens once per finished choice (each of the n is an engine request).
        self._n = histogram("vllm:request_params_n", "The n request parameter.", N_BUCKETS)
        self._max_tokens = histogram(
            "vllm:request_params_max_tokens", "The max_tokens request parameter.", token_buckets
        )
        # vLLM's is a Gauge set to 1 with CacheConfig's fields as labels (str() of
        # each) and ``engine``, no ``model_name``; servesim knows three of them.
        self._cache_info = Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
            ("block_size", "num_gpu_blocks", "enable_prefix_caching", "engine"), registry=r,
        )  # fmt: skip
        self._lag = gauge(
            "servesim:simulation_lag_seconds",
            "How far the simulated engine's latest step was committed past its predicted "
            "end (s): a client or the host CPU is the bottleneck when it grows.",
        )
        self._violations = counter(
            "servesim:invariant_violations",
            "Run invariants the simulated engine broke (a simulator bug: the engine stops).",
            (*LABELS, "invariant"),
        )
        for name in invariants:
            self._violations.labels(**self._labels, invariant=name)
        self._counted_error: BaseException | None = None  # the engine error counted

    def first_token(self, ttft_s: float, num_prompt_tokens: int) -> None:
        """A request's first token: its prompt is computed (vLLM counts prompt tokens then)."""
        self._ttft.labels(**self._labels).observe(ttft_s)
        self._prompt.labels(**self._labels).inc(num_prompt_tokens)

    def next_token(self, gap_s: float) -> None:
        """A later token event of a request, ``gap_s`` after its previous one."""
        self._itl.labels(**self._labels).observe(gap_s)

    def generated(self, num_tokens: int) -> None:
        """Tokens streamed (counted as they come, as vLLM counts them per step)."""
        self._generation.labels(**self._labels).inc(num_tokens)

    def step(self, num_tokens: int) -> None:
        """An engine step's tokens (``Emitted.num_step_tokens``); any thread."""
        self._iteration_tokens.labels(**self._labels).observe(num_tokens)

    def finished(
        self,
        reason: FinishReason,
        e2e_s: float,
        num_prompt_tokens: int,
        num_generated: int,
        max_tokens: int | None = None,
        decode_s: float = 0.0,
    ) -> None:
        """One choice finished; ``max_tokens``: its limit (None: not observed);
        ``decode_s``: first token to last on the engine's clock (0 if unknown)."""
        labels = self._labels
        self._success.labels(**labels, finished_reason=reason).inc()
        self._e2e.labels(**labels).observe(e2e_s)
        self._prompt_hist.labels(**labels).observe(num_prompt_tokens)
        self._generation_hist.labels(**labels).observe(num_generated)
        tpot_s = decode_s / (num_generated - 1) if num_generated > 1 else 0.0
        self._tpot.labels(**labels).observe(tpot_s)
        if max_tokens is not None:
            self._max_tokens.labels(**labels).observe(max_tokens)

    def request_finished(self, n: int) -> None:
        """A client request's last choice finished; it asked for ``n`` per prompt."""
        self._n.labels(**self._labels).observe(n)

    def engine_timing(self, timing: RequestTiming) -> None:
        """A finished request's time in the engine, preemptions and prefix lookups."""
        labels = self._labels
        # In the order of self._phases: queue, prefill, decode, inference.
        phases_s = (timing.queue_s, timing.prefill_s, timing.decode_s, timing.inference_s)
        for histogram, phase_s in zip(self._phases.values(), phases_s, strict=True):
            histogram.labels(**labels).observe(phase_s)
        self._preemptions.labels(**labels).inc(timing.num_preemptions)
        self._prefix_queries.labels(**labels).inc(timing.num_prefix_query_tokens)
        self._prefix_hits.labels(**labels).inc(timing.num_prefix_hit_tokens)

    def render(self, load: EngineLoad, error: BaseException | None = None) -> bytes:
        """The text exposition format, the gauges read from ``load`` now; ``error``:
        what stopped the engine (``OnlineBackend.error``), counted once if it is a
        broken invariant."""
        if isinstance(error, InvariantError) and error is not self._counted_error:
            self._counted_error = error
            self._violations.labels(**self._labels, invariant=error.name).inc()
        self._running.labels(**self._labels).set(load.num_running)
        self._waiting.labels(**self._labels).set(load.num_waiting)
        self._kv.labels(**self._labels).set(load.kv_cache_usage)
        if load.block_size_tokens is not None:
            self._cache_info.labels(
                block_size=str(load.block_size_tokens),
                num_gpu_blocks=str(load.num_gpu_blocks),
                enable_prefix_caching=str(load.enable_prefix_caching),
                engine="0",
            ).set(1)
        if load.simulation_lag_s is not None:
            self._lag.labels(**self._labels).set(load.simulation_lag_s)
        return generate_latest(self.registry)
