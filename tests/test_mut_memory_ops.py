"""The memory-bound ops move the activations' own bytes: 4 a value for tables timed in
fp32, 2 otherwise (issue 39's mutation check, ``benchmarks/mutants.py``:
``memops-fp32-activations``).

``KernelCost`` reads the widths from the tables' provenance when it builds its
memory-bound ops; an fp32 artifact is made here from a shipped bf16 one by changing
only its recorded dtype.
"""

from __future__ import annotations

import pytest

from sim.cost.kernels.artifact import KernelArtifact, load_cached, resolve_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.memory_ops import MEMORY_OP_LATENCY_S
from sim.hardware.specs import hardware_preset, load_architecture

LLAMA = load_architecture("llama-3.1-8b")  # hidden 4096
H100 = hardware_preset("h100")


def _artifact(dtype: str) -> KernelArtifact:
    shipped = load_cached(resolve_kernel_artifact("h100_sxm-vllm-0.24.0-llama-3.1-8b", None))
    return KernelArtifact(shipped.provenance.model_copy(update={"dtype": dtype}), shipped.tables)


@pytest.mark.parametrize(("dtype", "bytes_per_value"), [("bfloat16", 2), ("float32", 4)])
def test_the_norms_move_the_tables_activation_width(dtype: str, bytes_per_value: int) -> None:
    ops = KernelCost(LLAMA, _artifact(dtype), hardware=H100)._memory
    assert ops is not None
    assert ops.activation_dtype_bytes == bytes_per_value
    bandwidth = H100.memory_bandwidth_bytes_per_s * H100.memory_efficiency
    # Two fused add + RMSNorm a layer, each reading x and the residual and writing both.
    add_norm_s = 2 * (100 * 4 * 4096 * bytes_per_value / bandwidth + MEMORY_OP_LATENCY_S)
    assert dict(ops.layer_terms(100.0))["add_norm"] == pytest.approx(add_norm_s, rel=1e-12)
    # The KV cache keeps its own dtype (bf16 here) whatever the activations'.
    assert ops.kv_dtype_bytes == 2
