"""A step plan: what a scheduling policy asks the executor to run next."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sim.cost.base import StepShape
from sim.engine.request import Request


class StepCommitter(Protocol):
    """A feature that commits its own plans' steps instead of the token-counter rule.

    Speculative decoding plugs in here: its plans name it as ``committer`` and
    ``EngineCore.commit`` hands the step over. ``core`` is the engine core as
    policies see it (``sim.engine.policies.base.CoreView``); it is typed
    ``Any`` here so that the plan, at the bottom of the engine, imports no policy.
    """

    def commit_step(self, core: Any, plan: StepPlan, start_s: float, end_s: float) -> None:
        """Apply one step of ``plan`` that ran from ``start_s`` to ``end_s`` (seconds)."""
        ...


@dataclass(slots=True)
class StepPlan:
    """Which requests advance by how many tokens in the next step.

    ``num_steps`` > 1 promises that, unless new work arrives, this step may be
    followed by ``num_steps - 1`` plain decode steps of the same requests
    (after this step each has sampled a token, none finishes before the last
    step, and the KV blocks suffice): the simulator then skips ahead in one
    event. A real engine runs one step and asks again. ``interruptible`` says
    whether a request arriving during
    those steps could change the plan; if not, arrivals need not wake the
    executor. An empty plan with ``wake_at_s`` asks to be called again at that
    time even if nothing arrives (e.g. a static batch's maximum wait).
    ``padding_seqs`` and ``padding_context_tokens`` are decode slots that cost
    compute but emit nothing (static batching keeps finished requests as padding).
    A policy that sets ``num_steps`` > 1 also sets ``run_num_seqs`` and
    ``run_context_tokens``, the shape of the decode steps that follow.
    """

    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    num_steps: int = 1
    interruptible: bool = True
    wake_at_s: float | None = None
    padding_seqs: int = 0
    padding_context_tokens: int = 0
    # The decode steps after the first (set whenever num_steps > 1): how many
    # slots decode (padding included) and their summed context in step 2.
    run_num_seqs: int = 0
    run_context_tokens: int = 0
    # A policy that already walked the scheduled requests may fill in the
    # shape, so the executor need not walk them again.
    known_shape: StepShape | None = None
    # Seconds the first step takes beyond the cost model's compute time, e.g.
    # copying swapped KV blocks between CPU and GPU memory (see sim.engine.swap).
    extra_s: float = 0.0
    # Speculative decoding (sim.engine.speculative) only: tokens each scheduled request
    # emits in this step, aligned with ``scheduled`` (a decode may emit several;
    # a prefill chunk that does not end its prompt emits 0). None: the token-
    # counter rule applies (one token when a request catches up).
    num_emitted: list[int] | None = None
    # Who commits this plan's step when the token-counter rule does not apply
    # (set together with num_emitted); None: EngineCore's own bookkeeping.
    committer: StepCommitter | None = None
    # Members of the core's decode cohort (sim.engine.cohort) this step also
    # decodes, one token each, beside ``scheduled``: every running request is
    # then either listed or a member.
    num_cohort: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.num_cohort

    def shape(self) -> StepShape:
        """The cost-relevant shape of the first step of this plan."""
        if self.known_shape is not None:
            return self.known_shape
        assert not self.num_cohort, "a plan with cohort members carries its shape"
        num_prefill_seqs = num_prefill_tokens = pairs = kv_read = 0
        num_decode_seqs = self.padding_seqs
        context = self.padding_context_tokens
        for request, num_new in self.scheduled:
            cached = request.num_computed_tokens
            if num_new == 1 and request.num_generated_tokens > 0:
                num_decode_seqs += 1
                context += cached + 1
            else:
                num_prefill_seqs += 1
                num_prefill_tokens += num_new
                pairs += num_new * cached + num_new * (num_new + 1) // 2
                kv_read += num_new + cached
        return StepShape(
            num_prefill_seqs=num_prefill_seqs,
            num_prefill_tokens=num_prefill_tokens,
            prefill_attention_pairs=pairs,
            prefill_kv_read_tokens=kv_read,
            num_decode_seqs=num_decode_seqs,
            num_decode_context_tokens=context,
        )
