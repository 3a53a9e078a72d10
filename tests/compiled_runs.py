"""Runs through the Python path and the compiled loop, and their comparison
(``tests/test_compiled_path.py``, ``tests/properties/test_compiled_equivalence.py``)."""

from __future__ import annotations

import functools
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest

from sim.cost.base import CostModel, StepShape
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.kernels.artifact import load_cached, resolve_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.fast.compiled import path
from sim.fast.open_loop import FastSimulation
from sim.hardware.specs import load_architecture
from sim.serving.cluster import Cluster
from sim.serving.replica_config import ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult
from sim.workload.generate import RequestArrays


@functools.cache
def kernel_gpus() -> tuple[KernelCost, ...]:
    """Kernel tables the compiled loop plays. aiconfigurator's route: the shipped
    H100 tables of Llama-3.1-8B (what scenarios/chat.yaml's ``auto`` picks) bare,
    without the memory-bound ops, at tensor parallel 2 (a measured all-reduce) and
    pipeline parallel 2, and an MoE's (Qwen3-30B-A3B on an RTX PRO 6000); the RTX PRO
    6000's Llama-3.1-8B tables, FA2 with the mixed-decode factor carried to them
    (``mixed_factor``; the MoE's tables have it too).
    LLMServingSim's: the RTX PRO 6000 profile of Llama-3.1-8B (4-D mixed attention,
    skew fit), without its skew fit, with attention as two kernels, and the RTX
    4090's (no skew fit). Last, the MoE's under expert parallelism 2."""
    h100 = load_cached(resolve_kernel_artifact("h100_sxm-vllm-0.24.0-llama-3.1-8b", None))
    moe = load_cached(
        resolve_kernel_artifact("rtx_pro_6000_server-vllm-0.24.0-qwen3-30b-a3b", None)
    )
    fa2 = load_cached(resolve_kernel_artifact("rtx_pro_6000_server-vllm-0.24.0-llama-3.1-8b", None))
    profile = load_cached(resolve_kernel_artifact("rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1", None))
    rtx4090 = load_cached(resolve_kernel_artifact("rtx4090-vllm-0.19.0-llama-3.1-8b-tp1", None))
    llama = load_architecture("llama-3.1-8b")
    return (
        KernelCost(llama, h100),
        KernelCost(llama, h100, disabled_terms=frozenset({"memory_ops"})),
        KernelCost(llama, h100, tensor_parallel_size=2),
        KernelCost(llama, h100, pipeline_parallel_size=2),
        KernelCost(load_architecture("qwen3-30b-a3b"), moe),
        KernelCost(llama, fa2),
        KernelCost(llama, profile),
        KernelCost(llama, profile, disabled_terms=frozenset({"skew"})),
        KernelCost(llama, profile, disabled_terms=frozenset({"mixed_attention"})),
        KernelCost(llama, rtx4090),
        KernelCost(load_architecture("qwen3-30b-a3b"), moe, expert_parallel_size=2),
    )


# The engine's CPU work around a GPU step, for the bit-for-bit checks: shorter than
# the step (a few µs a sequence) and longer (ms a sequence, so max() picks either side).
LIGHT = EngineCpuConfig(
    per_step_s=4e-4,
    scheduler_per_seq_s=1.3e-5,
    sampling_per_seq_s=0.0,
    per_token_s=1e-7,
    non_overlapped_s=1e-4,
)
HEAVY = EngineCpuConfig(
    per_step_s=3e-3,
    scheduler_per_seq_s=2e-3,
    sampling_per_seq_s=0.0,
    per_token_s=3e-6,
    non_overlapped_s=7e-4,
)


def kernel_costs(light: EngineCpuConfig, heavy: EngineCpuConfig) -> list[CostModel]:
    """``kernel_gpus``, bare and inside the engine's CPU work (``light`` and ``heavy``
    coefficients, overlapped and serial)."""
    gpus = kernel_gpus()

    def cpu(config: EngineCpuConfig, overlapped: bool) -> EngineCpu:
        return EngineCpu(config, async_scheduling=overlapped, source="test")

    return [
        *gpus,
        EngineCpuCost(gpus[0], cpu(heavy, True)),
        EngineCpuCost(gpus[0], cpu(light, False)),
        EngineCpuCost(gpus[2], cpu(light, True)),
        EngineCpuCost(gpus[4], cpu(heavy, False)),
        EngineCpuCost(gpus[6], cpu(light, True)),
        EngineCpuCost(gpus[9], cpu(heavy, False)),
    ]


def record_plays(patch: pytest.MonkeyPatch) -> list[bool]:
    """What each ``path.run_compiled`` call answers from now on (True: the compiled
    loop played the run), in order."""
    played: list[bool] = []
    run_compiled = path.run_compiled

    def recording(*args: Any) -> bool:
        played.append(run_compiled(*args))
        return played[-1]

    patch.setattr(path, "run_compiled", recording)
    return played


def simulate(
    arrays: RequestArrays,
    engine: ReplicaConfig,
    mode: str,
    cluster: Cluster | None = None,
    workers: int | None = 1,
) -> tuple[RawResult, list[int], bool]:
    """One run with ``SERVESIM_COMPILED=mode``: its result, the request ids in the
    order they left each core (replica after replica), and whether the compiled
    loop played it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SERVESIM_COMPILED", mode)
        played = record_plays(patch)
        simulation = FastSimulation(engine, cluster, workers=workers)
        orders: list[list[int]] = []
        for core in simulation.cores:
            order: list[int] = []
            orders.append(order)
            take = core.take_records

            def taking(take: Any = take, order: list[int] = order) -> dict[str, Any]:
                records = take()
                order.extend(records["request_id"].tolist())
                return records

            patch.setattr(core, "take_records", taking)
        raw = simulation.run(cast(OpenLoop, arrays))
    assert (raw.accelerator == "compiled loop") == bool(
        played and played[0]
    )  # the result says which loop ran
    return raw, [i for order in orders for i in order], bool(played and played[0])


def assert_identical(a: RawResult, b: RawResult) -> None:
    """The same records, steps, series, breaks and rejections, to the bit."""
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)
    assert a.later_runs == b.later_runs
    assert a.records.rejections == b.records.rejections
    np.testing.assert_array_equal(a.extra_itl_s, b.extra_itl_s)


def assert_loop_prices_as(
    kernel: KernelCost,
    prices: tuple[Any, Any, Any],
    rng: np.random.Generator,
    num_shapes: int,
) -> None:
    """The compiled loop's ``step_s`` on ``prices`` (``tabulate``'s arrays of
    ``kernel``) equals ``kernel.step_s`` to the bit on ``num_shapes`` random shapes:
    up to 3 prefill chunks of 1-299 tokens after 0-8,999 cached, up to 29 decodes
    of 2-8,999 tokens of context."""
    from sim.fast.compiled import loop  # numba-compiled on first use

    constants, tables, layout = prices
    for _ in range(num_shapes):
        chunks = [(int(rng.integers(1, 300)), int(rng.integers(0, 9000)))
                  for _ in range(rng.integers(0, 4))]  # fmt: skip
        shape = StepShape.build(chunks, rng.integers(2, 9000, rng.integers(0, 30)).tolist())
        price_s = loop.step_s(
            constants, tables, layout, shape.num_prefill_seqs, shape.num_prefill_tokens,
            shape.prefill_attention_pairs, shape.prefill_kv_read_tokens,
            shape.num_decode_seqs, shape.num_decode_context_tokens,
            shape.max_decode_context_tokens, shape.min_decode_context_tokens,
        )  # fmt: skip
        assert float(price_s).hex() == kernel.step_s(shape).hex()
