"""One roofline class for one GPU and for a parallel replica; the loop's table takes only the first.

``tabulate.roofline_of`` hands the compiled loop a roofline's five per-GPU constants,
from which the loop prices a step as max(compute, memory). A parallel replica's step
adds 2 x layers all-reduces per micro-batch and its pipeline stages, which those
constants do not hold: tabulated as one GPU, a tp-2 decode step would be priced short
by exactly its all-reduces (tp 2, pp 1, one micro-batch)::

    step_s = max(compute_s, memory_s) + 2 * layers * all_reduce(T * hidden * bytes, 2, link)
"""

from __future__ import annotations

import pytest

from sim.cost import tabulate
from sim.cost.base import StepShape
from sim.cost.collectives import collective_s
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.roofline import RooflineCost
from sim.hardware.kv_capacity import activation_dtype_bytes
from sim.hardware.parallel import ParallelismConfig
from sim.hardware.specs import hardware_preset, model_preset

LLAMA = model_preset("llama-3-8b")
H100 = hardware_preset("h100")
TP2 = ParallelismConfig(tensor_parallel_size=2)
CPU = EngineCpu(
    EngineCpuConfig(
        per_step_s=1e-4,
        scheduler_per_seq_s=1e-5,
        sampling_per_seq_s=0.0,
        per_token_s=1e-7,
        non_overlapped_s=1e-4,
    ),
    True,
    "test",
)


def test_only_a_one_gpu_roofline_is_tabulated() -> None:
    single, parallel = RooflineCost(LLAMA, H100), RooflineCost(LLAMA, H100, TP2)
    assert tabulate.roofline_of(single) is single
    assert tabulate.roofline_of(EngineCpuCost(single, CPU)) is single
    assert tabulate.roofline_of(parallel) is None
    assert tabulate.roofline_of(EngineCpuCost(parallel, CPU)) is None


def test_the_one_gpu_price_would_miss_a_parallel_steps_all_reduces() -> None:
    parallel = RooflineCost(LLAMA, H100, TP2)
    num_seqs = 8
    shape = StepShape(num_decode_seqs=num_seqs, num_decode_context_tokens=num_seqs * 1000)
    # What the loop's five constants give: one GPU's share of the FLOPs and bytes.
    one_gpu_s = max(parallel.compute_s(shape), parallel.memory_s(shape))
    message_bytes = num_seqs * LLAMA.hidden_size * activation_dtype_bytes(LLAMA)
    all_reduces_s = 2 * LLAMA.num_layers * collective_s("all_reduce", message_bytes, 2, TP2.link)
    assert all_reduces_s > 0
    assert parallel.step_s(shape) == pytest.approx(one_gpu_s + all_reduces_s, rel=1e-12)
    assert parallel.step_s(shape) > one_gpu_s
