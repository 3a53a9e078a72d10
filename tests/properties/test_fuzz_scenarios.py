"""A fuzzer hunting for wrong answers: random scenarios, checked by the run's invariants
and by relations between runs (issue 39 item 26).

Hypothesis draws scenarios across the fields' valid and edge values (models, GPUs,
cost models, every policy, KV pools from tiny to default, block sizes, model
lengths, async scheduling, skip-ahead, prefix caching, arrival processes from
one request a day to all at once, lengths from one token, priorities, prefix
groups, concurrency caps, closed loops, replicas behind every router,
disaggregation, speculative decoding). A run either refuses its input with a
one-line ``ConfigError`` or finishes, and then every invariant of
``sim.metrics.invariants`` has held (``api.run`` checks them: a broken one raises
``InvariantError``). Relations between runs:

- the same seed gives the same bytes (summary and request table);
- a higher load (the same requests, sent closer together) never lowers p99 TTFT
  beyond noise;
- more replicas or a faster GPU never lower capacity beyond the search's resolution.

Budget: ``FUZZ_EXAMPLES`` examples per test (default 12: a few seconds each
under ``CI=true``, which derandomizes hypothesis); ``SERVESIM_FUZZ_EXAMPLES=500``
runs a longer hunt (docs/dev/testing.md). Every wrong answer found becomes a
named test below (``test_found_*``).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim import api
from sim.errors import ConfigError
from sim.planning.capacity import CapacitySearch
from sim.scenario import Scenario, scenario_from_dict
from sim.serving.replica_config import FrontendConfig

FUZZ_EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Relations run several simulations per example: fewer examples for the same budget.
FUZZ_RELATIONS = settings(FUZZ, max_examples=max(1, FUZZ_EXAMPLES // 3))

MODELS = ["llama-3-8b", "qwen2.5-7b", "smollm2-135m", "tiny", "qwen3-30b-a3b", "mixtral-8x7b"]
GPUS = ["h100", "h200", "a100-80gb", "l4", "b200", "rtx-4090"]
ROUTERS = [
    "round_robin",
    "least_outstanding_requests",
    "least_outstanding_tokens",
    "power_of_two",
    "prefix_affinity",
    "central_queue",
]
OTHER_POLICIES = [
    "dynamic",
    "orca",
    "prefill_first",
    "priority",
    "shortest_prompt_first",
    "least_attained_service",
]


# -- strategies ------------------------------------------------------------------


def _lengths(low: int, high: int) -> st.SearchStrategy[dict[str, Any]]:
    fixed = st.integers(low, high).map(lambda n: {"kind": "fixed", "tokens": n})
    uniform = st.tuples(st.integers(low, high), st.integers(low, high)).map(
        lambda ab: {"kind": "uniform", "min_tokens": min(ab), "max_tokens": max(ab)}
    )
    return st.one_of(fixed, uniform)


# From one request a day to all at once (rate .inf), Poisson, bursty gamma or constant.
RATES = st.one_of(
    st.sampled_from([1e-5, 0.01, 1.0, 1e4, math.inf]),
    st.floats(0.05, 200.0, allow_nan=False, allow_infinity=False),
)
ARRIVALS = st.one_of(
    RATES.map(lambda r: {"kind": "poisson", "rate_per_s": r}),
    RATES.map(lambda r: {"kind": "constant", "rate_per_s": r}),
    st.tuples(RATES, st.sampled_from([0.1, 0.5, 1.0, 4.0, math.inf])).map(
        lambda rb: {"kind": "gamma", "rate_per_s": rb[0], "burstiness": rb[1]}
    ),
    st.tuples(RATES, st.sampled_from(["vllm_bench", "renewal"])).map(
        lambda rs: {"kind": "poisson", "rate_per_s": rs[0], "spacing": rs[1]}
    ),
)


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    prompts, outputs = draw(_lengths(1, 2500)), draw(_lengths(1, 300))
    if draw(st.integers(0, 4)) == 0:
        return {
            "kind": "closed_loop",
            "num_users": draw(st.integers(1, 6)),
            "num_requests": draw(st.integers(1, 30)),
            "think_time_s": draw(
                st.one_of(
                    st.floats(0.0, 5.0).map(lambda s: {"kind": "fixed", "value_s": s}),
                    st.floats(0.001, 5.0).map(lambda s: {"kind": "exponential", "mean_s": s}),
                )
            ),
            "prompt_tokens": prompts,
            "output_tokens": outputs,
        }
    doc: dict[str, Any] = {
        "kind": "synthetic",
        "num_requests": draw(st.integers(1, 40)),
        "arrival": draw(ARRIVALS),
        "prompt_tokens": prompts,
        "output_tokens": outputs,
    }
    if draw(st.booleans()):
        doc["max_concurrency"] = draw(st.integers(1, 8))
    if draw(st.integers(0, 3)) == 0:
        doc["priority"] = {"kind": "classes", "weights": [0.3, 0.7]}
    if draw(st.integers(0, 3)) == 0:
        doc["prefix_groups"] = {
            "num_groups": draw(st.integers(1, 4)),
            "shared_prefix_tokens": draw(st.integers(1, 600)),
        }
    return doc


@st.composite
def schedulers(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["continuous", "continuous", "static", *OTHER_POLICIES]))
    if kind == "continuous":
        doc: dict[str, Any] = {"kind": kind, "chunked_prefill": draw(st.booleans())}
        if draw(st.booleans()):
            doc["max_num_seqs"] = draw(st.integers(1, 64))
        if draw(st.booleans()):
            doc["max_num_batched_tokens"] = draw(st.sampled_from([1, 16, 64, 512, 2048, 8192]))
        if draw(st.integers(0, 3)) == 0:
            doc["preemption"] = "swap"
        return doc
    if kind == "static":
        return {
            "kind": kind,
            "max_batch_size": draw(st.integers(1, 16)),
            "max_wait_s": draw(st.sampled_from([0.0, 0.01, 1.0])),
        }
    return {"kind": kind}


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    engine: dict[str, Any] = {
        "block_size_tokens": draw(st.sampled_from([1, 8, 16, 32])),
        "skip_ahead": draw(st.booleans()),
        "enable_prefix_caching": draw(st.booleans()),
        "async_scheduling": draw(st.sampled_from([None, True, False])),
        "max_model_len_tokens": draw(st.sampled_from([2, 64, 1024, 4096, 8192])),
    }
    if draw(st.booleans()):  # a pool from one block (most requests rejected) up
        engine["num_kv_blocks"] = draw(st.sampled_from([1, 3, 20, 100, 1000]))
    cost = draw(
        st.one_of(
            st.just({"kind": "roofline"}),
            st.tuples(st.floats(0.0, 1e-3), st.floats(0.0, 0.05), st.sampled_from([0, 1e-3])).map(
                lambda abc: {
                    "kind": "linear",
                    "per_prefill_token_s": abc[0],
                    "per_decode_seq_s": abc[1],
                    "step_overhead_s": abc[2],
                }
            ),
        )
    )
    doc: dict[str, Any] = {
        "name": "fuzz",
        "seed": draw(st.integers(0, 2**16)),
        "model": draw(st.sampled_from(MODELS)),
        "hardware": draw(st.sampled_from(GPUS)),
        "cost": cost,
        "scheduler": draw(schedulers()),
        "engine": engine,
        "workload": draw(workloads()),
        "slo": {"ttft_ms": 500, "tpot_ms": 50},
    }
    layout = draw(st.integers(0, 5))
    if layout == 1:
        doc["cluster"] = {
            "num_replicas": draw(st.integers(2, 4)),
            "router": draw(st.sampled_from(ROUTERS)),
        }
    elif layout == 2:
        doc["cluster"] = {
            "disaggregation": {
                "num_prefill_replicas": draw(st.integers(1, 2)),
                "num_decode_replicas": draw(st.integers(1, 2)),
            }
        }
    elif layout == 3:  # on continuous batching (speculation refuses every other policy)
        doc["scheduler"] = (
            {**doc["scheduler"], "kind": "continuous"}
            if doc["scheduler"]["kind"] == "continuous"
            else {"kind": "continuous"}
        )
        doc["speculative"] = {
            "num_draft_tokens": draw(st.integers(1, 6)),
            "acceptance_rate": draw(st.sampled_from([0.0, 0.5, 0.99])),
            "draft_cost_fraction": 0.1,
        }
    return doc


# -- running ---------------------------------------------------------------------


def _scenario(doc: dict[str, Any]) -> Scenario | None:
    """The scenario, or None where it is refused in one line (a valid answer)."""
    try:
        return scenario_from_dict(doc, "<fuzz>")
    except ConfigError as error:
        assert "\n" not in str(error), str(error)
        event("scenario refused")
        return None


def _run(scenario: Scenario, overrides: dict[str, Any] | None = None) -> api.Result | None:
    """``api.run`` (its invariants checked inside), or None where the input is refused
    in one line. Any other exception, ``InvariantError`` included, fails the example."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # caveats (a guessed cost, a thin percentile)
            result = api.run(scenario, overrides or {}, workers=1)
    except ConfigError as error:
        assert "\n" not in str(error), str(error)
        event("run refused")
        return None
    event("ran")
    return result


def _bytes(result: api.Result) -> tuple[str, list[bytes]]:
    """What a run says, as bytes: its summary (as summary.json holds it) and every
    column of its request table."""
    summary = json.dumps(result.summary, sort_keys=True, default=str)
    requests = result.raw.records
    columns = []
    for name in sorted(requests.columns):
        values = np.asarray(requests[name])
        # An object column (the rejection reasons) holds pointers: compare its values.
        columns.append(
            repr(values.tolist()).encode() if values.dtype == object else values.tobytes()
        )
    return summary, columns


# -- invariants, on every run ----------------------------------------------------


@FUZZ
@given(doc=scenarios())
def test_every_scenario_runs_within_its_invariants_or_is_refused(doc: dict[str, Any]) -> None:
    scenario = _scenario(doc)
    if scenario is not None:
        _run(scenario)


# -- relations between runs --------------------------------------------------------


@FUZZ_RELATIONS
@given(doc=scenarios())
def test_the_same_seed_gives_the_same_bytes(doc: dict[str, Any]) -> None:
    scenario = _scenario(doc)
    if scenario is None:
        return
    first = _run(scenario)
    if first is None:
        return
    second = _run(scenario)
    assert second is not None and _bytes(first) == _bytes(second)


# A higher load may reorder a batch by a step: p99 TTFT may fall by a step's worth
# (the request that set it now shares a step differently). Beyond that is a wrong answer.
LOAD_NOISE = 0.10  # relative
LOAD_NOISE_MS = 5.0  # absolute: a few decode steps of a small model


@FUZZ_RELATIONS
@given(
    doc=scenarios(),
    arrival=st.tuples(
        st.sampled_from(["poisson", "constant", "gamma"]),
        st.floats(0.05, 200.0, allow_nan=False, allow_infinity=False),
    ),
    factor=st.sampled_from([1.5, 2.0, 4.0]),
)
def test_a_higher_load_never_lowers_p99_ttft_beyond_noise(
    doc: dict[str, Any], arrival: tuple[str, float], factor: float
) -> None:
    _check_higher_load(doc, arrival, factor)


def test_found_four_tiny_requests_get_a_lower_p99_ttft_at_a_higher_rate() -> None:
    """Found by the fuzzer (issue 39), explained: the frontend binds, and fuller steps
    lower its work.

    Decodes priced ~0 s run 68 steps per request in no time, while the frontend
    (sim.serving.frontend) spends output_step_s = 0.2 ms per step and 0.02 ms per
    token. The first request streams alone (68 steps, 14.96 ms). At 128 req/s the
    other three never share a step (204 steps); at 192 req/s they overlap and share
    (138 steps), so the frontend's backlog of their 204 tokens is 204 x 0.22 =
    44.88 ms against 138 x 0.2 + 204 x 0.02 = 31.68 ms, and their p99 TTFT falls. A
    real server does this too: batching amortises per-step CPU work. The relation
    test above therefore checks the engine with that per-step cost set to 0.
    """
    doc = {
        "name": "fuzz",
        "seed": 0,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {
            "kind": "linear",
            "per_prefill_token_s": 0.0008549852431700076,
            "per_decode_seq_s": 3.3332993256150227e-112,
            "step_overhead_s": 0,
        },
        "scheduler": {"kind": "continuous", "chunked_prefill": False, "preemption": "swap"},
        "engine": {
            "block_size_tokens": 1,
            "skip_ahead": False,
            "enable_prefix_caching": False,
            "async_scheduling": None,
            "max_model_len_tokens": 1024,
        },
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 1e-05},
            "prompt_tokens": {"kind": "fixed", "tokens": 1},
            "output_tokens": {"kind": "fixed", "tokens": 68},
            "priority": {"kind": "classes", "weights": [0.3, 0.7]},
        },
        "slo": {"ttft_ms": 500, "tpot_ms": 50},
    }
    frontend = FrontendConfig()  # the defaults the scenario leaves in place
    results = []
    for rate_per_s in (128.0, 192.0):
        arrival = {"kind": "poisson", "rate_per_s": rate_per_s}
        scenario = scenario_from_dict({**doc, "workload": {**doc["workload"], "arrival": arrival}})
        result = api.run(scenario, workers=1)
        requests = result.requests
        # The first request runs its 68 steps alone, before the second reaches
        # the engine (after the frontend's way in).
        assert requests["engine_finish_s"].iloc[0] < requests["ready_s"].iloc[1]
        # The later three's tokens all wait on the frontend behind the first's
        # (Lindley's recursion with every step already arrived): their steps'
        # per-step cost plus their 204 tokens' per-token cost.
        num_later_steps = len(result.steps) - 68
        backlog_s = requests["finish_s"].max() - requests["finish_s"].iloc[0]
        expected_s = (
            num_later_steps * frontend.output_step_s + 3 * 68 * frontend.detokenize_s_per_token
        )
        assert backlog_s == pytest.approx(expected_s, rel=1e-9)
        results.append((num_later_steps, result.summary["p99_ttft_ms"]))
    (steps_low, p99_low), (steps_high, p99_high) = results
    assert steps_high < steps_low <= 3 * 68  # they share steps at the higher rate
    assert p99_high < p99_low
    # Without the per-step cost, the higher rate no longer lowers p99 TTFT.
    p99_ms = []
    for rate_per_s in (128.0, 192.0):
        arrival = {"kind": "poisson", "rate_per_s": rate_per_s}
        unbound = {**doc, "workload": {**doc["workload"], "arrival": arrival}}
        unbound["frontend"] = {"output_step_s": 0.0}
        p99_ms.append(api.run(scenario_from_dict(unbound), workers=1).summary["p99_ttft_ms"])
    assert p99_ms[1] >= p99_ms[0]


def _check_higher_load(doc: dict[str, Any], arrival: tuple[str, float], factor: float) -> None:
    # vllm bench's spacing puts arrival k at S_k (N / rate) / S_N: the same seed and a
    # higher rate send the same requests, each gap shrunk by the same factor.
    kind, rate = arrival
    workload = doc["workload"]
    if workload["kind"] != "synthetic":  # an open loop of the same lengths instead
        workload = {k: workload[k] for k in ("prompt_tokens", "output_tokens", "num_requests")}
        workload["kind"] = "synthetic"
    doc = {**doc, "workload": {**workload, "arrival": {"kind": kind, "rate_per_s": rate}}}
    # A frontend whose per-step cost exceeds the engine's steps binds, and fuller
    # steps at a higher rate lower its work (the found case below shows it):
    # the relation is the engine's, checked with that cost removed.
    doc["frontend"] = {**doc.get("frontend", {}), "output_step_s": 0.0}
    scenario = _scenario(doc)
    if scenario is None:
        return
    low = _run(scenario)
    high = _run(scenario, {"workload.arrival.rate_per_s": rate * factor})
    if low is None or high is None:
        return
    p99_low, p99_high = low.summary["p99_ttft_ms"], high.summary["p99_ttft_ms"]
    if p99_low is None or p99_high is None or high.summary["completed"] < low.summary["completed"]:
        return  # fewer completed (more rejected or unfinished): another population
    assert p99_high >= p99_low * (1 - LOAD_NOISE) - LOAD_NOISE_MS, (p99_low, p99_high)


def _capacity(doc: dict[str, Any]) -> CapacitySearch | None:
    """The capacity search for a mean-TTFT target, or None where the search is refused
    in one line."""
    from sim.metrics.slo_targets import parse_target
    from sim.planning.capacity import Searcher, search

    scenario = _scenario(doc)
    if scenario is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            searcher = Searcher(scenario, [parse_target("ttft_mean_ms", 300)], num_seeds=1)
            return search(searcher, rel_width=0.2, max_num_sims=14)
    except ConfigError as error:
        assert "\n" not in str(error), str(error)
        return None


CAPACITY_BASE: dict[str, Any] = {
    "name": "fuzz-capacity",
    "cost": {"kind": "roofline"},
    "scheduler": {"kind": "continuous"},
    "workload": {
        "kind": "synthetic",
        "num_requests": 60,
        "arrival": {"kind": "poisson", "rate_per_s": 4.0},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 100, "max_tokens": 2000},
        "output_tokens": {"kind": "uniform", "min_tokens": 10, "max_tokens": 200},
    },
}


def _ordered(low: CapacitySearch | None, high: CapacitySearch | None) -> bool:
    """Whether the second search's capacity is not below the first's: its ~95%
    interval's top reaches the first's bottom (None: unbounded above, or not found
    below). An answer that carries a caveat (``CapacitySearch.caveats``: it may be
    off, and says why) is judged by its caveat, not here."""
    if low is None or high is None or low.caveats or high.caveats:
        event("capacity caveated" if low and high else "capacity refused")
        return True
    event("capacity compared")
    low_bottom, high_top = low.interval[0], high.interval[1]
    return low_bottom is None or high_top is None or high_top >= low_bottom


@settings(FUZZ_RELATIONS, max_examples=max(1, FUZZ_EXAMPLES // 6))
@given(
    model=st.sampled_from(["llama-3-8b", "qwen2.5-7b"]),
    num_replicas=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_more_replicas_never_lower_capacity(model: str, num_replicas: int, seed: int) -> None:
    fewer = {**CAPACITY_BASE, "model": model, "seed": seed}
    more = {**fewer, "cluster": {"num_replicas": num_replicas + 1}}
    if num_replicas > 1:
        fewer["cluster"] = {"num_replicas": num_replicas}
    low, high = _capacity(fewer), _capacity(more)
    assert _ordered(low, high), (low, high)


@settings(FUZZ_RELATIONS, max_examples=max(1, FUZZ_EXAMPLES // 6))
@given(
    pair=st.sampled_from(
        [("l4", "h100"), ("a100-80gb", "h100"), ("h100", "h200"), ("h100", "b200")]
    ),
    seed=st.integers(0, 1000),
)
def test_a_faster_gpu_never_lowers_capacity(pair: tuple[str, str], seed: int) -> None:
    # On the roofline a step costs max(FLOPs / peak, bytes / bandwidth): each pair's
    # second GPU has at least the first's FLOP/s and bandwidth, so no step is slower.
    slow, fast = pair
    low = _capacity({**CAPACITY_BASE, "hardware": slow, "seed": seed})
    high = _capacity({**CAPACITY_BASE, "hardware": fast, "seed": seed})
    assert _ordered(low, high), (pair, low, high)


# -- what the fuzzer found ---------------------------------------------------------
# Each wrong answer it found, as a named test; xfail(strict=True) where the fix
# belongs to another area (it fails until fixed, and then says so).


def _interval(result: CapacitySearch | None) -> tuple[float | None, float | None]:
    assert result is not None
    return result.interval


@pytest.mark.xfail(
    strict=True,
    reason="capacity (issue 39, found by the fuzzer): with runs of 60 requests the served "
    "check binds at 11 req/s for 3 replicas but 20 req/s for 2 (interval 10.0-11.0 below "
    "18.0-20.0); the answer carries a caveat that the served check may be noise (seed 614: "
    "623's, found first, no longer shows it since the roofline's LM head runs once a sequence)",
)
def test_found_three_replicas_get_less_capacity_than_two_on_short_runs(tmp_path: Path) -> None:
    base = {**CAPACITY_BASE, "model": "llama-3-8b", "seed": 614}
    two = _interval(_capacity({**base, "cluster": {"num_replicas": 2}}, tmp_path))
    three = _interval(_capacity({**base, "cluster": {"num_replicas": 3}}, tmp_path))
    assert two[0] is not None and three[1] is not None and three[1] >= two[0], (two, three)


@pytest.mark.xfail(
    strict=True,
    reason="capacity (issue 39, found by the fuzzer): with runs of 60 requests an H100 "
    "is given 2.5-2.7 req/s and an A100-80GB 6.3-7.0 (roofline, llama-3-8b, seed 260) though "
    "its mean TTFT is a third of the A100's: the served check binds, reading 28 finishes for "
    "30 arrivals (0.933 < 0.95) at 2.75 req/s; a window of 30 arrivals resolves the ratio to "
    "1/30, coarser than the check's 0.05 margin (the answer carries that caveat)",
)
def test_found_an_h100_gets_less_capacity_than_an_a100_on_short_runs(tmp_path: Path) -> None:
    a100 = _interval(_capacity({**CAPACITY_BASE, "hardware": "a100-80gb", "seed": 260}, tmp_path))
    h100 = _interval(_capacity({**CAPACITY_BASE, "hardware": "h100", "seed": 260}, tmp_path))
    assert a100[0] is not None and h100[1] is not None and h100[1] >= a100[0], (a100, h100)
