"""Continuous batching with a waiting queue in an order of the policy's choosing.

The base of ``priority`` and ``shortest_prompt_first``: every step, before the
continuous policy's own mechanics run (decode first, chunked prefill within the
token budget, preemption, admission from the head of ``core.waiting``),
``reorder`` sorts the waiting queue, and optionally the running list, whose
tail is the preemption victim. Sorting is stable, so requests that compare
equal keep their order: first-come first-served, with requests preempted
earlier (requeued at the front) ahead.

Skip-ahead: in ``continuous`` a head blocked by the KV pool stays blocked
while the batch decodes, since arrivals queue behind it. Here an arrival can
overtake the head and may fit, so such a run is interruptible by arrivals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.plan import StepPlan
from sim.policies.continuous import Continuous, ContinuousConfig
from sim.request import Request

if TYPE_CHECKING:
    from sim.core import EngineCore


class ContinuousSettings(BaseModel):
    """The continuous policy's settings, shared by the policies built on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(default=256, ge=1, description="running requests at most")
    max_num_batched_tokens: int = Field(
        default=2048, ge=1, description="tokens computed per step at most"
    )
    chunked_prefill: bool = Field(default=True, description="cut prompts to fit the budget")
    preemption: Literal["recompute", "swap"] = Field(
        default="recompute",
        description="swap: victims' KV goes to CPU memory (engine.swap_space_bytes), see sim.swap",
    )

    def continuous_config(self) -> ContinuousConfig:
        """These settings as the plain continuous policy's config."""
        return ContinuousConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            chunked_prefill=self.chunked_prefill,
            preemption=self.preemption,
        )

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        """Most tokens one step can compute (sizes the activation reserve)."""
        return self.max_num_batched_tokens


class OrderedContinuous(Continuous):
    """Continuous batching that calls ``reorder`` before planning each step."""

    def schedule(self, core: EngineCore, now_s: float) -> StepPlan:
        self.reorder(core)
        return super().schedule(core, now_s)

    def reorder(self, core: EngineCore) -> None:
        """Sort ``core.waiting`` (and ``core.running`` if the policy wants) in place."""
        raise NotImplementedError

    def _admit(
        self,
        core: EngineCore,
        scheduled: list[tuple[Request, int]],
        budget: int,
        now_s: float,
    ) -> str:
        blocked_by = super()._admit(core, scheduled, budget, now_s)
        # A KV-blocked head can be overtaken by a smaller or more urgent
        # arrival: let arrivals interrupt a run, as for an empty queue.
        return "empty" if blocked_by == "kv" else blocked_by


def sort_waiting(core: EngineCore, key: Callable[[Request], Any], reverse: bool = False) -> None:
    """Stable in-place sort of the waiting deque by ``key`` (``reverse`` keeps ties in order)."""
    waiting = core.waiting
    if len(waiting) > 1:
        items = sorted(waiting, key=key, reverse=reverse)
        waiting.clear()
        waiting.extend(items)
