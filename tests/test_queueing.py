"""The simulator as a single-server queue, against queueing theory.

One server: continuous batching with ``max_num_seqs=1`` (or static batching
with ``max_batch_size=1, max_wait_s=0``) serves one request at a time, FCFS.
With a ``LinearCost`` whose prefill step takes ``o + a * prompt`` and each
decode step ``o + d``, a request's service time is exactly

    S = (o + a * prompt) + (output - 1) * (o + d)                       [s]

and the waiting time ``W = first_scheduled_s - ready_s`` (no tokenizer delay,
so ``ready_s = arrival_s``) must follow:

* Lindley's recursion ``W[n+1] = max(0, W[n] + S[n] - (T[n+1] - T[n]))`` exactly
  for any arrivals and lengths (checked to 1e-9 s, no statistics involved);
* Pollaczek–Khinchine for Poisson arrivals, ``E[W] = λ E[S²] / (2 (1 - ρ))``,
  ``ρ = λ E[S]``; for fixed lengths (M/D/1) ``E[W] = ρ S / (2 (1 - ρ))``.

Statistical checks: each of ``K`` seeds gives the mean waiting time of one run
(the first ``WARMUP`` requests dropped: the queue starts empty); the check is
``|mean over seeds - theory| <= 5 * SE`` with SE the standard error across the
``K`` independent seeds. With K = 10 the t-statistic has 9 degrees of freedom,
so a correct simulator fails with probability ~1e-3 for an arbitrary new random
stream; the seeds are fixed, so the outcome is in fact deterministic. Each
check also requires SE to be small (a few percent of the theory) so that the
tolerance stays meaningful: at ρ = 0.8 a service time 5 % too long moves E[W]
by ~38 %, far outside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig, Scheduler, StaticConfig
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, Simulation
from sim.workload.arrivals import PoissonArrival, arrival_times_s
from sim.workload.generate import RequestArrays
from sim.workload.lengths import ExponentialLength, UniformLength, make_length_sampler

FloatArray = npt.NDArray[np.float64]

NUM_SEEDS = 10
WARMUP = 500
Z = 5.0  # standard errors allowed

# Service-time model of the M/D/1 checks: prefill step o + a * P, decode step o + d.
OVERHEAD_S = 1e-3
PER_PREFILL_TOKEN_S = 1e-4
PER_DECODE_SEQ_S = 8e-3
COST = LinearCost(
    step_overhead_s=OVERHEAD_S,
    per_prefill_token_s=PER_PREFILL_TOKEN_S,
    per_decode_seq_s=PER_DECODE_SEQ_S,
)

POLICIES: dict[str, Callable[[], Scheduler]] = {
    "continuous": ContinuousConfig(max_num_seqs=1, max_num_batched_tokens=4096).build,
    "static": StaticConfig(max_batch_size=1, max_wait_s=0.0).build,
}


def service_s(prompt: npt.ArrayLike, output: npt.ArrayLike, cost: LinearCost = COST) -> FloatArray:
    """Exact service time of a request served alone (see the module docstring)."""
    prompt = np.asarray(prompt, dtype=np.float64)
    output = np.asarray(output, dtype=np.float64)
    prefill_s = cost.step_overhead_s + cost.per_prefill_token_s * prompt
    decode_s = cost.step_overhead_s + cost.per_decode_seq_s
    return np.asarray(prefill_s + (output - 1) * decode_s, dtype=np.float64)


def simulate(
    arrival_s: FloatArray,
    prompt: npt.NDArray[np.int64],
    output: npt.NDArray[np.int64],
    policy: str,
    cost: LinearCost = COST,
    skip_ahead: bool = True,
) -> pd.DataFrame:
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=POLICIES[policy],
            num_kv_blocks=100_000,
            block_size_tokens=16,
            max_model_len_tokens=100_000,
        ),
        cost=cost,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )
    work = RequestArrays(arrival_s, prompt, output)
    return Simulation(engine).run(cast(OpenLoop, work)).requests


def waiting_s(requests: pd.DataFrame) -> FloatArray:
    assert requests["rejection_reason"].isna().all()
    assert np.isfinite(requests["finish_s"]).all()
    return (requests["first_scheduled_s"] - requests["ready_s"]).to_numpy()


def lindley_waits_s(arrival_s: FloatArray, service: FloatArray) -> FloatArray:
    waits = np.zeros_like(arrival_s)
    for n in range(1, len(arrival_s)):
        waits[n] = max(0.0, waits[n - 1] + service[n - 1] - (arrival_s[n] - arrival_s[n - 1]))
    return waits


def poisson_arrivals(rate_per_s: float, rng: np.random.Generator, num: int) -> FloatArray:
    """A Poisson process (the renewal spacing): what M/M/1 and M/G/1 theory assumes."""
    config = PoissonArrival(rate_per_s=rate_per_s, spacing="renewal")
    return arrival_times_s(config, rng, num_requests=num)


def assert_close_to_theory(
    means: list[float], theory: float, max_rel_se: float, extra_rel: float = 0.0
) -> None:
    """|mean - theory| <= Z * SE + extra_rel * theory, and SE <= max_rel_se * theory."""
    values = np.asarray(means)
    mean = float(values.mean())
    se = float(values.std(ddof=1) / math.sqrt(len(values)))
    detail = f"mean {mean:.5g} vs theory {theory:.5g}, SE {se:.3g} ({len(values)} seeds)"
    assert se <= max_rel_se * theory, "too noisy to be a test: " + detail
    assert abs(mean - theory) <= Z * se + extra_rel * theory, detail


# -- exact: Lindley's recursion ----------------------------------------------------


@pytest.mark.parametrize("policy", ["continuous", "static"])
def test_waiting_times_follow_lindley_recursion_exactly(policy: str) -> None:
    """Any arrivals and lengths: the simulator is an exact FCFS single server."""
    rng = np.random.default_rng(12345)
    num = 1500
    prompt = make_length_sampler(UniformLength(min_tokens=1, max_tokens=1000)).sample(rng, num)
    output = make_length_sampler(ExponentialLength(mean_tokens=8)).sample(rng, num)
    service = service_s(prompt, output)
    arrival_s = poisson_arrivals(0.9 / float(service.mean()), rng, num)
    requests = simulate(arrival_s, prompt, output, policy)
    np.testing.assert_allclose(waiting_s(requests), lindley_waits_s(arrival_s, service), atol=1e-9)
    sojourn_s = (requests["finish_s"] - requests["arrival_s"]).to_numpy()
    np.testing.assert_allclose(sojourn_s, lindley_waits_s(arrival_s, service) + service, atol=1e-9)
    assert (requests["num_generated_tokens"] == output).all()


# -- M/D/1 -------------------------------------------------------------------------

MD1_PROMPT = 100
MD1_OUTPUT = 2  # one prefill step (emits token 1) and one decode step
MD1_SERVICE_S = float(service_s(MD1_PROMPT, MD1_OUTPUT))  # 0.011 + 0.009 = 0.02 s


@pytest.mark.parametrize(
    ("policy", "rho", "num"),
    # Static batching of one is the same server (see the Lindley test); once is enough.
    [("continuous", 0.5, 5000), ("continuous", 0.8, 8000), ("static", 0.8, 8000)],
)
def test_md1_mean_wait_matches_pollaczek_khinchine(policy: str, rho: float, num: int) -> None:
    assert pytest.approx(0.02) == MD1_SERVICE_S
    theory = rho * MD1_SERVICE_S / (2 * (1 - rho))
    means = []
    for seed in range(NUM_SEEDS):
        rng = np.random.default_rng([seed, int(rho * 10)])
        arrival_s = poisson_arrivals(rho / MD1_SERVICE_S, rng, num)
        prompt = np.full(num, MD1_PROMPT, dtype=np.int64)
        output = np.full(num, MD1_OUTPUT, dtype=np.int64)
        requests = simulate(arrival_s, prompt, output, policy)
        means.append(float(waiting_s(requests)[WARMUP:].mean()))
    assert_close_to_theory(means, theory, max_rel_se=0.03)


# -- M/G/1 with geometric output lengths (M/M/1-like) ----------------------------

# Prefill and decode steps both take c = o + a * P = o + d = 0.01 s, so S = c * output.
MG1_PROMPT = 10
MG1_COST = LinearCost(step_overhead_s=2e-3, per_prefill_token_s=8e-4, per_decode_seq_s=8e-3)
MG1_MEAN_TOKENS = 20.0
MG1_RHO = 0.7


def test_mg1_geometric_outputs_match_pollaczek_khinchine_and_mm1() -> None:
    """Outputs from the ``exponential`` sampler: S = c * output is (nearly) exponential.

    The sampler rounds exponential draws up, so output is geometric on 1, 2, ...
    with p = 1 - exp(-1 / mean_tokens): E[S²] / (2 E[S]²) = 1 - p / 2, not 1. So the
    M/M/1 formula ρ E[S] / (1 - ρ) overstates the P–K value by the factor
    1 / (1 - p/2), ≈ 2.5 % here; it is checked with that much extra tolerance.
    P–K itself uses the moments of all lengths actually drawn (≈ 80 000 of them, so
    their sampling error, ~1 % on E[S²], is small against the 5-SE band).
    """
    c = float(service_s(MG1_PROMPT, 1, MG1_COST))
    assert c == pytest.approx(float(service_s(MG1_PROMPT, 2, MG1_COST)) - c)
    num = 8000
    mean_service_s = c * (MG1_MEAN_TOKENS + 0.5)  # ≈ c / p: only sets the arrival rate
    rate_per_s = MG1_RHO / mean_service_s
    means, services = [], []
    for seed in range(NUM_SEEDS):
        rng = np.random.default_rng([seed, 77])
        arrival_s = poisson_arrivals(rate_per_s, rng, num)
        output = make_length_sampler(ExponentialLength(mean_tokens=MG1_MEAN_TOKENS)).sample(
            rng, num
        )
        prompt = np.full(num, MG1_PROMPT, dtype=np.int64)
        requests = simulate(arrival_s, prompt, output, "continuous", MG1_COST)
        means.append(float(waiting_s(requests)[WARMUP:].mean()))
        services.append(service_s(prompt, output, MG1_COST))
    service = np.concatenate(services)
    e_s, e_s2 = float(service.mean()), float((service**2).mean())
    rho = rate_per_s * e_s
    assert rho == pytest.approx(MG1_RHO, rel=0.02)
    pk = rate_per_s * e_s2 / (2 * (1 - rho))
    assert_close_to_theory(means, pk, max_rel_se=0.04)
    p = 1 - math.exp(-1 / MG1_MEAN_TOKENS)
    mm1 = rho * e_s / (1 - rho)
    assert_close_to_theory(means, mm1, max_rel_se=0.04, extra_rel=p / 2)
    # The drawn lengths have the geometric law's moments (sanity of the setup).
    outputs = service / c
    assert outputs.mean() == pytest.approx(1 / p, rel=0.02)
    assert (outputs**2).mean() == pytest.approx((2 - p) / p**2, rel=0.04)


# -- Little's law --------------------------------------------------------------------


def time_average(times_s: FloatArray, values: FloatArray, start_s: float, end_s: float) -> float:
    """Time average over [start_s, end_s] of a step function sampled at ``times_s``."""
    edges = np.append(np.clip(times_s, start_s, end_s), end_s)
    return float(np.dot(values, np.diff(edges)) / (end_s - start_s))


def test_littles_law_on_a_continuous_batching_run() -> None:
    """L (the engine's own queue counts, time-averaged) = λ × mean sojourn.

    Step by step (``skip_ahead=False``) the engine samples its queues at every step
    start. A request is missed by those samples only between its arrival and the
    next step start, at most one step: so with λ_obs = N / T,
    ``0 <= λ_obs W - L <= λ_obs * max step duration``, exactly. Against the configured
    rate λ, N / T has relative standard deviation ~1 / sqrt(N) = 1.8 %: 5 of them.
    """
    rng = np.random.default_rng(2024)
    num = 3000
    rate_per_s = 12.0
    cost = LinearCost(
        step_overhead_s=5e-3,
        per_prefill_token_s=2e-5,
        per_decode_seq_s=1e-3,
        per_context_token_s=1e-6,
    )
    arrival_s = poisson_arrivals(rate_per_s, rng, num)
    prompt = make_length_sampler(UniformLength(min_tokens=50, max_tokens=800)).sample(rng, num)
    output = make_length_sampler(ExponentialLength(mean_tokens=30)).sample(rng, num)
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=ContinuousConfig(max_num_seqs=8, max_num_batched_tokens=1024).build,
            num_kv_blocks=100_000,
            block_size_tokens=16,
            max_model_len_tokens=100_000,
        ),
        cost=cost,
        frontend=NO_FRONTEND,
        skip_ahead=False,
    )
    raw = Simulation(engine).run(cast(OpenLoop, RequestArrays(arrival_s, prompt, output)))
    requests, series, steps = raw.requests, raw.timeseries, raw.steps
    assert np.isfinite(requests["finish_s"]).all()
    start_s, end_s = float(arrival_s[0]), float(requests["finish_s"].max())
    sojourn_s = (requests["finish_s"] - requests["arrival_s"]).to_numpy()
    in_system = (series["num_waiting"] + series["num_running"]).to_numpy(dtype=np.float64)
    times_s = series["time_s"].to_numpy()
    mean_in_system = time_average(times_s, in_system, start_s, end_s)
    observed_rate = num / (end_s - start_s)
    little = observed_rate * sojourn_s.mean()
    max_step_s = float((steps["end_s"] - steps["start_s"]).max())
    assert mean_in_system > 2.0  # a loaded server: the check is not about an empty queue
    assert -1e-9 <= little - mean_in_system <= observed_rate * max_step_s + 1e-9
    assert mean_in_system == pytest.approx(rate_per_s * sojourn_s.mean(), rel=5 / math.sqrt(num))
