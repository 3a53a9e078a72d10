"""Speculative decoding: a proposer drafts k tokens, the target verifies them at once.

Per decode step the proposer (``SpeculativeConfig.method``, as vLLM's) drafts
``k`` tokens and the target checks the ``k + 1`` positions in one forward pass,
priced by ``sim.cost.speculative`` (a model proposer runs after every step, so the
drafts a request's first decode step verifies were proposed, and priced, after the
step that finished its prompt). Each draft is accepted independently with
probability ``α`` (Leviathan et al., 2023); a step keeps the drafts up to the
first rejected one plus one token of the target's own, on average::

    E(k, α) = 1 + α + α² + … + α^k = (1 − α^(k+1)) / (1 − α)   (= k + 1 when α = 1)

Which tokens a step emits is deterministic: request ``r`` has a phase ``φ_r``
(golden-ratio sequence) and emits ``floor(φ_r + (s + 1) E) − floor(φ_r + s E)``
tokens at its ``s``-th speculative step, capped by what it has left: ``n E``
over ``n`` steps to within one, without a random stream.

n-gram misses: with ``match_probability`` ``q < 1`` a decoding sequence's step
finds a match with probability ``q`` (drawn from the policy's generator); a
miss emits one token as a one-token chunk (``SchedulerOutput.undrafted``) and
does not advance the schedule, so a step emits ``1 − q + q E`` on average.

A step's tokens are all emitted at its end, so ITL (one gap per step, as
``vllm bench serve`` counts chunks) exceeds TPOT. Simplifications: one step per
event (no skip-ahead); drafts do not count against ``max_num_batched_tokens``;
the KV cache holds accepted tokens only; an EAGLE head's and a
``draft_cost_fraction``'s memory are not taken from the KV pool (a
``draft_model``'s is, ``sim.hardware.kv_capacity``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import Field, model_validator

from sim.config import Frozen
from sim.cost.base import CostModel
from sim.cost.speculative import ProposerKind, SpeculativeCost, speculative_step_cost
from sim.engine.records import RequestTable
from sim.engine.scheduler import CoreView, Scheduler, SchedulerOutput
from sim.engine.step_runs import StepTable
from sim.hardware.specs import HardwareSpec, ModelRef, ModelSpec

GOLDEN_FRACTION = (math.sqrt(5.0) - 1.0) / 2.0  # spreads phases evenly over [0, 1)


class SpeculativeConfig(Frozen):
    """``speculative:`` in a scenario: k draft tokens per step accepted at rate α.

    ``method``: vLLM's ``draft_model`` (give ``draft_model``), ``eagle``,
    ``eagle3`` or ``ngram``, each priced from its parts. Without it, give exactly
    one of ``draft_model`` and ``draft_cost_fraction`` (a draft decode step's cost
    as a fraction of the target's).
    """

    num_draft_tokens: int = Field(ge=1, le=64, description="k: draft tokens per step")
    acceptance_rate: float = Field(ge=0, le=1, description="α: each draft token's acceptance")
    method: ProposerKind | None = None
    draft_model: ModelRef | None = None
    draft_cost_fraction: float | None = Field(default=None, gt=0, le=1)
    # n-gram only: the probability that a step's last n-gram has an earlier match
    # (1.0: the upper bound; docs/speculative.md has measured figures).
    match_probability: float = Field(default=1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _one_draft_cost(self) -> SpeculativeConfig:
        if self.match_probability != 1.0 and self.method != "ngram":
            raise ValueError("match_probability is the ngram method's (set method: ngram)")
        if self.method is None or self.method == "draft_model":
            if self.method == "draft_model" and self.draft_model is None:
                raise ValueError("method draft_model needs a draft_model")
            if (self.draft_model is None) == (self.draft_cost_fraction is None):
                raise ValueError("give exactly one of draft_model and draft_cost_fraction")
        elif self.draft_model is not None or self.draft_cost_fraction is not None:
            raise ValueError(
                f"method {self.method} takes neither draft_model nor draft_cost_fraction"
            )
        return self

    @property
    def proposer(self) -> ProposerKind | None:
        """The proposer priced from its parts; None: ``draft_cost_fraction``'s formula."""
        if self.method is None and self.draft_model is not None:
            return "draft_model"
        return self.method

    @property
    def expected_tokens_per_step(self) -> float:
        """Mean tokens a decode step emits: ``1 − q + q E(k, α)``."""
        drafted = expected_tokens_per_step(self.num_draft_tokens, self.acceptance_rate)
        return 1.0 + self.match_probability * (drafted - 1.0)


def expected_tokens_per_step(num_draft_tokens: int, acceptance_rate: float) -> float:
    """E = (1 − α^(k+1)) / (1 − α): mean tokens a request emits per step (k + 1 at α = 1)."""
    k, alpha = num_draft_tokens, acceptance_rate
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def phase(request_id: int) -> float:
    """A request's fixed offset in [0, 1) for the token schedule (golden-ratio sequence)."""
    return (request_id * GOLDEN_FRACTION) % 1.0


def tokens_at_step(phase_: float, step: int, expected: float) -> int:
    """Tokens emitted at a request's ``step``-th speculative step (from 0), uncapped."""
    return math.floor(phase_ + (step + 1) * expected) - math.floor(phase_ + step * expected)


def speculative_cost(
    config: SpeculativeConfig, target: CostModel, model: ModelSpec, hardware: HardwareSpec
) -> SpeculativeCost:
    """The target's cost model with ``config``'s speculative step priced."""
    return speculative_step_cost(
        target,
        model,
        hardware,
        config.num_draft_tokens,
        config.proposer,
        draft_model=config.draft_model,
        draft_cost_fraction=config.draft_cost_fraction,
    )


class SpeculativeScheduler:
    """Wraps any scheduler: its plan, with each decode's tokens from the schedule
    (module doc), capped by the KV blocks it can get without preempting anyone."""

    # vLLM turns async scheduling off with speculative decoding: planned step by step.
    async_scheduling = False

    def __init__(
        self, inner: Scheduler, config: SpeculativeConfig, rng: np.random.Generator
    ) -> None:
        self.inner = inner
        # tokens a step emits when the proposer drafts (matched steps only)
        self.expected = expected_tokens_per_step(config.num_draft_tokens, config.acceptance_rate)
        self.match_probability = config.match_probability
        self.rng = rng  # the n-gram proposer's match draws (none at probability 1)
        self._num_steps: dict[int, int] = {}  # request_id -> speculative steps so far

    def padding_contexts(self, core: CoreView) -> Sequence[int]:
        return self.inner.padding_contexts(core)

    def wake_at_s(self, core: CoreView) -> float | None:
        return self.inner.wake_at_s(core)

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        output = self.inner.schedule(core, now_s)
        if output.is_empty:
            return output
        kv = core.kv
        capacity_per_block = kv.block_size_tokens
        kept = output.scheduled_spec_decode_tokens
        matching = self.match_probability < 1.0
        for request, _ in output.scheduled:
            if not request.is_decoding:
                continue  # a prefill chunk: the plain token-counter rule
            if matching and self.rng.random() >= self.match_probability:
                output.undrafted.add(request)  # no match: nothing drafted, one token
                continue
            step = self._num_steps.get(request.request_id, 0)
            wanted = tokens_at_step(phase(request.request_id), step, self.expected)
            left = request.num_output_tokens - request.num_generated_tokens
            count = min(wanted, left)
            target = request.num_computed_tokens + count
            if target > request.num_blocks * capacity_per_block:
                if kv.can_allocate(request, target):
                    kv.allocate(request, target)
                else:  # what the held blocks allow (the plan reserved one token)
                    count = request.num_blocks * capacity_per_block - request.num_computed_tokens
            if count == left:
                self._num_steps.pop(request.request_id, None)
            else:
                self._num_steps[request.request_id] = step + 1
            if count > 1:  # the drafts kept beyond the one scheduled token
                kept[request] = count - 1
        return output


def speculative_summary(
    config: SpeculativeConfig, requests: RequestTable, steps: StepTable
) -> dict[str, float | int | None]:
    """summary.json keys: k, α, the expected and the simulated tokens per decode step
    (tokens after each request's first over the step log's decode slots)."""
    generated = requests["num_generated_tokens"]
    decode_tokens = int(generated.sum() - (generated > 0).sum())
    slots = steps.total("num_decode_seqs")
    return {
        "speculative_num_draft_tokens": config.num_draft_tokens,
        "speculative_acceptance_rate": config.acceptance_rate,
        "speculative_expected_tokens_per_step": config.expected_tokens_per_step,
        "speculative_tokens_per_step": decode_tokens / slots if slots else None,
    }
