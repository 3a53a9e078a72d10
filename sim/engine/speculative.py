"""Speculative decoding: a proposer drafts k tokens, the target verifies them at once.

Per decode step of a request, the proposer (a draft model, an EAGLE head, or
n-gram lookup in the request's own tokens: ``SpeculativeConfig.method``, as
vLLM's ``speculative_config.method``) drafts ``k`` tokens and the target
checks the ``k + 1`` positions (the last sampled token and the ``k`` drafts)
in one forward pass. What a step costs, part by part, is
``sim.cost.speculative``'s.

Acceptance. Each draft token is accepted independently with probability
``α`` (``acceptance_rate``: the standard model of Leviathan et al., 2023),
and a step keeps the drafts up to the first rejected one plus one token of
the target's own (the correction, or the bonus token when all ``k`` are
accepted). The ``i``-th draft is kept with probability ``α^i``, so the
tokens a step emits are on average::

    E(k, α) = 1 + α + α² + … + α^k = (1 − α^(k+1)) / (1 − α)   (= k + 1 when α = 1)

(vLLM reports it as the mean acceptance length; the acceptance rate it
reports, accepted over proposed drafts, is ``(E − 1) / k``.) With ``α = 0`` a
step emits one token, as plain decoding, at the cost of the proposer and of
a ``k + 1``-token verification.

Which tokens a step emits is deterministic, not drawn: request ``r`` has a
fixed phase ``φ_r`` (the fractional part of ``r`` times the golden ratio, so
requests are not in lockstep) and emits, at its ``s``-th speculative step,
``floor(φ_r + (s + 1) E) − floor(φ_r + s E)`` tokens (between ``floor(E)`` and
``ceil(E)``), capped by the tokens it still has to emit. Over any ``n`` steps a
request emits ``n E`` tokens to within one, runs are reproducible without a
random stream, and the mean is exactly ``E``; the spread of a real acceptance
process is not modelled. Draft tokens are always ``k`` (a real engine does
not know where a request ends).

n-gram misses. vLLM's n-gram proposer drafts nothing for a sequence whose last
n-gram has no earlier match. With ``match_probability`` ``q < 1`` each decoding
sequence's step finds a match with probability ``q``, drawn from the
generator the run gives its policy (same seed, same draws); a miss emits one
token, is listed in ``SchedulerOutput.undrafted`` (its step's shape holds it
as a one-token chunk, not a decode the cost turns into a ``k + 1``-token
verification) and does not advance the request's schedule above, so ``E``
applies to matched steps only and a step emits ``1 − q + q E`` on average.

Token times: the tokens of one step are all emitted at its end (gaps of 0
between them). ``ITL`` counts one gap per step and request, as
``vllm bench serve`` does with streamed chunks that carry several tokens, so
under speculation mean ITL exceeds TPOT. ``Result.token_times_s`` assumes one
token per step and is not available under speculation.

Simplifications, stated: the plan runs one step per event (no skip-ahead, as
per-request token counts vary between steps); draft tokens do not count against
``max_num_batched_tokens``; the KV cache holds accepted tokens only (the
verification's lookahead slots are transient). A ``draft_model``'s weights and
KV layers do shrink the target's KV pool (``sim.hardware.kv_capacity``); an
EAGLE head's (one layer, under a tenth of the target's weights and KV) and a
``draft_cost_fraction`` (it names no model) are not counted.
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

    ``method`` names the proposer as vLLM's ``speculative_config.method`` does:
    ``draft_model`` (give ``draft_model``: a model preset or inline spec),
    ``eagle`` or ``eagle3`` (a head derived from the scenario's model), or
    ``ngram`` (prompt lookup, CPU only); each priced from its parts
    (``sim.cost.speculative``). Without ``method``, give exactly one of
    ``draft_model`` (then the method is ``draft_model``) and
    ``draft_cost_fraction`` (one draft decode step costs this fraction of the
    target's: a formula of the scenario's own, not parts).
    """

    num_draft_tokens: int = Field(ge=1, le=64, description="k: draft tokens per step")
    acceptance_rate: float = Field(ge=0, le=1, description="α: each draft token's acceptance")
    method: ProposerKind | None = None
    draft_model: ModelRef | None = None
    draft_cost_fraction: float | None = Field(default=None, gt=0, le=1)
    # n-gram only: the probability that a decoding sequence's last n-gram has an
    # earlier match, so the proposer drafts k tokens; otherwise it drafts none and
    # the sequence verifies its one token (vLLM's NgramProposer). Default 1.0:
    # every step matches (the upper bound). A workload's figure comes from its
    # traces: docs/speculative.md has SpecDecode-Bench's, 0.33 (ShareGPT) and
    # 0.88 (InstructCoder) for Llama-3.1-8B.
    match_probability: float = Field(default=1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _one_draft_cost(self) -> SpeculativeConfig:
        # 1.0 (every step drafts) is what the other proposers mean, and what a dumped
        # scenario writes back: capacity, plan and sweep validate their points from one.
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
        """Mean tokens a decode step emits: ``E(k, α)`` when the proposer drafts,
        one when it finds no match (probability ``1 − match_probability``)."""
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
    """The target's cost model (``model`` on ``hardware``) with ``config``'s
    speculative step priced from its parts (``sim.cost.speculative``)."""
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
    """Wraps any scheduler: its plan, run one step at a time, with speculative decodes.

    For each request the inner plan decodes, the number of tokens it emits
    comes from the deterministic schedule (module docstring), capped by the
    tokens it has left and by the KV blocks it holds or can get without
    preempting anyone (never below the one token plain decoding gives).
    """

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
    """summary.json keys: k, α, the expected and the simulated tokens per decode step.

    Simulated: tokens emitted by decode steps (all but each request's first)
    over the decode slots the step log counts.
    """
    generated = requests["num_generated_tokens"]
    decode_tokens = int(generated.sum() - (generated > 0).sum())
    slots = steps.total("num_decode_seqs")
    return {
        "speculative_num_draft_tokens": config.num_draft_tokens,
        "speculative_acceptance_rate": config.acceptance_rate,
        "speculative_expected_tokens_per_step": config.expected_tokens_per_step,
        "speculative_tokens_per_step": decode_tokens / slots if slots else None,
    }
