"""Kernel tables without a decode-attention row for a multi-head model (as many KV heads as
query heads: Llama-2, OPT) derive it from rows of fewer heads, and say so; ``kind: auto``
falling back from tables that lack a row says so in the run's caveats (issue 39, item 12).

The derivation (``sim.cost.kernels.tables.derived_decode_source``): decode attention is
memory-bound, so ``b`` sequences of 32 KV heads cost what ``4 b`` sequences of 8 KV heads
cost (the same KV bytes). The checks below build tables from a memory-bound formula, so
the expected time is the formula at the target's own KV bytes, not a number from a run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from compiled_runs import assert_identical, simulate

from sim import api
from sim.cli import main
from sim.cost.base import StepShape
from sim.cost.config import AutoCostConfig, build_cost_model
from sim.cost.kernels import aiconfigurator
from sim.cost.kernels import config as kernels_config
from sim.cost.kernels.artifact import (
    KernelArtifact,
    KernelProvenance,
    load_cached,
    resolve_kernel_artifact,
)
from sim.cost.kernels.config import KernelsCostConfig, build_kernels, kernel_auto_choice
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.slice import export_slice
from sim.cost.kernels.tables import attention_grids
from sim.cost.label import cost_model_tag
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.errors import ConfigError
from sim.hardware.specs import (
    HARDWARE_PRESETS,
    ModelSpec,
    hardware_preset,
    model_preset,
)
from sim.metrics.report import format_summary_table
from sim.metrics.vllm_result import restate_percentiles
from sim.scenario import scenario_from_dict
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.workload.generate import RequestArrays

BANDWIDTH_BYTES_PER_S = 3.0e12
FIXED_S = 4e-6  # a kernel launch


def kv_bytes(num_kv_heads: int, head_dim: int = 128) -> float:
    """K and V of one token in one layer, bf16."""
    return 2.0 * num_kv_heads * head_dim * 2.0


def memory_bound_rows(*layouts: tuple[int, int]) -> pd.DataFrame:
    """generation_attention rows of ``(num_heads, num_kv_heads)`` layouts at head_dim
    128, each the launch plus its KV bytes at ``BANDWIDTH_BYTES_PER_S``."""
    rows = [
        (h, kv, 128, b, t, FIXED_S + b * t * kv_bytes(kv) / BANDWIDTH_BYTES_PER_S)
        for h, kv in layouts
        for b in (1, 4, 16, 64, 256, 1024)
        for t in (63, 1023, 4095, 16383)
    ]
    columns = ["num_heads", "num_kv_heads", "head_dim", "batch_size", "kv_tokens", "latency_s"]
    return pd.DataFrame(rows, columns=columns)


def tables_of(*layouts: tuple[int, int], context: tuple[int, int] = (32, 32)) -> KernelArtifact:
    """An artifact of context attention for ``context`` and generation attention
    for ``layouts`` (memory_bound_rows)."""
    h, kv = context
    ctx = pd.DataFrame(
        [(h, kv, 128, b, s, 1e-5 * b * s) for b in (1, 8) for s in (128, 4096)],
        columns=["num_heads", "num_kv_heads", "head_dim", "batch_size", "isl_tokens",
                 "latency_s"],
    )  # fmt: skip
    provenance = KernelProvenance(
        source="test tables", licence="-", gpu="h100_sxm", framework="vllm",
        framework_version="0",
    )  # fmt: skip
    tables = {"context_attention": ctx, "generation_attention": memory_bound_rows(*layouts)}
    return KernelArtifact(provenance, tables)


# -- the derivation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "kv_tokens"), [(1, 1023), (4, 4095), (16, 16383), (3, 2000), (200, 777)]
)
def test_32_heads_cost_what_their_kv_bytes_take(batch: int, kv_tokens: int) -> None:
    # Only 8/8 rows: 32 heads read 4x their KV bytes, so 4x the batch's time. Bilinear
    # interpolation of a function bilinear in (batch, KV) is exact at any point inside.
    grids = attention_grids(tables_of((8, 8)), 32, 32, 128)
    expected_s = FIXED_S + batch * kv_tokens * kv_bytes(32) / BANDWIDTH_BYTES_PER_S
    assert grids.decode(float(batch), float(kv_tokens)) == pytest.approx(expected_s, rel=1e-9)
    assert grids.derived is not None
    assert "8/8" in grids.derived and "4x the batch" in grids.derived
    assert "32/32 not measured" in grids.derived


def test_a_timed_layout_is_not_derived() -> None:
    grids = attention_grids(tables_of((8, 8), (32, 32)), 32, 32, 128)
    assert grids.derived is None
    expected_s = FIXED_S + 16 * 4095 * kv_bytes(32) / BANDWIDTH_BYTES_PER_S
    assert grids.decode(16.0, 4095.0) == pytest.approx(expected_s, rel=1e-12)


def test_the_nearest_multi_head_rows_are_read() -> None:
    # 2/2 and 8/8 timed: 32/32 reads 8/8 (4x), 4/4 is as near to both and reads the
    # larger, 8/8, at half the batch.
    artifact = tables_of((2, 2), (8, 8), context=(4, 4))
    grids = attention_grids(artifact, 4, 4, 128)
    assert grids.derived is not None and grids.derived.startswith(
        "decode attention derived from 8/8-head rows at 0.5x the batch"
    )
    expected_s = FIXED_S + 64 * 1023 * kv_bytes(4) / BANDWIDTH_BYTES_PER_S
    assert grids.decode(64.0, 1023.0) == pytest.approx(expected_s, rel=1e-9)


def test_without_multi_head_rows_the_grouped_rows_of_its_query_heads_are_read() -> None:
    grids = attention_grids(tables_of((32, 8), (32, 4)), 32, 32, 128)
    assert grids.derived is not None and "from 32/8-head rows at 4x" in grids.derived
    expected_s = FIXED_S + 8 * 1023 * kv_bytes(32) / BANDWIDTH_BYTES_PER_S
    assert grids.decode(8.0, 1023.0) == pytest.approx(expected_s, rel=1e-9)


def test_a_grouped_layout_without_rows_is_still_refused() -> None:
    # 28 query heads over 4 KV heads (Qwen2.5-7B): not multi-head, nothing derived.
    with pytest.raises(ConfigError, match="generation_attention has no rows for num_heads=28"):
        attention_grids(tables_of((8, 8), context=(28, 4)), 28, 4, 128)


# -- a kernel cost with a derived row ---------------------------------------------------

SHIPPED = "h100_sxm-vllm-0.24.0-llama-3.1-8b"
# Llama-3.1-8B's shapes with 32 KV heads (Llama-2-7B's head layout); named as the slice's
# model so that its tables may price it.
MHA_SPEC = model_preset("llama-3-8b").model_copy(
    update={"name": "llama-3.1-8b", "num_kv_heads": 32}
)


def mha_cost() -> KernelCost:
    """A kernel cost of ``MHA_SPEC`` from the shipped H100 slice (32/8 rows only), with
    context rows for 32/32 and 8/8 generation rows added (the 32/8 rows renamed: the
    same KV heads, the same bytes)."""
    shipped = load_cached(resolve_kernel_artifact(SHIPPED, None))
    tables = dict(shipped.tables)
    ctx = tables["context_attention"]
    tables["context_attention"] = ctx.assign(num_kv_heads=32)
    gen = tables["generation_attention"]
    tables["generation_attention"] = gen.assign(num_heads=8)
    artifact = KernelArtifact(shipped.provenance, tables)
    return KernelCost(MHA_SPEC, artifact, hardware=hardware_preset("h100"))


def test_the_label_and_the_op_s_source_say_derived() -> None:
    cost = mha_cost()
    assert cost.derived and "derived from 8/8-head rows at 4x" in cost.derived[0]
    assert cost.derived[0] in cost.label
    assert cost.op_source("decode_attention") == "derived"
    assert cost.op_source("qkv_proj") == "measured" and cost.op_source("add_norm") == "bandwidth"
    # Its decodes: the 8/8 rows (the shipped 32/8 rows) at 4x the batch.
    shipped = KernelCost(
        model_preset("llama-3-8b").model_copy(update={"name": "llama-3.1-8b"}),
        load_cached(resolve_kernel_artifact(SHIPPED, None)),
        hardware=hardware_preset("h100"),
    )
    assert cost.decode_attention_s(8, 8 * 2048) == pytest.approx(
        shipped.decode_attention_s(32, 32 * 2048), rel=1e-9
    )
    assert cost.op_source("decode_attention") != shipped.op_source("decode_attention")


def test_the_compiled_loop_plays_a_derived_cost_to_the_bit() -> None:
    cost = mha_cost()
    rng = np.random.default_rng(7)
    work = RequestArrays(
        np.cumsum(rng.exponential(1 / 30.0, 200)),
        rng.integers(20, 900, 200),
        rng.integers(1, 120, 200),
    )
    core = CoreConfig(
        ContinuousConfig(max_num_seqs=32, max_num_batched_tokens=1024).build, 100_000, 16, 1024
    )
    replica = ReplicaConfig(core, cost, NO_FRONTEND)
    reference, reference_order, played = simulate(work, replica, "never")
    assert not played
    raw, order, played = simulate(work, replica, "python")
    assert played
    assert_identical(raw, reference)
    assert order == reference_order


def test_cost_breakdown_lists_decode_attention_as_derived() -> None:
    from sim.cli.cost_breakdown import breakdown, format_breakdown

    shape = StepShape.build([(256, 0)], [1024] * 16)
    result = {"step": "256p+16d", "step_words": "", **breakdown(mha_cost(), shape)}
    assert result["op_sources"]["decode_attention"] == "derived"
    assert result["op_sources"]["prefill_attention"] == "measured"
    line = next(x for x in format_breakdown(result).splitlines() if x.startswith("decode_att"))
    assert line.split()[1] == "derived"


# -- caveats: a run says what it rests on ----------------------------------------------

AIC_DATA = Path(__file__).parent / "data" / "kernels" / "aic" / "systems" / "data"
PRO = HARDWARE_PRESETS["rtx-pro-6000"]
# 32 KV heads on the RTX PRO 6000 test database (Llama's head layouts only: no 32/32
# context rows), which auto falls back from.
MHA_8B = model_preset("llama-3-8b").model_copy(update={"name": "mha-8b", "num_kv_heads": 32})


@pytest.fixture
def test_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(kernels_config, "installed_data_dir", lambda: AIC_DATA)
    monkeypatch.setattr(aiconfigurator, "installed_data_dir", lambda: AIC_DATA)
    kernel_auto_choice.cache_clear()
    yield
    kernel_auto_choice.cache_clear()


def test_a_derived_row_is_a_caveat() -> None:
    from sim.cost.config import cost_caveats  # (new: imported here, so that the file
    # loads on a tree without it and each test fails on its own)

    cost = mha_cost()
    caveats = cost_caveats(KernelsCostConfig(), cost, MHA_SPEC, hardware_preset("h100"))
    assert caveats == [f"cost: {cost.derived[0]}: an estimate"]


def test_auto_falling_back_from_tables_that_lack_a_row_is_a_caveat(test_database: None) -> None:
    from sim.cost.config import cost_caveats

    cost = build_cost_model(AutoCostConfig(), MHA_8B, PRO)
    assert not isinstance(cost, KernelCost)
    [caveat] = cost_caveats(AutoCostConfig(), cost, MHA_8B, PRO)
    assert caveat.startswith("cost: auto: kernel tables do not cover it: ")
    assert "context_attention has no rows for num_heads=32, num_kv_heads=32" in caveat
    assert caveat.endswith("; the roofline") and "\n" not in caveat
    # Tables that cover the model, or none for the GPU at all: nothing to say here (a
    # roofline's label says "uncalibrated").
    llama = model_preset("llama-3-8b")
    assert cost_caveats(AutoCostConfig(), build_cost_model(AutoCostConfig(), llama, PRO),
                        llama, PRO) == []  # fmt: skip
    cpu = HARDWARE_PRESETS["cpu-2core"]
    small = model_preset("smollm2-135m")
    assert cost_caveats(AutoCostConfig(), build_cost_model(AutoCostConfig(), small, cpu),
                        small, cpu) == []  # fmt: skip


def _scenario(model: ModelSpec, hardware: str) -> Any:
    return scenario_from_dict(
        {
            "name": "mha",
            "model": model.model_dump(),
            "hardware": hardware,
            "cost": {"kind": "auto"},
            "scheduler": {"kind": "continuous", "max_num_seqs": 16,
                          "max_num_batched_tokens": 2048},
            "engine": {"max_model_len_tokens": 2048},
            "workload": {
                "kind": "synthetic", "num_requests": 20,
                "arrival": {"kind": "poisson", "rate_per_s": 5},
                "prompt_tokens": {"kind": "fixed", "tokens": 200},
                "output_tokens": {"kind": "fixed", "tokens": 10},
            },
        }
    )  # fmt: skip


def test_the_summary_and_its_printout_carry_the_cost_caveat(test_database: None) -> None:
    from sim.cost.config import cost_caveats

    scenario = _scenario(MHA_8B, "rtx-pro-6000")
    result = api.run(scenario)
    caveats = result.summary["caveats"]
    cost, model = api.cost_model_for(scenario), api.model_for(scenario)
    expected = cost_caveats(scenario.cost, cost, model, scenario.hardware, scenario.parallelism)
    assert len(expected) == 1 and expected[0] in caveats
    assert "roofline" in result.summary["cost_model"]
    assert f"CAVEAT: {expected[0]}" in format_summary_table(result.summary)
    # Percentiles restated (--metric-percentiles): the cost's caveat stays.
    raw = result.raw
    restated = restate_percentiles(
        result.summary, raw.records, raw.step_table, raw.extra_itl_s, (50, 95)
    )
    assert expected[0] in restated["caveats"]
    assert not any(c.startswith("p99_") for c in restated["caveats"])


# -- the installed aiconfigurator database (Llama-2-7B on the H100) ---------------------

HAS_DATABASE = importlib.util.find_spec("aiconfigurator_core") is not None
LLAMA2_7B = ModelSpec(
    name="llama-2-7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
    num_kv_heads=32, intermediate_size=11008, vocab_size=32000,
)  # fmt: skip


@pytest.mark.skipif(not HAS_DATABASE, reason="aiconfigurator-core is not installed")
def test_llama_2_on_the_h100_is_priced_by_derived_tables_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel_auto_choice.cache_clear()
    h100 = hardware_preset("h100")
    explicit = build_kernels(KernelsCostConfig(), LLAMA2_7B, h100)  # refused before
    assert explicit.derived and "32/32 not measured" in explicit.derived[0]
    auto, why = kernel_auto_choice(LLAMA2_7B, h100)
    assert auto is not None and explicit.derived[0] in why
    # A slice exported for it keeps the rows the derivation reads, and prices the same.
    out = export_slice("h100_sxm", LLAMA2_7B, tmp_path / "l2.json")
    sliced = load_cached(out)
    assert "decode attention of 32/32 heads derived from 8/8" in sliced.provenance.notes
    from_slice = KernelCost(LLAMA2_7B, sliced, hardware=h100)
    shape = StepShape.build([(512, 1024)], [1500] * 40)
    assert from_slice.step_s(shape) == explicit.step_s(shape)
    # The run's summary and printout.
    scenario = _scenario(LLAMA2_7B, "h100")
    folder = tmp_path / "run"
    doc = folder / "s.yaml"
    folder.mkdir()
    import yaml

    doc.write_text(yaml.safe_dump(scenario.model_dump(mode="json", exclude_none=True)))
    argv = ["run", str(doc), "--out", str(folder / "out"), "--figure-process", "no"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"CAVEAT: cost: {explicit.derived[0]}: an estimate" in printed


def test_the_plan_and_serve_say_partly_derived() -> None:
    cost = mha_cost()
    # serve's line, the figures' caption and plan's column (test_plan's
    # test_a_plan_words_each_cost_source_as_every_face_does): one tag (sim.cost.label)
    assert cost_model_tag(cost.label).startswith("kernel tables (measured, partly derived: ")
    source = cost.artifact.label  # the tables' source, as the label names it
    derived = f"kernel tables (measured, partly derived: {source}, h100_sxm)"
    assert cost_model_tag(cost.label) == derived
    shipped = KernelCost(
        model_preset("llama-3-8b").model_copy(update={"name": "llama-3.1-8b"}),
        load_cached(resolve_kernel_artifact(SHIPPED, None)),
        hardware=hardware_preset("h100"),
    )  # every row it reads measured
    assert cost_model_tag(shipped.label) == f"kernel tables (measured: {source}, h100_sxm)"
    # One GPU: no all-reduce runs (0 s), so none is measured.
    assert cost.op_source("allreduce") == "none"
