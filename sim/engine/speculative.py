"""Speculative decoding: a draft model proposes k tokens, the target verifies them at once.

Per decode step of a request, the draft model runs ``k`` cheap decode steps and
the target model checks the ``k + 1`` positions (the last sampled token and the
``k`` drafts) in one forward pass. With each draft token accepted independently
with probability ``α`` (the standard model of Leviathan et al., 2023), the
tokens emitted per step (accepted drafts plus the target's own next token) are
on average::

    E(k, α) = (1 − α^(k+1)) / (1 − α)        (= k + 1 when α = 1)

Which tokens a step emits is deterministic, not drawn: request ``r`` has a
fixed phase ``φ_r`` (the fractional part of ``r`` times the golden ratio, so
requests are not in lockstep) and emits, at its ``s``-th speculative step,
``floor(φ_r + (s + 1) E) − floor(φ_r + s E)`` tokens (between ``floor(E)`` and
``ceil(E)``), capped by the tokens it still has to emit. Over any ``n`` steps a
request emits ``n E`` tokens to within one, runs are reproducible without a
random stream, and the mean is exactly ``E``; the spread of a real acceptance
process is not modelled.

Cost of a step (``SpeculativeCost``): the target's forward pass with each
decoding sequence verifying ``k + 1`` tokens after its context (priced as a
prefill chunk of ``k + 1`` tokens: ``k + 1`` times the FLOPs, the weights read
once), plus the draft's ``k`` decode steps of the same sequences, priced by the
roofline of ``draft_model`` on the scenario's hardware (without the per-step
engine overhead, which the step pays once), or as ``draft_cost_fraction`` of
the target's own decode step (overhead included). Draft tokens are
always ``k`` (a real engine does not know where a request ends).

Token times: the tokens of one step are all emitted at its end (gaps of 0
between them). ``ITL`` counts one gap per step and request, as
``vllm bench serve`` does with streamed chunks that carry several tokens, so
under speculation mean ITL exceeds TPOT. ``Result.token_times_s`` assumes one
token per step and is not available under speculation.

Simplifications, stated: the plan runs one step per event (no skip-ahead, as
per-request token counts vary between steps); draft tokens do not count against
``max_num_batched_tokens``; the KV cache holds accepted tokens only (the
verification's lookahead slots are transient). A ``draft_model``'s weights and
KV layers do shrink the target's KV pool (``sim.hardware.kv_capacity``); a
``draft_cost_fraction`` names no model, so none is counted.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.cost.base import CostModel, StepShape, decode_run_s
from sim.cost.roofline import RooflineCost
from sim.engine.scheduler import CoreView, Scheduler, StepPlan
from sim.engine.step_runs import StepTable
from sim.hardware.specs import HardwareSpec, ModelRef

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

GOLDEN_FRACTION = (math.sqrt(5.0) - 1.0) / 2.0  # spreads phases evenly over [0, 1)


class SpeculativeConfig(BaseModel):
    """``speculative:`` in a scenario: k draft tokens per step accepted at rate α.

    Give exactly one of ``draft_model`` (a model preset or inline spec, priced
    by the roofline on the scenario's hardware) and ``draft_cost_fraction``
    (one draft decode step costs this fraction of the target's).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_draft_tokens: int = Field(ge=1, le=64, description="k: draft tokens per step")
    acceptance_rate: float = Field(ge=0, le=1, description="α: each draft token's acceptance")
    draft_model: ModelRef | None = None
    draft_cost_fraction: float | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="after")
    def _one_draft_cost(self) -> SpeculativeConfig:
        if (self.draft_model is None) == (self.draft_cost_fraction is None):
            raise ValueError("give exactly one of draft_model and draft_cost_fraction")
        return self

    @property
    def expected_tokens_per_step(self) -> float:
        return expected_tokens_per_step(self.num_draft_tokens, self.acceptance_rate)


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


class SpeculativeCost:
    """A cost model's steps with every decoding sequence verifying k + 1 tokens, plus the draft."""

    def __init__(
        self,
        target: CostModel,
        num_draft_tokens: int,
        draft: CostModel | None = None,
        draft_cost_fraction: float | None = None,
    ) -> None:
        if (draft is None) == (draft_cost_fraction is None):
            raise ValueError("give exactly one of draft and draft_cost_fraction")
        self.target = target
        self.num_draft_tokens = num_draft_tokens
        self.draft = draft
        self.draft_cost_fraction = draft_cost_fraction

    @property
    def label(self) -> str:
        draft = (
            self.draft.label if self.draft is not None else f"{self.draft_cost_fraction}x target"
        )
        return f"{self.target.label} + speculative(k={self.num_draft_tokens}, draft {draft})"

    def draft_s(
        self,
        num_seqs: int,
        context_tokens: int,
        *,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> float:
        """Seconds of the draft's k decode steps for ``num_seqs`` sequences (the
        longest and shortest context as in ``StepShape``)."""
        k = self.num_draft_tokens
        if self.draft is not None:
            steps = decode_run_s(
                self.draft, num_seqs, context_tokens, max_context_tokens, min_context_tokens
            )
            # numpy's sum (pairwise past 8 terms): the draft's seconds as ever summed.
            return float(np.fromiter(steps, np.float64, k).sum())
        assert self.draft_cost_fraction is not None
        one = self.target.step_s(
            StepShape(
                num_decode_seqs=num_seqs,
                num_decode_context_tokens=context_tokens,
                max_decode_context_tokens=max_context_tokens,
                min_decode_context_tokens=min_context_tokens,
            )
        )
        return self.draft_cost_fraction * k * one

    def verify_shape(self, shape: StepShape) -> StepShape:
        """``shape`` with each decode sequence turned into a chunk of k + 1 tokens.

        A sequence of context ``p + 1`` (``p`` cached) verifies ``c = k + 1``
        tokens: ``c p + c (c + 1) / 2`` attention pairs, ``p + c`` KV tokens read.
        """
        n = shape.num_decode_seqs
        cached = shape.num_decode_context_tokens - n  # sum of p
        c = self.num_draft_tokens + 1
        return StepShape(
            num_prefill_seqs=shape.num_prefill_seqs + n,
            num_prefill_tokens=shape.num_prefill_tokens + c * n,
            prefill_attention_pairs=shape.prefill_attention_pairs
            + c * cached
            + n * c * (c + 1) // 2,
            prefill_kv_read_tokens=shape.prefill_kv_read_tokens + cached + c * n,
        )

    def step_s(self, shape: StepShape) -> float:
        n = shape.num_decode_seqs
        if n == 0:
            return self.target.step_s(shape)
        return self.target.step_s(self.verify_shape(shape)) + self.draft_s(
            n,
            shape.num_decode_context_tokens,
            max_context_tokens=shape.max_decode_context_tokens,
            min_context_tokens=shape.min_decode_context_tokens,
        )


def speculative_cost(
    config: SpeculativeConfig, target: CostModel, hardware: HardwareSpec
) -> SpeculativeCost:
    """The target's cost model with the verification and draft cost of ``config``."""
    draft = None
    if config.draft_model is not None:
        # The engine's CPU work (scheduling, sampling) is paid once per step, with
        # the target's pass; the draft's steps add only their GPU roofline.
        draft = RooflineCost(config.draft_model, hardware)
    return SpeculativeCost(target, config.num_draft_tokens, draft, config.draft_cost_fraction)


class SpeculativeScheduler:
    """Wraps any scheduler: its plan, run one step at a time, with speculative decodes.

    For each request the inner plan decodes, the number of tokens it emits
    comes from the deterministic schedule (module docstring), capped by the
    tokens it has left and by the KV blocks it holds or can get without
    preempting anyone (never below the one token plain decoding gives).
    """

    # vLLM turns async scheduling off with speculative decoding: planned step by step.
    async_scheduling = False

    def __init__(self, inner: Scheduler, config: SpeculativeConfig) -> None:
        self.inner = inner
        self.expected = config.expected_tokens_per_step
        self._num_steps: dict[int, int] = {}  # request_id -> speculative steps so far

    def schedule(self, core: CoreView, now_s: float) -> StepPlan:
        plan = self.inner.schedule(core, now_s)
        plan.num_steps = 1
        if plan.is_empty:
            return plan
        kv = core.kv
        capacity_per_block = kv.block_size_tokens
        emitted = []
        for request, num_new in plan.scheduled:
            if not request.is_decoding:
                done = request.num_computed_tokens + num_new == request.num_tokens
                emitted.append(1 if done else 0)
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
            emitted.append(count)
        plan.num_emitted = emitted
        plan.committer = self
        return plan

    def commit_step(self, core: CoreView, plan: StepPlan, start_s: float, end_s: float) -> None:
        """Apply one step of a speculative plan (``EngineCore.commit`` delegates here)."""
        assert plan.num_emitted is not None
        step = core.num_steps
        previous = step - 1
        num_itl = num_prefill = num_decode = num_outputs = 0
        for (request, num_new), count in zip(plan.scheduled, plan.num_emitted, strict=True):
            generated = request.num_generated_tokens
            if request.is_decoding:
                num_decode += 1
                request.num_computed_tokens += count
            else:
                num_prefill += num_new
                request.num_computed_tokens += num_new
            if count == 0:
                continue
            num_outputs += 1
            continuing = request.last_token_step == previous
            if continuing:
                num_itl += 1  # one gap per request and step: its tokens arrive together
            else:
                core.break_run(request, end_s)
            if request.first_token_s is None:
                request.first_token_s = end_s
            request.num_generated_tokens = generated + count
            request.last_token_step = step
            request.last_token_s = end_s
            if generated + count == request.num_output_tokens:
                core.finish(request, end_s)
        core.steps.add_step(
            start_s, end_s, num_prefill, num_decode + plan.padding_seqs, num_itl, num_outputs
        )
        core.num_steps = step + 1


def speculative_summary(
    config: SpeculativeConfig, requests: pd.DataFrame, steps: StepTable
) -> dict[str, float | int | None]:
    """summary.json keys: k, α, the expected and the simulated tokens per decode step.

    Simulated: tokens emitted by decode steps (all but each request's first)
    over the decode slots the step log counts.
    """
    generated = requests["num_generated_tokens"].to_numpy()
    decode_tokens = int(generated.sum() - (generated > 0).sum())
    slots = steps.total("num_decode_seqs")
    return {
        "speculative_num_draft_tokens": config.num_draft_tokens,
        "speculative_acceptance_rate": config.acceptance_rate,
        "speculative_expected_tokens_per_step": config.expected_tokens_per_step,
        "speculative_tokens_per_step": decode_tokens / slots if slots else None,
    }
