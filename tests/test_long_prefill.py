"""long_prefill_token_threshold, max_num_partial_prefills: as vLLM v1's Scheduler.schedule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sim.engine.kv_cache import BlockPool
from sim.engine.policies import ContinuousConfig, PriorityConfig
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore


def core_with(config: ContinuousConfig, *prompts: int) -> EngineCore:
    core = EngineCore(config.build(), BlockPool(100, 16), max_model_len_tokens=1024)
    for i, prompt in enumerate(prompts):
        core.add(Request(i, arrival_s=0.0, num_prompt_tokens=prompt, num_output_tokens=3), 0.0)
    return core


def step(core: EngineCore, now_s: float) -> list[int]:
    plan = core.schedule(now_s)
    core.update(plan, now_s + 1.0)
    return [num_new for _, num_new in plan.scheduled]


def test_schedule_long_prefill_token_threshold_caps_each_chunk() -> None:
    # Threshold 8: a 20-token prompt computes 8, 8, then 4 tokens (its first token
    # at the end of the third step); then one decode token a step, uncapped by it.
    core = core_with(ContinuousConfig(long_prefill_token_threshold=8, max_num_seqs=4), 20)
    assert [step(core, float(t)) for t in range(4)] == [[8], [8], [4], [1]]
    request = core.running[0]
    assert request.num_generated_tokens == 2 and request.first_token_s == 3.0


def test_schedule_threshold_applies_to_waiting_and_running_alike() -> None:
    # Two long prompts both start in the first step (v1 has no limit on concurrent
    # partial prefills): 8 tokens each, within the 2048-token budget.
    core = core_with(ContinuousConfig(long_prefill_token_threshold=8, max_num_seqs=4), 20, 30)
    assert step(core, 0.0) == [8, 8]
    assert step(core, 1.0) == [8, 8]
    # The budget still binds below the threshold.
    tight = core_with(
        ContinuousConfig(long_prefill_token_threshold=8, max_num_batched_tokens=12, max_num_seqs=4),
        20,
        30,
    )
    assert step(tight, 0.0) == [8, 4]


def test_threshold_zero_is_off() -> None:
    core = core_with(ContinuousConfig(max_num_seqs=4), 300)
    assert step(core, 0.0) == [300]


def test_max_num_partial_prefills_other_than_one_is_rejected_as_in_vllm_v1() -> None:
    assert ContinuousConfig(max_num_partial_prefills=1).max_num_partial_prefills == 1
    with pytest.raises(ValidationError, match="concurrent partial prefill"):
        ContinuousConfig(max_num_partial_prefills=2)
    with pytest.raises(ValidationError, match="concurrent partial prefill"):
        PriorityConfig(max_num_partial_prefills=4)
