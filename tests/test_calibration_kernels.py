"""``servesim calibrate --kernels``: operator tables timed here, in the shared artifact format."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from calibration.kernel_tables import KERNEL_GRIDS, measure_tables
from sim.cli import main
from sim.cost.base import StepShape
from sim.cost.kernels.artifact import load_kernel_artifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.memory_ops import MemoryOps
from sim.cost.kernels.ops import layer_shapes
from sim.hardware.specs import TINY_MODEL, hardware_preset

ARCH = TINY_MODEL


@pytest.fixture(scope="module")
def artifact_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kernels") / "tiny.json.gz"
    code = main(["calibrate", "--model", "tiny", "--kernels", "--out", str(path)])
    assert code == 0
    return path


def test_the_tables_cover_every_operator_the_model_runs(artifact_path: Path) -> None:
    artifact = load_kernel_artifact(artifact_path)
    grid = KERNEL_GRIDS["small"]
    shapes = layer_shapes(ARCH, 1)
    gemm = artifact.tables["gemm"]
    pairs = {*shapes.gemms.values(), shapes.lm_head}
    ns, ks = {n for n, _ in pairs}, {k for _, k in pairs}
    # A rectangular grid: every n with every k, at every token count.
    assert len(gemm) == len(ns) * len(ks) * len(grid.tokens)
    assert set(gemm["n"]) == ns and set(gemm["k"]) == ks and set(gemm["m"]) == set(grid.tokens)
    for name in ("context_attention", "generation_attention"):
        table = artifact.tables[name]
        assert set(table["num_heads"]) == {ARCH.num_attention_heads}
        assert set(table["num_kv_heads"]) == {ARCH.num_kv_heads}
        assert len(table) == len(grid.batches) * len(grid.lengths)
    ops = artifact.tables["per_sequence"]
    assert set(ops["op"]) == {"lm_head", "sampler"}
    assert set(ops["num_seqs"]) == set(grid.batches)


def test_provenance_names_this_machine_and_the_model(artifact_path: Path) -> None:
    p = load_kernel_artifact(artifact_path).provenance
    assert p.model == "tiny" and p.gpu == "cpu" and p.framework == "torch"
    assert p.dtype == "float32" and p.tool == "calibration.kernel_tables"
    assert "eager" in p.kernels["attention"]


def test_a_kernel_cost_prices_steps_from_them(artifact_path: Path) -> None:
    artifact = load_kernel_artifact(artifact_path)
    # The tables time no norm or activation: those come from this machine's bandwidth.
    cpu = hardware_preset("cpu-2core")
    cost = KernelCost(ARCH, artifact, hardware=cpu)
    gemm = artifact.tables["gemm"]
    # One decode sequence: every GEMM at m = 1, straight from the table rows.
    one = gemm[gemm["m"] == 1].set_index(["n", "k"])["latency_s"]
    shapes = layer_shapes(ARCH, 1)
    dense = sum(float(one[(n, k)]) for n, k in shapes.gemms.values())
    dense += MemoryOps.build(
        ARCH, shapes, cpu, activation_dtype_bytes=4.0, kv_dtype_bytes=4.0
    ).layer_s(1.0)
    assert cost.dense_layer_s(1) == pytest.approx(dense, rel=1e-12)
    small = cost.step_s(StepShape(num_decode_seqs=1, num_decode_context_tokens=16))
    large = cost.step_s(StepShape.build([(64, 0)]))
    assert small > 0 and large > 0


def test_bad_grids_and_devices_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "x.json.gz")
    assert (
        main(["calibrate", "--model", "tiny", "--kernels", "--grid", "compact", "--out", out]) == 2
    )
    assert "kernel grids are small, gpu" in capsys.readouterr().err
    assert not Path(out).exists()


def test_measure_tables_reports_progress() -> None:
    seen: list[str] = []
    artifact = measure_tables(ARCH, "cpu", "fp32", "small", progress=seen.append)
    assert seen == ["gemm", "attention", "lm head and sampler"]
    assert artifact.has("gemm")
