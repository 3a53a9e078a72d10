"""A deployment's optimistic capacity, and SLOs no load can meet, from its cost model alone.

``servesim plan`` prunes with these before simulating (docs/capacity.md, "How it avoids
brute force", step 2). Both are priced by the configuration's own ``CostModel.step_s``
on the workload's lengths under every seed the searches run. A disaggregated ``P:D``
unit caps prefill on its ``P`` replicas and decode on its ``D``. A lone request's
statistic takes the prompt at the statistic's quantile (the smallest over the seeds);
for end-to-end latency the larger of the prefill and decode parts (a quantile of a sum
is not the sum of quantiles). Exact for costs convex in length (the roofline, kernel
tables: linear plus quadratic attention).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sim.cost.base import CostModel, StepShape
from sim.metrics.slo_targets import SloTarget
from sim.planning.served import SERVED_MIN_RATIO
from sim.scenario import Scenario
from sim.workload.generate import generate_open_loop

OPTIMISM = 1.1
"""Slack on the rate bound: a mean-value estimate prices mean lengths, not the mix."""
QUANTILES = {"median": 0.5, "p90": 0.9, "p99": 0.99}
"""The quantile each percentile statistic of an SLO target is (a mean has none)."""


@dataclass(frozen=True)
class LengthStats:
    """The workload's request lengths as the bounds read them, in tokens: means over
    every seed's requests; a statistic's (``*_at``: mean, median, p90, p99) the smallest
    over the seeds, so that a bound built on them holds for each seed's run."""

    mean_prompt_tokens: float
    mean_output_tokens: float
    min_prompt_tokens: float
    prompt_tokens_at: Mapping[str, float]
    output_tokens_at: Mapping[str, float]
    # Prompts of requests with two or more output tokens (those TPOT counts).
    tpot_prompt_tokens_at: Mapping[str, float]


def _at(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return dict.fromkeys(("mean", *QUANTILES), 0.0)
    out = {"mean": float(values.mean())}
    out |= {stat: float(np.quantile(values, q)) for stat, q in QUANTILES.items()}
    return out


def length_stats(scenario: Scenario, num_seeds: int) -> LengthStats:
    """Lengths of a synthetic scenario's requests under seeds ``seed .. seed + num_seeds - 1``."""
    prompts, outputs = [], []
    for seed in range(scenario.seed, scenario.seed + max(1, num_seeds)):
        rows = generate_open_loop(
            scenario.workload,  # type: ignore[arg-type]  # synthetic: checked by the caller
            np.random.default_rng(seed),
            scenario.base_dir,
        )
        prompts.append(rows.num_prompt_tokens.astype(float))
        outputs.append(rows.num_output_tokens.astype(float))

    def smallest(per_seed: list[dict[str, float]]) -> dict[str, float]:
        return {stat: min(d[stat] for d in per_seed) for stat in per_seed[0]}

    return LengthStats(
        float(np.concatenate(prompts).mean()),
        float(np.concatenate(outputs).mean()),
        float(min(p.min() for p in prompts)),
        smallest([_at(p) for p in prompts]),
        smallest([_at(o) for o in outputs]),
        smallest([_at(p[o >= 2]) for p, o in zip(prompts, outputs, strict=True)]),
    )


def prefill_s(cost: CostModel, num_tokens: float, chunk_tokens: int) -> float:
    """A lone prompt of ``num_tokens`` prefilled in chunks of ``chunk_tokens``."""
    left, done, total_s = max(1, round(num_tokens)), 0, 0.0
    while left > 0:
        chunk = min(left, chunk_tokens)
        total_s += cost.step_s(StepShape.build(prefill_chunks=[(chunk, done)]))
        done, left = done + chunk, left - chunk
    return total_s


def decode_s(cost: CostModel, num_seqs: int, context_tokens: float) -> float:
    """One decode step of ``num_seqs`` sequences at ``context_tokens`` each."""
    context = max(1, round(context_tokens))
    return cost.step_s(StepShape.build(decode_context_tokens=[context] * num_seqs))


@dataclass(frozen=True)
class Bound:
    """A configuration's optimistic capacity (req/s per unit), or why no load meets the SLOs."""

    rate_per_s: float
    infeasible: str = ""  # non-empty: a lone request already breaks this SLO


@dataclass(frozen=True)
class Limits:
    """What of a configuration the bounds read: its batch limits and its split."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    split: tuple[int, int] | None = None  # (prefill, decode) replicas; None: aggregated


def bound_holds(scenario: Scenario) -> bool:
    """Whether these bounds hold for ``scenario``'s replicas: a synthetic workload on
    continuous batching without pipeline parallelism. Shared prompt prefixes under a
    prefix cache and speculative decoding make tokens cheaper than the cost model's
    plain steps price them, so there the bounds would refuse loads that are met."""
    return not (
        scenario.workload.kind != "synthetic"
        or scenario.scheduler.kind != "continuous"
        or scenario.parallelism.pipeline_parallel_size > 1
        or (scenario.engine.enable_prefix_caching and scenario.workload.prefix_groups is not None)
        or scenario.speculative is not None
    )


def optimistic_rate_per_s(
    cost: CostModel,
    limits: Limits,
    kv_tokens: int,
    lengths: LengthStats,
    targets: Sequence[SloTarget],
) -> Bound:
    """An upper bound on the configuration's capacity (module docstring)."""
    for target in targets:
        lone_ms = lone_request_ms(cost, target, lengths, limits)
        if lone_ms > target.limit_ms:
            return Bound(
                0.0,
                f"a lone request's {target.metric} ({target.stat} lengths) is already "
                f"{lone_ms:.4g} ms > {target}",
            )
    prompt, output = max(lengths.mean_prompt_tokens, 1.0), max(lengths.mean_output_tokens, 1.0)
    max_num_batched_tokens = limits.max_num_batched_tokens
    batch = max(1, min(limits.max_num_seqs, int(kv_tokens // prompt)))
    prefill_per_token_s = (
        prefill_s(cost, max_num_batched_tokens, max_num_batched_tokens) / max_num_batched_tokens
    )
    decode_step_s = decode_s(cost, batch, prompt)
    cheapest_token_s = min(prefill_per_token_s, decode_step_s / batch)
    decode_rate = batch / (output * decode_step_s)  # requests/s a full batch finishes
    if limits.split is None:
        rate = min(1.0 / ((prompt + output) * cheapest_token_s), decode_rate)
    else:
        num_prefill, num_decode = limits.split
        prefill_rate = num_prefill / (prompt * prefill_per_token_s)
        per_decoder = min(decode_rate, 1.0 / (output * cheapest_token_s))
        rate = min(prefill_rate, num_decode * per_decoder)
    return Bound(rate * OPTIMISM / SERVED_MIN_RATIO)


def lone_request_ms(
    cost: CostModel, target: SloTarget, lengths: LengthStats, limits: Limits
) -> float:
    """The target's statistic over requests alone on the engine: a lower bound at any load."""
    prompt = lengths.prompt_tokens_at[target.stat]
    max_num_batched_tokens = limits.max_num_batched_tokens
    chunk = (
        max_num_batched_tokens
        if limits.chunked_prefill
        else max(max_num_batched_tokens, round(prompt))
    )
    if target.metric == "ttft":
        return 1e3 * prefill_s(cost, prompt, chunk)
    if target.metric == "tpot":
        return 1e3 * decode_s(cost, 1, lengths.tpot_prompt_tokens_at[target.stat])
    cheapest_decode_ms = 1e3 * decode_s(cost, 1, lengths.min_prompt_tokens)
    if target.metric == "itl":
        return cheapest_decode_ms
    # e2el: at least the prefill, and at least the decode steps (module docstring).
    output = lengths.output_tokens_at[target.stat]
    return max(1e3 * prefill_s(cost, prompt, chunk), cheapest_decode_ms * max(output - 1.0, 0.0))
