"""Every cost model's decode runs give ``step_s``'s bits, step for step.

Skip-ahead prices a run of decode steps with ``decode_run_s`` (where the public
table does not cover the run: ``sim.fast.run_ends``; ``tests/test_run_ends.py``
holds the table's runs to the same loop) where step-by-step execution calls
``step_s`` once a step on shapes it builds; a run is the same
either way only if the run's shapes are the ones step by step builds (every
context one longer a step), wrappers (overhead fits, scaling) included.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from decode_runs import by_loop, run_prices
from hypothesis import given, settings
from hypothesis import strategies as st
from skew_costs import skewed_kernel_cost

from sim.cost.base import CostModel
from sim.cost.calibrated import CalibratedCost, load_artifact
from sim.cost.config import shipped_artifacts
from sim.cost.engine_cpu import EngineCpu, EngineCpuConfig, EngineCpuCost
from sim.cost.fitted import FitParameters, FittedCost, ScaledCost
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.cost.linear import LinearCost
from sim.cost.roofline import RooflineCost
from sim.hardware.specs import hardware_preset, load_architecture, model_preset

DATA = Path(__file__).parent / "data" / "kernels"
AIC = from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data")
PROFILE = profile_artifact(DATA / "profile" / "bf16" / "tp1")


def roofline() -> CostModel:
    return RooflineCost(model_preset("llama-3-8b"), hardware_preset("h100"))


def kernels(artifact: KernelArtifact = AIC, tp: int = 1, pp: int = 1) -> CostModel:
    arch = load_architecture("llama-3.1-8b")
    return KernelCost(arch, artifact, tensor_parallel_size=tp, pipeline_parallel_size=pp)


def linear() -> CostModel:
    return LinearCost(step_overhead_s=0.002, per_decode_seq_s=1.3e-4, per_context_token_s=7e-9)


def engine_cpu(base: CostModel, overlapped: bool, per_seq_s: float = 1.3e-5) -> CostModel:
    config = EngineCpuConfig(
        per_step_s=4e-4,
        scheduler_per_seq_s=per_seq_s,
        sampling_per_seq_s=0.0,
        per_token_s=1e-7,
        non_overlapped_s=1e-4,
    )
    return EngineCpuCost(base, EngineCpu(config, overlapped, "test"))


COSTS: dict[str, Callable[[], CostModel]] = {
    "roofline": roofline,
    "kernels": kernels,
    "kernels-tp2-pp2": lambda: kernels(tp=2, pp=2),
    "kernels-profile": lambda: kernels(PROFILE),
    "kernels-profile-skew": skewed_kernel_cost,
    "engine-cpu-overlapped-on-kernels-profile-skew": lambda: engine_cpu(skewed_kernel_cost(), True),
    "linear": linear,
    "overhead-fit-on-roofline": lambda: ScaledCost(roofline(), 1.13, 1.7e-3, 3.1e-5, source="log"),
    "overhead-fit-on-kernels": lambda: ScaledCost(kernels(), 0.97, 2.3e-3, 1.1e-5, source="log"),
    "overhead-fit-on-linear": lambda: ScaledCost(linear(), 1.1, 5e-4, 2e-4, source="log"),
    "scaled-kernels": lambda: ScaledCost(kernels(), 1.37),
    "fitted-on-kernels": lambda: FittedCost(kernels(), FitParameters(1.9e-3, 1.21, 0.93)),
    "fitted-on-roofline": lambda: FittedCost(roofline(), FitParameters(4e-4, 0.8, 1.17)),
    "calibrated": lambda: CalibratedCost.from_artifact(load_artifact(shipped_artifacts()[0])),
    "engine-cpu-overlapped-on-roofline": lambda: engine_cpu(roofline(), True),
    "engine-cpu-serial-on-kernels": lambda: engine_cpu(kernels(), False),
    # CPU longer than the GPU step at large batches: max() takes either side.
    "engine-cpu-heavy-overlapped-on-kernels": lambda: engine_cpu(kernels(), True, 2e-4),
}


@pytest.mark.parametrize("name", sorted(COSTS))
@settings(max_examples=60, deadline=None)
@given(num_seqs=st.integers(1, 256), context=st.integers(0, 200_000), num_steps=st.integers(1, 40))
def test_decode_steps_give_step_s_bits(
    name: str, num_seqs: int, context: int, num_steps: int
) -> None:
    cost = COSTS[name]()
    context = max(context, num_seqs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # past a kernel table: warned about elsewhere
        fast = run_prices(cost, num_seqs, context, num_steps)
        slow = by_loop(cost, num_seqs, context, num_steps)
    assert fast.tolist() == slow.tolist()


@pytest.mark.parametrize("name", sorted(COSTS))
@settings(max_examples=40, deadline=None)
@given(
    contexts=st.lists(st.integers(1, 12_000), min_size=1, max_size=256),
    num_steps=st.integers(1, 40),
)
def test_decode_steps_of_an_uneven_batch_give_step_s_bits(
    name: str, contexts: list[int], num_steps: int
) -> None:
    """The batch's longest and shortest context ride along (each one longer a step)."""
    cost = COSTS[name]()
    spread = {"max_context_tokens": max(contexts), "min_context_tokens": min(contexts)}
    args = (len(contexts), sum(contexts), num_steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = run_prices(cost, *args, **spread)
        slow = by_loop(cost, *args, **spread)
    assert fast.tolist() == slow.tolist()
