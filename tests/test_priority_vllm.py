"""Strict priority as vLLM v1's Scheduler.schedule runs it (policy "priority")."""

from __future__ import annotations

from sim.engine.kv_cache import BlockPool
from sim.engine.policies import PriorityConfig
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore


def step(core: EngineCore, now_s: float) -> list[tuple[int, int]]:
    plan = core.schedule(now_s)
    core.update(plan, now_s + 1.0)
    return [(r.request_id, n) for r, n in plan.scheduled]


def test_schedule_priority_victim_is_the_largest_priority_and_arrival() -> None:
    # Three blocks of 16 tokens. r0 (priority 1, less urgent) is admitted alone;
    # r1 (priority 0) joins at step 1. The running list stays in admission order
    # [r0, r1] (not sorted by priority), so r0 decodes first each step. At step 3
    # r1 needs a third block: none is free, and the victim is the running request
    # with the largest (priority, arrival time), r0, although it was already
    # scheduled in this step: its token goes back to the budget and only r1 runs.
    core = EngineCore(PriorityConfig(max_num_seqs=4).build(), BlockPool(3, 16), 1024)
    core.add(Request(0, arrival_s=0.0, num_prompt_tokens=16, num_output_tokens=30, priority=1), 0.0)
    assert step(core, 0.0) == [(0, 16)]
    core.add(Request(1, arrival_s=1.0, num_prompt_tokens=15, num_output_tokens=30, priority=0), 1.0)
    assert step(core, 1.0) == [(0, 1), (1, 15)]
    assert [r.request_id for r in core.running] == [0, 1]
    assert step(core, 2.0) == [(0, 1), (1, 1)]
    assert step(core, 3.0) == [(1, 1)]
    assert [r.request_id for r in core.running] == [1]
    assert [r.request_id for r in core.waiting] == [0]
    assert core.waiting[0].num_preemptions == 1 and core.waiting[0].num_computed_tokens == 0


def test_schedule_priority_waiting_order_is_priority_then_arrival() -> None:
    # One slot; lower value first, then earlier arrival.
    core = EngineCore(PriorityConfig(max_num_seqs=1).build(), BlockPool(100, 16), 1024)
    for request_id, arrival_s, priority in ((0, 0.0, 2), (1, 0.1, 0), (2, 0.2, 1), (3, 0.3, 0)):
        request = Request(request_id, arrival_s, 8, 1, priority=priority)
        core.add(request, arrival_s)
    order = []
    for t in range(4):
        order += [request_id for request_id, _ in step(core, float(t))]
    assert order == [1, 3, 2, 0]
