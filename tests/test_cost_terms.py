"""A kernel-table step price is one list of terms; a GPU is one table of data.

``KernelCost.terms`` lists the step's terms, each with its kind and source: the
price, the per-op breakdown and the sources come from that list, and the
ablations are a set of disabled terms. ``sim/hardware/gpus.toml`` holds one
table per GPU, from which the hardware presets, the kernel-table names, the
aiconfigurator names and the prices all come.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from sim.cost.base import StepShape
from sim.cost.kernels.artifact import load_cached
from sim.cost.kernels.config import resolve_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.memory_ops import LAYER_OPS, STEP_OPS, hardware_for_gpu
from sim.errors import ConfigError
from sim.hardware.specs import (
    AICONFIGURATOR_GPUS,
    GPUS_FILE,
    HARDWARE_PRESETS,
    SOURCE_GPU_NAMES,
    load_architecture,
    load_gpu_presets,
)
from sim.planning.pricing import GPU_PRICE_PER_HOUR

LLAMA = load_architecture("llama-3.1-8b")
SHAPES = [
    StepShape.build([(512, 0)], None),
    StepShape.build(None, [700, 1200, 90, 4000]),
    StepShape.build([(300, 2000), (64, 0)], [1500] * 40),
]


def artifact(name: str):  # type: ignore[no-untyped-def]
    return load_cached(resolve_kernel_artifact(name, None))


H100 = "h100_sxm-vllm-0.24.0-llama-3.1-8b"
PROFILE = "rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1"


def costs() -> list[KernelCost]:
    h100, profile = artifact(H100), artifact(PROFILE)
    return [
        KernelCost(LLAMA, h100),
        KernelCost(LLAMA, h100, tensor_parallel_size=2, pipeline_parallel_size=2),
        KernelCost(LLAMA, h100, disabled_terms=frozenset({"memory_ops"})),
        KernelCost(LLAMA, profile),
        KernelCost(LLAMA, profile, disabled_terms=frozenset({"mixed_attention", "skew"})),
    ]


def by_hand(cost: KernelCost, shape: StepShape) -> float:
    """The step's price summed from the terms as the module says: num_layers times
    (the per-layer terms, the attention last), plus the once-a-step terms."""
    tokens = shape.num_prefill_tokens + shape.num_decode_seqs
    seqs = shape.num_prefill_seqs + shape.num_decode_seqs
    dense = 0.0
    for t in cost.terms:
        if t.scope == "layer":
            dense += t.price(tokens)
    (attention,) = [t.price(shape) for t in cost.terms if t.scope == "attention"]
    step = 0.0
    for t in cost.terms:
        if t.scope == "step":
            step += t.price(tokens, seqs)
    return cost.arch.num_layers * (dense + attention) + step


def test_the_step_price_is_the_sum_of_the_listed_terms() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # past a table's edge: warned about elsewhere
        for cost in costs():
            for shape in SHAPES:
                assert cost.step_s(shape) == by_hand(cost, shape)  # the same sum, to the bit


def test_every_breakdown_row_is_a_listed_terms_with_its_source() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cost in costs():
            listed = {row: src for t in cost.terms for row, src in t.sources.items()}
            for shape in SHAPES:
                rows = cost.breakdown_s(shape)
                assert set(rows) <= set(listed)
                assert all(cost.op_source(row) == listed[row] for row in rows)
                assert sum(rows.values()) == pytest.approx(cost.step_s(shape), rel=1e-12)


def test_the_list_names_each_kind_of_term_and_its_source() -> None:
    tp2_pp2 = costs()[1]
    kinds = {t.kind for t in tp2_pp2.terms}
    assert {"gemm", "attention", "memory", "communication"} <= kinds
    sources = {row: src for t in tp2_pp2.terms for row, src in t.sources.items()}
    # No table timed a two-GPU all-reduce on this artifact's rows, nor a stage hop:
    # both are a ring over the link; the norms are bytes over the datasheet bandwidth.
    assert sources["pipeline_transfer"] == "link"
    assert sources["allreduce"] in ("link", "measured")
    assert {sources[op] for op in LAYER_OPS + STEP_OPS} == {"bandwidth"}
    one_gpu = costs()[0]
    assert {row: src for t in one_gpu.terms for row, src in t.sources.items()}[
        "allreduce"
    ] == "none"


def test_an_ablation_is_a_disabled_term_of_the_list() -> None:
    h100 = artifact(H100)
    full, without = (
        KernelCost(LLAMA, h100),
        KernelCost(LLAMA, h100, disabled_terms=frozenset({"memory_ops"})),
    )
    assert [t.kind for t in full.terms].count("memory") == 2  # per layer and once a step
    assert "memory" not in {t.kind for t in without.terms}
    assert "[no memory-bound ops]" in without.label
    # What the memory-bound ops add to a step is exactly the two memory terms.
    shape = SHAPES[2]
    tokens, seqs = shape.num_tokens, shape.num_prefill_seqs + shape.num_decode_seqs
    (layer, step) = [t for t in full.terms if t.kind == "memory"]
    extra = full.arch.num_layers * layer.price(tokens) + step.price(tokens, seqs)
    assert full.step_s(shape) - without.step_s(shape) == pytest.approx(extra, rel=1e-9)
    with pytest.raises(ConfigError, match="no term 'sampler' to disable"):
        KernelCost(LLAMA, h100, disabled_terms=frozenset({"sampler"}))


# -- a GPU is data --------------------------------------------------------------

NEW_GPU = """
[x9000]
peak_flops_per_s = 1200e12
memory_bandwidth_bytes_per_s = 5e12
memory_bytes = 128e9
nvidia_smi_memory_mib = 130000
link = "nvlink5"
aiconfigurator_gpu = "x9000_sxm"
kernel_table_gpus = ["X9000"]
price_per_hour_usd = 4.5
"""


def test_a_new_gpu_is_one_table_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(GPUS_FILE.read_text() + NEW_GPU)
    presets = load_gpu_presets(path)
    assert list(presets)[:-1] == list(HARDWARE_PRESETS)  # the shipped ones unchanged, in order
    gpu = presets["x9000"]
    spec = gpu.spec
    assert (spec.name, spec.peak_flops_per_s, spec.memory_bytes) == ("x9000", 1.2e15, 1.28e11)
    # CUDA's total: nvidia-smi's MiB less the 0.43 GiB the driver keeps.
    assert spec.cuda_memory_bytes == 130000 * 2**20 - 0.43 * 2**30
    assert spec.gpu_link == "nvlink5" and spec.compute_efficiency == 0.6
    assert gpu.table_gpus == {"x9000_sxm", "X9000"} and gpu.price_per_hour_usd == 4.5


def test_the_presets_names_and_prices_all_come_from_the_file() -> None:
    presets = load_gpu_presets()
    assert {name: gpu.spec for name, gpu in presets.items()} == dict(HARDWARE_PRESETS)
    assert dict(AICONFIGURATOR_GPUS) == {
        name: gpu.aiconfigurator_gpu for name, gpu in presets.items() if gpu.aiconfigurator_gpu
    }
    assert all(
        SOURCE_GPU_NAMES[name] == gpu.table_gpus for name, gpu in presets.items() if gpu.table_gpus
    )
    assert dict(GPU_PRICE_PER_HOUR) == {
        name: gpu.price_per_hour_usd for name, gpu in presets.items()
    }
    assert hardware_for_gpu("RTX4090") == HARDWARE_PRESETS["rtx-4090"]


def test_a_bad_table_is_one_line_naming_the_file_and_gpu(tmp_path: Path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(NEW_GPU.replace("5e12", "-5e12"))
    with pytest.raises(ConfigError) as error:
        load_gpu_presets(path)
    message = str(error.value)
    assert "\n" not in message
    assert "gpus.toml [x9000]" in message and "memory_bandwidth_bytes_per_s" in message
