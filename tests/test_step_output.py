"""The reference step as vLLM tells it (issue 40 item 1).

``EngineCore.schedule(now) -> SchedulerOutput`` and ``EngineCore.update(output,
end_s)``: the output is a plain value whose fields vLLM v1's ``SchedulerOutput``
also has (plus the step's extra seconds), with nothing a speed path needs; the
runs of decode steps the replica skips ahead over are worked out in ``sim.fast``
from the scheduler's public state. Figures below are computed by hand in the
comments.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import sim.engine.scheduler as scheduler
from sim.engine.kv_cache import BlockPool
from sim.engine.policies import ContinuousConfig, PriorityConfig, StaticConfig
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore
from sim.engine.speculative import SpeculativeConfig, SpeculativeScheduler
from sim.fast.decode_runs import commit_run, plan_run

ROOT = Path(__file__).resolve().parent.parent

# What the old step plan carried for the speed paths (skip-ahead runs, static
# batching's padding and wake-up, the cohort's shape, speculative's own commit).
SPEED_PATH_FIELDS = {
    "num_steps",
    "interruptible",
    "wake_at_s",
    "padding_seqs",
    "padding_context_tokens",
    "padding_max_context_tokens",
    "padding_min_context_tokens",
    "run_num_seqs",
    "run_context_tokens",
    "run_max_context_tokens",
    "run_min_context_tokens",
    "known_shape",
    "num_emitted",
    "committer",
}


# -- the class ----------------------------------------------------------------------


def test_the_output_has_at_most_six_fields_and_none_for_a_speed_path() -> None:
    output_class = getattr(scheduler, "SchedulerOutput", None)
    assert output_class is not None, "sim.engine.scheduler has no SchedulerOutput"
    names = {f.name for f in dataclasses.fields(output_class)}
    assert len(names) <= 6
    assert not names & SPEED_PATH_FIELDS
    # Each one vLLM's SchedulerOutput has too (vllm/v1/core/sched/output.py), the
    # step's extra seconds, and the decodes vLLM schedules with no spec tokens
    # (absent from its scheduled_spec_decode_tokens; servesim's holds accepted
    # drafts, so it cannot tell them from a drafted request that kept none).
    allowed = {"scheduled", "scheduled_spec_decode_tokens", "undrafted", "preempted", "extra_s"}
    assert names <= allowed
    # No field holds a tuple of several values to keep the count down.
    for f in dataclasses.fields(output_class):
        assert "tuple[" not in str(f.type) or f.name == "scheduled", f.name


def test_no_step_plan_hook_override_or_second_commit_path_is_left() -> None:
    assert not hasattr(scheduler, "StepPlan")
    assert not hasattr(scheduler, "StepCommitter")
    assert not hasattr(scheduler, "MAX_RUN_STEPS")  # a speed path's cap
    for gone in ("_plan", "commit", "_commit_one", "_commit_run", "_advance_run"):
        assert not hasattr(EngineCore, gone), gone
    for gone in ("_tally", "_finish_plan"):
        assert not hasattr(scheduler.Continuous, gone), gone
    assert hasattr(EngineCore, "update")


def _engine_private_names() -> set[str]:
    """Private names sim/engine defines: module globals, class attributes and methods,
    and attributes its code assigns on ``self``."""
    names: set[str] = set()
    for path in (ROOT / "sim" / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_engine_uses(sources: Sequence[tuple[str, ast.AST]], private: set[str]) -> list[str]:
    """Where code reaches a private name of sim/engine: an attribute of an object
    other than its own ``self`` / ``cls``, or an import from ``sim.engine``."""
    found = []
    for name, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private:
                own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                if not own:
                    found.append(f"{name}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sim.engine"):
                found += [
                    f"{name}:{node.lineno}: import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
    return found


def test_sim_fast_uses_no_private_attribute_of_engine_objects() -> None:
    private = _engine_private_names()
    sources = [
        (str(path.relative_to(ROOT)), ast.parse(path.read_text()))
        for path in sorted((ROOT / "sim" / "fast").rglob("*.py"))
    ]
    assert private_engine_uses(sources, private) == []


def test_the_private_use_check_finds_planted_uses() -> None:
    tree = ast.parse(
        "from sim.engine.scheduler import _RECORD_TIMES\n"
        "policy._admit(core)\n"
        "self._own = 1\n"
        "core.waiting\n"
    )
    assert private_engine_uses([("p.py", tree)], {"_admit", "_own", "_RECORD_TIMES"}) == [
        "p.py:1: import _RECORD_TIMES",
        "p.py:2: ._admit",
    ]


# -- schedule and update -------------------------------------------------------------


def continuous_core(num_blocks: int = 100, max_num_seqs: int = 8) -> EngineCore:
    policy = ContinuousConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=64).build()
    return EngineCore(policy, BlockPool(num_blocks, 16), 4096)


def test_update_starts_the_step_when_it_was_scheduled_and_samples_on_catch_up() -> None:
    core = continuous_core()
    request = Request(0, 0.0, 10, 3)
    core.add(request, 0.0)
    output = core.schedule(0.5)
    assert output.scheduled == [(request, 10)] and output.preempted == []
    core.update(output, 0.75)
    # The 10-token prompt is computed and its first token sampled at the step's end.
    assert (request.num_computed_tokens, request.num_generated_tokens) == (10, 1)
    assert request.first_token_s == 0.75
    step = core.steps.frame().iloc[0]
    assert (step["start_s"], step["end_s"], step["num_prefill_tokens"]) == (0.5, 0.75, 10)


def test_the_output_names_the_requests_its_planning_preempted() -> None:
    # A pool of 2 blocks of 16 tokens; two requests of 16-token prompts fill it.
    core = continuous_core(num_blocks=2)
    first, second = Request(0, 0.0, 16, 8), Request(1, 0.0, 16, 8)
    core.add(first, 0.0)
    core.add(second, 0.0)
    core.update(core.schedule(0.0), 1.0)  # both prompts: 2 blocks, a token each
    # Each decode's 17th token needs a second block: none is free, so the newest
    # (request 1) is preempted for request 0.
    output = core.schedule(1.0)
    assert output.preempted == [second]
    assert output.scheduled == [(first, 1)]
    assert list(core.waiting) == [second]


# -- static batching: its padding is a cost of the step's shape ----------------------


def test_static_batchings_finished_members_are_priced_and_logged_as_padding() -> None:
    policy = StaticConfig(max_batch_size=2).build()
    core = EngineCore(policy, BlockPool(100, 16), 4096)
    short, long = Request(0, 0.0, 4, 2), Request(1, 0.0, 4, 5)
    core.add(short, 0.0)
    core.add(long, 0.0)
    now = 0.0
    for _ in range(3):  # the prefill (a token each), then two decodes: short is done
        core.update(core.schedule(now), now + 1.0)
        now += 1.0
    assert short.finish_s is not None and long.finish_s is None
    output = core.schedule(now)
    assert output.scheduled == [(long, 1)]
    shape = core.step_shape(output)
    # short finished in step 1 (its 2nd token) with max_num_tokens = 4 + 2 - 1 = 5;
    # in step 3 its slot computes a discarded token at 5 + 3 - 1 = 7 tokens of
    # context. long computed 4 + 2 = 6 tokens: its next is at context 7.
    assert shape.num_decode_seqs == 2
    assert shape.num_decode_context_tokens == 7 + 7
    assert core.padding_contexts() == [7]
    core.update(output, now + 1.0)
    assert core.steps.frame()["num_decode_seqs"].tolist()[-1] == 2  # padding logged too


def test_a_static_batch_waits_for_its_oldest_request_at_most_max_wait() -> None:
    policy = StaticConfig(max_batch_size=4, max_wait_s=2.0).build()
    core = EngineCore(policy, BlockPool(100, 16), 4096)
    core.add(Request(0, 0.0, 4, 2), 0.5)
    assert core.schedule(1.0).is_empty
    assert core.wake_at_s() == 0.5 + 2.0  # ready at 0.5, waits 2 s at most
    assert not core.schedule(2.5).is_empty


# -- speculative decoding: through the one update path -------------------------------


def test_speculative_accepted_drafts_advance_through_update() -> None:
    # k = 3 drafts all accepted (alpha = 1): every decode emits k + 1 = 4 tokens,
    # capped by what the request has left.
    config = SpeculativeConfig(num_draft_tokens=3, acceptance_rate=1.0, draft_cost_fraction=0.5)
    inner = ContinuousConfig(max_num_seqs=8, max_num_batched_tokens=64).build()
    core = EngineCore(
        SpeculativeScheduler(inner, config, np.random.default_rng(0)), BlockPool(100, 16), 4096
    )
    request = Request(0, 0.0, 8, 7)
    core.add(request, 0.0)
    core.update(core.schedule(0.0), 1.0)  # the prompt: 1 token
    output = core.schedule(1.0)
    assert output.scheduled == [(request, 1)]
    assert output.scheduled_spec_decode_tokens == {request: 3}  # kept beyond the one
    core.update(output, 2.0)
    # 1 + 4 tokens, all computed but the last: 8 + 5 - 1 = 12.
    assert (request.num_generated_tokens, request.num_computed_tokens) == (5, 12)
    output = core.schedule(2.0)
    assert output.scheduled_spec_decode_tokens == {request: 1}  # 2 tokens left
    core.update(output, 3.0)
    assert request.num_generated_tokens == 7 and request.finish_s == 3.0
    # One inter-token gap a step and request (its tokens arrive together).
    assert core.steps.frame()["num_itl_tokens"].tolist() == [0, 1, 1]


# -- decode runs: the skip-ahead, from public state ----------------------------------


def decoding_core(
    outputs: list[int], num_blocks: int = 100, max_num_seqs: int = 8
) -> tuple[EngineCore, list[Request]]:
    """A core whose requests (16-token prompts) have each sampled their first token."""
    core = continuous_core(num_blocks, max_num_seqs)
    requests = [Request(i, 0.0, 16, num_output) for i, num_output in enumerate(outputs)]
    for request in requests:
        core.add(request, 0.0)
    core.update(core.schedule(0.0), 1.0)
    return core, requests


def test_a_run_lasts_until_the_first_request_finishes() -> None:
    core, _ = decoding_core([6, 10])
    output = core.schedule(1.0)
    run = plan_run(core, output)
    assert run is not None
    # Request 0 has 6 - 1 = 5 tokens to go: this step and 4 more.
    assert run.num_steps == 5
    assert run.interruptible  # nobody waits: an arrival could join
    # Step 2 decodes both at 16 + 1 + 1 = 18 tokens of context each.
    assert (run.shape.num_decode_seqs, run.shape.num_decode_context_tokens) == (2, 36)
    assert (run.shape.max_decode_context_tokens, run.shape.min_decode_context_tokens) == (18, 18)


def test_a_run_is_committed_as_its_steps_one_by_one_would_be() -> None:
    (by_run, run_requests), (by_step, step_requests) = (
        decoding_core([6, 10]),
        decoding_core([6, 10]),
    )
    output = by_run.schedule(1.0)
    run = plan_run(by_run, output)
    assert run is not None
    ends = [2.0 + j for j in range(run.num_steps)]
    commit_run(by_run, output, by_run.step_shape(output), 1.0, ends)
    now = 1.0
    for end in ends:
        by_step.update(by_step.schedule(now), end)
        now = end
    assert by_run.num_steps == by_step.num_steps == 1 + run.num_steps
    assert by_run.steps.frame().equals(by_step.steps.frame())
    state = [
        [(r.num_generated_tokens, r.num_computed_tokens, r.num_blocks, r.finish_s) for r in rs]
        for rs in (run_requests, step_requests)
    ]
    assert state[0] == state[1]
    assert run_requests[0].finish_s == ends[-1]  # its 6th token, in the run's last step
    assert by_run.kv.num_free_blocks == by_step.kv.num_free_blocks
    assert by_run.running == [run_requests[1]]


def test_a_blocked_queue_makes_a_run_that_arrivals_cannot_interrupt() -> None:
    core, _ = decoding_core([6, 10], max_num_seqs=2)
    core.add(Request(2, 0.0, 16, 4), 1.0)  # blocked by max_num_seqs = 2
    run = plan_run(core, core.schedule(1.0))
    assert run is not None and run.num_steps == 5
    assert not run.interruptible


def test_a_run_stops_where_the_kv_pool_runs_out() -> None:
    # Four blocks of 16 tokens; two requests hold one each after their prompts.
    core, _ = decoding_core([40, 40], num_blocks=4)
    output = core.schedule(1.0)
    run = plan_run(core, output)
    # This step computes token 17 of each: their second blocks, the last free
    # ones. Two blocks hold 32 tokens: 15 more steps (tokens 18 to 32), not the
    # 40 - 2 = 38 the requests have left after this step.
    assert run is not None and run.num_steps == 1 + 15


def test_no_run_after_a_preemption() -> None:
    # Two blocks, each request's first: the second's 17th token needs a third.
    core, _ = decoding_core([8, 8], num_blocks=2)
    output = core.schedule(1.0)
    assert output.preempted and plan_run(core, output) is None


def test_a_prefill_step_is_not_followed_by_a_run_of_static_batching() -> None:
    policy = StaticConfig(max_batch_size=2).build()
    core = EngineCore(policy, BlockPool(100, 16), 4096)
    core.add(Request(0, 0.0, 4, 3), 0.0)
    core.add(Request(1, 0.0, 4, 9), 0.0)
    output = core.schedule(0.0)
    assert plan_run(core, output) is None  # the batch's prefill step
    core.update(output, 1.0)
    run = plan_run(core, core.schedule(1.0))
    # Request 0 has 3 - 1 = 2 tokens left: this step and one more.
    assert run is not None and run.num_steps == 2 and not run.interruptible


@pytest.mark.parametrize("kind", ["continuous", "priority"])
def test_a_head_the_kv_pool_blocks_interrupts_a_run_only_where_it_can_be_overtaken(
    kind: str,
) -> None:
    # Four blocks of 16 tokens. Two 8-token prompts hold one block each; their
    # decodes fit in it up to token 16. A 40-token prompt then needs 3 blocks of
    # the 2 free: blocked by the pool. Continuous batching serves the queue in
    # order, so that block only tightens while the batch decodes; priority
    # scheduling reorders the queue, so an arrival may overtake the head and fit.
    config = PriorityConfig if kind == "priority" else ContinuousConfig
    policy = config(max_num_seqs=8, max_num_batched_tokens=64).build()
    core = EngineCore(policy, BlockPool(4, 16), 4096)
    for i, num_output in enumerate([6, 10]):
        core.add(Request(i, 0.0, 8, num_output), 0.0)
    core.update(core.schedule(0.0), 1.0)
    core.add(Request(2, 1.0, 40, 2), 1.0)
    output = core.schedule(1.0)
    assert len(output.scheduled) == 2 and len(core.waiting) == 1
    run = plan_run(core, output)
    # Request 0 has 6 - 1 = 5 tokens to go (this step and 4 more), all within its
    # block (8 + 5 = 13 tokens).
    assert run is not None and run.num_steps == 5
    assert run.interruptible == (kind == "priority")
