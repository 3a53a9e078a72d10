"""``/metrics``' further vLLM series, the role chunk's usage, and ``serve --simulate``'s lag.

Issue 42, item 4. vLLM's v1 ``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``)
observes, per finished engine request, its mean time per output token
(``decode_time / (num_generation_tokens - 1)``, 0 for one token) and its
``max_tokens``; per client request (its n choices finished) its ``n``; per engine
step the prompts whose prefill ended in it plus the tokens it generated; and it
sets ``vllm:cache_config_info`` to 1 with the cache configuration as labels.
The checks here compare each series with what the test itself sent and got
back, never with numbers read off a run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from sim.api import engine_for
from sim.openai.metrics import ServerMetrics, one_two_five_buckets
from sim.openai.server import make_app
from sim.scenario import load_scenario
from sim.serving.realtime import LAG_WARN_S, SimulatedEngine
from sim.serving.replica_config import ReplicaConfig
from sim.serving.routed import RoutedEngines
from sim.serving.router import make_router
from sim.serving.stream import Emitted, EngineLoad, Submission

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def config_of(*sets: str) -> ReplicaConfig:
    """Llama-3-70B on 4 H100s (roofline): steps of ~15 ms, a fast cost model."""
    return engine_for(load_scenario(SCENARIOS / "llama70b_tp.yaml", list(sets)))


class Clock:
    """A clock the test sets (seconds)."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def families(page: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(page)}


def sample(family: Any, suffix: str, **labels: str) -> float:
    """The value of ``family``'s sample ``<name><suffix>`` whose labels include ``labels``."""
    (value,) = [
        s.value
        for s in family.samples
        if s.name == family.name + suffix and labels.items() <= s.labels.items()
    ]
    return float(value)


def serve(engine: SimulatedEngine, bodies: list[tuple[str, dict[str, Any]]]) -> tuple[list, str]:
    """POST each (path, body) in turn to a server over ``engine``; the answers and then
    the ``/metrics`` page."""

    async def go() -> tuple[list, str]:
        async with TestClient(TestServer(make_app(engine, "m"))) as client:
            answers = []
            for path, body in bodies:
                response = await client.post(path, json=body)
                assert response.status == 200, await response.text()
                answers.append(await response.text())
            page = await (await client.get("/metrics")).text()
        return answers, page

    engine.start()
    try:
        return asyncio.run(go())
    finally:
        engine.stop()


# --- the histograms, against what was served -----------------------------------------------


def test_the_new_vllm_series_agree_with_what_was_served() -> None:
    config = config_of()
    # (prompt, max_tokens, n); a one-token answer has a TPOT of 0 (vLLM's rule).
    asked = [("hello there", 5, 1), ("abc", 5, 2), ("a longer prompt, some words", 1, 1)]
    bodies = [
        ("/v1/completions", {"prompt": prompt, "max_tokens": k, "n": n, "ignore_eos": True})
        for prompt, k, n in asked
    ]
    answers, page = serve(SimulatedEngine(config), bodies)
    usages = [json.loads(a)["usage"] for a in answers]
    got = families(page)

    kinds = {
        "vllm:request_time_per_output_token_seconds": "histogram",
        "vllm:iteration_tokens_total": "histogram",
        "vllm:request_params_n": "histogram",
        "vllm:request_params_max_tokens": "histogram",
        "vllm:cache_config_info": "gauge",
        "servesim:simulation_lag_seconds": "gauge",
    }
    assert {name: got[name].type for name in kinds if name in got} == kinds

    # max_tokens: one observation per choice (each is an engine request in vLLM).
    max_tokens = got["vllm:request_params_max_tokens"]
    assert sample(max_tokens, "_count") == sum(n for _, _, n in asked)
    assert sample(max_tokens, "_sum") == sum(k * n for _, k, n in asked)
    # The per-request token histograms' buckets: 1, 2, 5, ... up to max_model_len
    # (vLLM's build_1_2_5_buckets(max_model_len)): the largest within a factor of
    # 2.5 below it.
    max_model_len = config.core.max_model_len_tokens
    for name in ("params_max_tokens", "prompt_tokens", "generation_tokens"):
        family = got[f"vllm:request_{name}"]
        les = [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")]
        assert les[:3] == ["1.0", "2.0", "5.0"] and les[-1] == "+Inf"
        assert float(les[-2]) <= max_model_len < 2.5 * float(les[-2])

    # n: once per client request.
    n = got["vllm:request_params_n"]
    assert (sample(n, "_count"), sample(n, "_sum")) == (len(asked), sum(n for *_, n in asked))

    # Tokens per step, summed over the steps: each choice's prompt once (each is an
    # engine request; the answer's usage counts a prompt once for its n) and every
    # generated token.
    iteration = got["vllm:iteration_tokens_total"]
    computed = [u["prompt_tokens"] * n + u["completion_tokens"]
                for u, (_, _, n) in zip(usages, asked, strict=True)]  # fmt: skip
    assert sample(iteration, "_sum") == sum(computed)
    assert sample(iteration, "_count") >= max(k for _, k, _ in asked)  # a token a step at most

    # TPOT: every finished choice; those of 5 tokens spread their decode time over 4
    # gaps, the one-token answer contributes 0 and no decode time.
    tpot = got["vllm:request_time_per_output_token_seconds"]
    decode = got["vllm:request_decode_time_seconds"]
    assert sample(tpot, "_count") == sum(n for _, _, n in asked)
    assert sample(tpot, "_sum") * 4 == pytest.approx(sample(decode, "_sum"), rel=1e-9)
    assert sample(tpot, "_bucket", le="0.01") >= 1  # the one-token answer's 0

    # The cache configuration, vLLM's way: a gauge of 1, the config in its labels.
    core = config.core
    info = got["vllm:cache_config_info"]
    labels = {
        "block_size": str(core.block_size_tokens),
        "num_gpu_blocks": str(core.num_kv_blocks),
        "enable_prefix_caching": str(core.enable_prefix_caching),
    }
    assert sample(info, "", **labels) == 1.0
    assert sample(got["servesim:simulation_lag_seconds"], "") >= 0.0


def test_each_step_counts_its_finished_prompts_and_generated_tokens_once() -> None:
    # On a test clock: two requests of equal prompt lengths arrive together (so their
    # way in ends together), are prefilled in one step (their prompts fit the token
    # budget) and decode together, one token each a step.
    clock = Clock()
    engine = SimulatedEngine(config_of(), clock)
    events: list[Emitted] = []
    prompts, outputs = (9, 9), (3, 5)
    for i, (num_prompt, num_output) in enumerate(zip(prompts, outputs, strict=True)):
        engine.submit(Submission([3 + i] * num_prompt, num_output, True, events.append))
    assert engine.run_until(float("inf")) == float("inf")
    steps = [e.num_step_tokens for e in events if e.num_step_tokens is not None]
    # The first step: both prompts and both first tokens (hand count: 9 + 9 + 2).
    assert steps[0] == 9 + 1 + 9 + 1
    # Then one token per running request a step: 2, 2 while both run, 1, 1 after.
    assert steps[1:] == [2, 2, 1, 1]
    assert sum(steps) == sum(prompts) + sum(outputs)


# --- the role chunk --------------------------------------------------------------------------


def test_the_role_chunk_carries_usage_under_continuous_usage_stats() -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    (raw,), _ = serve(SimulatedEngine(config_of()), [("/v1/chat/completions", body)])
    chunks = [json.loads(p[6:]) for p in raw.split("\n\n") if p.startswith("data: {")]
    role, *rest = chunks
    assert role["choices"][0]["delta"]["role"] == "assistant"
    prompt = rest[-1]["usage"]["prompt_tokens"]  # the final usage chunk's
    # vLLM's first chunk: the prompt counted, nothing generated yet.
    assert role["usage"] == {"prompt_tokens": prompt, "completion_tokens": 0,
                             "total_tokens": prompt}  # fmt: skip
    assert all("usage" in c and c["usage"] is not None for c in chunks)


# --- falling behind real time ----------------------------------------------------------------


def lag_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "behind real time" in r.getMessage()]


def test_a_late_engine_warns_once_per_episode_and_reports_its_lag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    engine = SimulatedEngine(config_of(), clock)
    ends_s: list[float] = []

    def sink(event: Emitted) -> None:
        ends_s.append(engine.core.last_end_s)  # the step being committed

    with caplog.at_level(logging.WARNING, logger="servesim.serve"):
        # On time: the engine is run exactly at each thing's due time.
        engine.submit(Submission([65] * 20, 4, True, sink))
        due_s = engine.run_until(0.0)
        while due_s != float("inf"):
            due_s = engine.run_until(due_s)
        assert lag_warnings(caplog) == [] and engine.load().simulation_lag_s == 0.0

        # Episode 1: the host stalls a whole second; every step of the request is
        # committed late, and the log says so once.
        clock.now_s = ends_s[-1]
        engine.submit(Submission([66] * 20, 6, True, sink))
        late_s = clock.now_s + 1.0
        engine.run_until(late_s)
        assert len(lag_warnings(caplog)) == 1
        # The lag of the last step committed: the time it ran at minus its end.
        lag_s = engine.load().simulation_lag_s
        assert lag_s == pytest.approx(late_s - ends_s[-1])
        assert lag_s is not None and lag_s > LAG_WARN_S

        # Caught up (a request served on time), then episode 2: a second warning.
        clock.now_s = late_s
        engine.submit(Submission([67] * 20, 3, True, sink))
        due_s = engine.run_until(late_s)
        while due_s != float("inf"):
            due_s = engine.run_until(due_s)
        assert engine.load().simulation_lag_s == 0.0
        assert len(lag_warnings(caplog)) == 1
        clock.now_s = ends_s[-1]
        engine.submit(Submission([68] * 20, 3, True, sink))
        engine.run_until(clock.now_s + 1.0)
    first, _ = lag_warnings(caplog)  # two episodes, two lines
    assert "\n" not in first and "servesim:simulation_lag_seconds" in first


def test_the_lag_gauge_reads_the_engines_lag() -> None:
    metrics = ServerMetrics("m")
    page = metrics.render(EngineLoad(0, 0, 0.0, simulation_lag_s=0.25)).decode()
    assert sample(families(page)["servesim:simulation_lag_seconds"], "") == 0.25
    # An engine that does not say (the reference engine) has no such series.
    quiet = ServerMetrics("m").render(EngineLoad(0, 0, 0.0)).decode()
    assert "servesim:simulation_lag_seconds{" not in quiet
    assert "vllm:cache_config_info{" not in quiet


def test_one_two_five_buckets_are_vllms() -> None:
    # vLLM's build_1_2_5_buckets(100): [1, 2, 5, 10, 20, 50, 100] (its docstring's example).
    assert one_two_five_buckets(100) == (1, 2, 5, 10, 20, 50, 100)
    assert one_two_five_buckets(4096)[-1] == 2000


def test_routed_replicas_report_their_kv_configuration_and_the_largest_lag() -> None:
    clock = Clock()
    config = config_of("engine.enable_prefix_caching=true")
    engines = [SimulatedEngine(config, clock) for _ in range(2)]
    routed = RoutedEngines(engines, make_router("round_robin", np.random.default_rng(0)), 16)
    routed.submit(Submission([65] * 20, 3, True, lambda event: None))
    ready_s = min(engine.run_until(0.0) for engine in engines)  # the other: idle, inf
    late_s = ready_s + 2.0  # its replica's steps, all committed over a second late
    for engine in engines:
        engine.run_until(late_s)
    lags = [engine.load().simulation_lag_s for engine in engines]
    load = routed.load()
    assert load.simulation_lag_s == max(lag for lag in lags if lag is not None) > 1.0
    core = config.core
    assert (load.block_size_tokens, load.num_gpu_blocks, load.enable_prefix_caching) == (
        core.block_size_tokens, core.num_kv_blocks, True,
    )  # fmt: skip
