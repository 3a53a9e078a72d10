"""Decode attention from tables never faster than its KV streamed from DRAM
(``sim.cost.kernels.tables.dram_floored``).

aiconfigurator's generation-attention rows time a KV cache that stays in L2
between repetitions; on GPUs with a large L2 some rows beat the datasheet
bandwidth, which a forward pass, reading each layer's own KV from DRAM, cannot.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.kernels.artifact import KernelArtifact, load_cached, resolve_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.tables import attention_grids, dram_floored
from sim.hardware.specs import hardware_preset, load_architecture

LLAMA = load_architecture("llama-3.1-8b")
KV_BYTES = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, bf16: one token, one layer


def artifact(name: str) -> KernelArtifact:
    return load_cached(resolve_kernel_artifact(name, None))


def test_only_points_faster_than_the_bandwidth_are_raised_to_it() -> None:
    grid = Grid("g", ("batch_size", "kv_tokens"), ([1.0, 4.0], [100.0, 1000.0]),
                [[1e-6, 1e-3], [1e-6, 1e-3]])  # fmt: skip
    floored = dram_floored(grid, KV_BYTES, 1e12)
    dram_s = np.outer([1.0, 4.0], [100.0, 1000.0]) * KV_BYTES / 1e12
    assert np.array_equal(floored.values, np.maximum(grid.values, dram_s))
    assert floored.values[0, 1] == 1e-3 and floored.values[1, 0] == pytest.approx(dram_s[1, 0])


@pytest.mark.parametrize(
    ("name", "gpu", "raised"),
    [
        ("rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b", "rtx-pro-6000", True),  # 128 MB L2
        ("l40s-vllm-0.24.0-llama-3.1-8b", "l40s", True),  # 96 MB L2
        ("h100_sxm-vllm-0.24.0-llama-3.1-8b", "h100", False),
        ("h200_sxm-vllm-0.24.0-llama-3.1-8b", "h200", False),
    ],
)
def test_shipped_tables_are_floored_where_they_beat_the_datasheet(
    name: str, gpu: str, raised: bool
) -> None:
    source = artifact(name)
    table = attention_grids(source, 32, 8, 128).decode
    cost = KernelCost(LLAMA, source, hardware=hardware_preset(gpu))
    bandwidth = hardware_preset(gpu).memory_bandwidth_bytes_per_s
    batch, kv = np.meshgrid(*table.axes, indexing="ij")
    dram_s = batch * kv * KV_BYTES / bandwidth
    assert np.all(cost._decode_attn.values >= dram_s)
    assert (cost._decode_attn.values > table.values).any() == raised
    # A priced step reads no faster than DRAM either.
    seconds = cost.decode_attention_s(64, 64 * 511)
    assert seconds >= 64 * 511 * KV_BYTES / bandwidth * (1 - 1e-12)
