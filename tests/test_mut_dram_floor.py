"""The DRAM floor of decode attention counts the KV cache's own bytes (issue 39's
mutation check, ``benchmarks/mutants.py``: ``dram-floor-kv-dtype``, ``dram-floor-k-only``).

A decode step reads each token's K and V of every KV head from DRAM: ``2 x
num_kv_heads x head_dim x`` the cache's bytes per element, per token and layer
(1 byte for an fp8 cache, 2 for bf16). The shipped tables are all bf16, so an
fp8-KV artifact is made here from one by changing only its recorded KV dtype.
"""

from __future__ import annotations

import pytest

from sim.cost.kernels.artifact import KernelArtifact, load_cached, resolve_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.tables import attention_grids
from sim.hardware.specs import hardware_preset, load_architecture

LLAMA = load_architecture("llama-3.1-8b")  # 8 KV heads of 128
# The L40S's tables beat its datasheet bandwidth on long KV (96 MB of L2): the floor bites.
TABLES = "l40s-vllm-0.24.0-llama-3.1-8b"
GPU = hardware_preset("l40s")


def _artifact(kv_dtype: str) -> KernelArtifact:
    shipped = load_cached(resolve_kernel_artifact(TABLES, None))
    provenance = shipped.provenance.model_copy(update={"kv_dtype": kv_dtype})
    return KernelArtifact(provenance, shipped.tables)


@pytest.mark.parametrize(("kv_dtype", "bytes_per_element"), [("bfloat16", 2), ("fp8", 1)])
def test_decode_attention_is_the_table_or_its_kv_from_dram_whichever_is_longer(
    kv_dtype: str, bytes_per_element: int
) -> None:
    artifact = _artifact(kv_dtype)
    table = attention_grids(artifact, 32, 8, 128).decode
    cost = KernelCost(LLAMA, artifact, hardware=GPU)
    kv_bytes_per_token = 2 * 8 * 128 * bytes_per_element  # K and V, one layer
    bandwidth = GPU.memory_bandwidth_bytes_per_s
    floored = 0
    for batch in table.axes[0]:
        for kv in table.axes[1]:
            dram_s = batch * kv * kv_bytes_per_token / bandwidth
            expected = max(table(batch, kv), dram_s)
            got = cost.decode_attention_s(int(batch), int(batch * kv))
            assert got == pytest.approx(expected, rel=1e-9), (batch, kv)
            floored += dram_s > table(batch, kv)
    assert floored > 0  # some points are raised to the floor (else this checks nothing)
