"""Issue 39, a new user's round: an ``engine.num_kv_blocks`` no GPU can hold.

``engine.num_kv_blocks: 10000000`` on one H100 simulated a 20 TB KV cache
(10M blocks of 2 MiB: Llama-3-8B's 32 layers x 2 (K, V) x 8 KV heads x 128
x 2 bytes x 16 tokens) with exit 0. vLLM allocates the blocks it is told
to, and runs out of memory; the count a vLLM log gives always fit its GPU,
so one whose KV alone cannot fit in the whole GPU is refused. (The weights are
not subtracted: under expert parallelism their per-GPU share is not modelled,
and a count vLLM logged there fits beside its expert shard only.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_errors import run_error

from sim.api.build import kv_blocks_for
from sim.errors import ConfigError
from sim.hardware.kv_capacity import (
    KvSizing,
    cuda_total_memory_bytes,
    kv_cache_budget,
    vllm_num_kv_blocks,
)
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import hardware_preset, model_preset
from sim.scenario import load_scenario

LLAMA_8B = model_preset("llama-3-8b")
H100 = hardware_preset("h100")
SIZING = KvSizing(16, 0.9, 2048, 256)
BLOCK_BYTES = 32 * 2 * 8 * 128 * 2 * 16  # layers x (K, V) x KV heads x head dim x bf16 x tokens


def _room_blocks() -> int:
    """Whole blocks in the GPU's whole memory, from the spec's own figures."""
    return int(cuda_total_memory_bytes(H100) // BLOCK_BYTES)


def test_the_block_is_the_hand_computed_size() -> None:
    budget = kv_cache_budget(LLAMA_8B, H100, ParallelismConfig(), SIZING)
    assert budget.block_bytes == BLOCK_BYTES


@pytest.mark.parametrize("extra", [1, 10, 10_000_000])
def test_more_blocks_than_the_gpu_holds_are_refused(extra: int) -> None:
    with pytest.raises(ConfigError, match=r"^engine\.num_kv_blocks .* h100"):
        vllm_num_kv_blocks(
            LLAMA_8B,
            H100,
            ParallelismConfig(),
            SIZING,
            max_model_len_tokens=8192,
            num_kv_blocks_given=_room_blocks() + extra,
        )


def test_a_count_that_fits_is_used_as_given() -> None:
    # 27,284: the count vLLM logged for Llama-3-8B on an H100 at 0.9 (vLLM PR #10511).
    for given in (27_284, _room_blocks()):
        counted = vllm_num_kv_blocks(
            LLAMA_8B,
            H100,
            ParallelismConfig(),
            SIZING,
            max_model_len_tokens=8192,
            num_kv_blocks_given=given,
        )
        assert counted == given


def test_the_command_line_refuses_it_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "name": "big",
        "model": "llama-3-8b",
        "hardware": "h100",
        "engine": {"num_kv_blocks": 10_000_000, "enable_prefix_caching": False},
        "workload": {
            "kind": "synthetic",
            "num_requests": 5,
            "arrival": {"kind": "poisson", "rate_per_s": 5},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 10},
        },
    }
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(doc))
    message = run_error(capsys, tmp_path, str(path))
    assert "engine.num_kv_blocks 10,000,000" in message
    assert not (tmp_path / "err").exists()


def test_a_count_vllm_logged_under_expert_parallelism_is_accepted() -> None:
    # The public DP2 x EP2 run: vLLM 0.19 logged 33,510 blocks of Qwen3-30B-A3B per
    # RTX PRO 6000 (96 GB), beside its shard of the experts; the whole model (~57 GiB)
    # plus those blocks (~49 GiB) would not fit one GPU, so the weights cannot be
    # subtracted here.
    path = Path(__file__).resolve().parent.parent / "scenarios" / "public"
    scenario = load_scenario(path / "rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml")
    assert scenario.engine.num_kv_blocks == 33_510
    assert kv_blocks_for(scenario) == 33_510
