"""Priority classes on continuous batching: strict (vLLM's ``--scheduling-policy
priority``), or weighted fair between classes.

A lower ``Request.priority`` is more urgent, as in vLLM. Two modes:

* ``strict`` (vLLM v1's): the waiting queue is served in (priority, arrival
  time) order; the running list keeps admission order, and the preemption
  victim is the running request with the largest (priority, arrival time), even
  one already scheduled this step (vLLM's ``max(self.running, key=...)``).
* ``weighted`` (servesim's own): start-time fair queueing on admissions: a
  request entering the queue gets the finish tag ``max(V, last tag of its
  class) + 1 / weight`` (``V``: the last admitted request's start tag), served
  in tag order (ties: the more urgent class, then FCFS), so backlogged classes
  share admissions by weight. The victim is the newest running request.

Everything else is the continuous policy's; no running request is preempted to
admit an urgent one (as in vLLM).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Literal

from pydantic import Field, field_validator

from sim.engine.kv_cache import SwapSpace
from sim.engine.policies.ordered import OrderedContinuous, sort_waiting
from sim.engine.request import Request
from sim.engine.scheduler import ContinuousSettings, CoreView, SchedulerOutput

_URGENCY = attrgetter("priority", "arrival_s")  # smallest first; the victim is the largest


class PriorityConfig(ContinuousSettings):
    """Continuous batching with per-request priority classes."""

    kind: Literal["priority"] = "priority"
    mode: Literal["strict", "weighted"] = Field(
        default="strict", description="strict: lowest value first (vLLM); weighted: fair shares"
    )
    weights: dict[int, float] = Field(
        default_factory=dict,
        description="weighted mode: priority value -> share weight (> 0); unlisted classes 1",
    )

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, weights: dict[int, float]) -> dict[int, float]:
        for priority, weight in weights.items():
            if not weight > 0:
                raise ValueError(f"weight of priority {priority} must be > 0, got {weight}")
        return weights

    def build(self, swap: SwapSpace | None = None, async_scheduling: bool = False) -> Priority:
        return Priority(self, swap, async_scheduling)


class Priority(OrderedContinuous):
    """The policy; in weighted mode it remembers the virtual tags of waiting requests."""

    def __init__(
        self,
        config: PriorityConfig,
        swap: SwapSpace | None = None,
        async_scheduling: bool = False,
    ) -> None:
        super().__init__(config, swap, async_scheduling)
        self.mode = config.mode
        self.weights = dict(config.weights)
        self._virtual = 0.0  # V: start tag of the last admitted request
        self._last_finish: dict[int, float] = {}  # class -> finish tag of its newest
        self._start: dict[int, float] = {}  # request_id -> start tag (waiting requests)
        self._key: dict[int, tuple[float, int]] = {}  # request_id -> (finish tag, priority)

    def reorder(self, core: CoreView) -> None:
        if self.mode == "strict":
            sort_waiting(core, _URGENCY)  # stable: exact ties keep queue order
            return
        key = self._key
        for request in core.waiting:
            if request.request_id not in key:
                self._tag(request)
        sort_waiting(core, lambda r: key[r.request_id])

    def _tag(self, request: Request) -> None:
        """Give a request entering the queue its start and finish tags."""
        priority = request.priority
        if request.num_preemptions > 0:
            start = finish = self._virtual  # a requeued victim goes first, as in continuous
        else:
            start = max(self._virtual, self._last_finish.get(priority, 0.0))
            finish = start + 1.0 / self.weights.get(priority, 1.0)
            self._last_finish[priority] = finish
        self._start[request.request_id] = start
        self._key[request.request_id] = (finish, priority)

    def _victim_index(self, running: list[Request]) -> int:
        if self.mode != "strict":
            return len(running) - 1
        # The largest (priority, arrival time); the newest on an exact tie.
        best = len(running) - 1
        best_key = _URGENCY(running[best])
        for j in range(best - 1, -1, -1):
            key = _URGENCY(running[j])
            if key > best_key:
                best, best_key = j, key
        return best

    def schedule(self, core: CoreView, now_s: float) -> SchedulerOutput:
        output = super().schedule(core, now_s)
        if self.mode == "weighted":
            # The requests admitted in this step are the scheduled ones with a start tag.
            for request, _ in output.scheduled:
                start = self._start.pop(request.request_id, None)
                if start is not None:
                    del self._key[request.request_id]
                    if start > self._virtual:
                        self._virtual = start
        return output
