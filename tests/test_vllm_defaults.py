"""vLLM's default batch limits (EngineArgs.get_batch_defaults) and where servesim applies them."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_docs import small_doc

from sim import api
from sim.engine.policies.vllm_defaults import batch_defaults, device_class
from sim.engine.scheduler import ContinuousConfig
from sim.metrics.report import format_summary_table
from sim.scenario import scenario_from_dict

GIB = 2**30


_doc = small_doc


def test_get_batch_defaults_device_classification() -> None:
    # >= 70 GiB and not an A100: the large-GPU table; A100s and smaller GPUs the other.
    assert device_class("h100", 80e9) == "large_gpu"
    assert device_class("h200", 141e9) == "large_gpu"
    assert device_class("a100-80gb", 80e9) == "gpu"
    assert device_class("l4", 24e9) == "gpu"
    assert device_class("x", 70 * GIB - 1) == "gpu"
    assert device_class("x", 70 * GIB) == "large_gpu"
    assert device_class("cpu-2core", 24e9) == "cpu"


@pytest.mark.parametrize(
    ("name", "memory", "usage", "expected"),
    [
        ("h100", 80e9, "openai_api_server", (8192, 1024)),
        ("h100", 80e9, "llm_class", (16384, 1024)),
        ("l4", 24e9, "openai_api_server", (2048, 256)),
        ("l4", 24e9, "llm_class", (8192, 256)),
        ("a100-80gb", 80e9, "openai_api_server", (2048, 256)),
    ],
)
def test_get_batch_defaults_table(
    name: str, memory: float, usage: Any, expected: tuple[int, int]
) -> None:
    limits = batch_defaults(name, memory, 1, usage, 1 << 20, True, None, None)
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == expected


def test_get_batch_defaults_cpu_scales_with_world_size() -> None:
    limits = batch_defaults("cpu-2core", 24e9, 2, "openai_api_server", 1 << 20, True, None, None)
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == (4096, 256)


def test_set_default_max_num_seqs_and_batched_tokens_args_clamps() -> None:
    # Without chunked prefill the budget grows to the model length.
    limits = batch_defaults("l4", 24e9, 1, "openai_api_server", 4096, False, None, None)
    assert limits.max_num_batched_tokens == 4096
    # The default budget never exceeds max_num_seqs * max_model_len ...
    limits = batch_defaults("h100", 80e9, 1, "openai_api_server", 100, True, None, 4)
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == (400, 4)
    # ... and the default max_num_seqs never exceeds the budget.
    limits = batch_defaults("h100", 80e9, 1, "openai_api_server", 8192, True, 512, None)
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == (512, 512)
    # Values the user set are kept as they are.
    limits = batch_defaults("h100", 80e9, 1, "openai_api_server", 8192, True, 100, 300)
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == (100, 300)


def test_scenario_fills_limits_from_its_hardware() -> None:
    h100 = scenario_from_dict(_doc(hardware="h100")).scheduler
    assert isinstance(h100, ContinuousConfig)
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    l4 = scenario_from_dict(_doc(hardware="l4")).scheduler
    assert isinstance(l4, ContinuousConfig)
    assert (l4.max_num_seqs, l4.max_num_batched_tokens) == (256, 2048)
    offline = scenario_from_dict(_doc(engine={"usage_context": "llm_class"})).scheduler
    assert isinstance(offline, ContinuousConfig)
    assert offline.max_num_batched_tokens == 16384
    explicit = scenario_from_dict(_doc(scheduler={"kind": "priority", "max_num_seqs": 8}))
    assert explicit.scheduler.max_num_seqs == 8  # type: ignore[union-attr]
    # min(8 * max_model_len, 8192)
    assert explicit.scheduler.max_num_batched_tokens == 8192  # type: ignore[union-attr]


def test_policy_built_without_a_scenario_uses_the_fallback() -> None:
    policy = ContinuousConfig().build()
    assert (policy.max_num_seqs, policy.max_num_batched_tokens) == (256, 2048)


def test_summary_records_engine_settings_and_header_prints_them() -> None:
    result = api.run(scenario_from_dict(_doc(hardware="h100")))
    settings = result.summary["engine_settings"]
    assert settings["max_num_seqs"] == 1024
    assert settings["max_num_batched_tokens"] == 8192
    assert settings["num_kv_blocks"] == result.summary["num_kv_blocks"]
    assert settings["block_size_tokens"] == 16
    assert settings["enable_prefix_caching"] is True  # vLLM v1's default
    first = format_summary_table(result.summary).splitlines()[0]
    assert first.startswith("engine: ")
    assert "max_num_seqs=1024" in first and "max_num_batched_tokens=8192" in first
