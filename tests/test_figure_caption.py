"""Every figure names what ran and what priced it: scenario, model, GPU, cost model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.figure import Figure

from sim import api
from sim.cost.fitted import ScaledCost
from sim.cost.label import cost_model_tag
from sim.metrics import figure_draw
from sim.metrics.figure_data import figure_caption, wrap_caption
from sim.metrics.report import prepare_figures
from sim.planning.sweep_plots import MAX_CAPTION_VALUES, sweep_caption
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "scenarios" / "chat.yaml"
PUBLIC = ROOT / "scenarios" / "public" / "rtx4090_llama31_8b.yaml"


def label_of(path: Path, *overrides: str) -> str:
    return api.cost_model_for(load_scenario(path, list(overrides))).label


def test_a_roofline_reads_as_a_guess_and_kernel_tables_as_measured() -> None:
    roofline = cost_model_tag(label_of(CHAT, "cost={kind: roofline}"))
    assert roofline.startswith("roofline") and "guess" in roofline
    kernels = cost_model_tag(label_of(PUBLIC))
    assert kernels.startswith("kernel tables (measured")
    assert "LLMServingSim" in kernels and "RTX4090" in kernels  # the tables' source and GPU
    assert "guess" not in kernels and "engine CPU" not in kernels
    linear = cost_model_tag(label_of(CHAT, "cost={kind: linear, step_overhead_s: 0.001}"))
    assert linear.startswith("linear") and "hand" in linear


def test_kernel_tables_with_a_transferred_estimate_say_so() -> None:
    # The L40S has aiconfigurator's tables but no measured mixed-decode factor: the
    # RTX 4090's is carried over by FLOP/B balance, an estimate the tag must not hide.
    pytest.importorskip("aiconfigurator_core")
    label = label_of(CHAT, "hardware=l40s", "cost={kind: kernels}")
    assert "transferred estimate" in label
    assert cost_model_tag(label).startswith("kernel tables (measured, partly estimated: ")
    assert "partly estimated" not in cost_model_tag(label_of(PUBLIC))


def test_a_scaled_model_keeps_its_factor_and_its_kind() -> None:
    base = api.cost_model_for(load_scenario(PUBLIC))
    tag = cost_model_tag(ScaledCost(base, factor=1.05).label)
    assert tag == cost_model_tag(base.label) + ", steps x1.05"


def test_an_unknown_label_is_shown_as_it_is() -> None:
    assert cost_model_tag("my-own-model v2") == "my-own-model v2"


def test_a_runs_caption_names_its_scenario_model_gpu_and_cost_model() -> None:
    result = api.run(CHAT, ["workload.num_requests=30", "cost={kind: roofline}"])
    caption = figure_caption(result.summary)
    scenario = result.scenario
    for part in (scenario.name, scenario.model.name, scenario.hardware.name, "guess"):
        assert part in caption
    assert caption == figure_caption({**result.summary, "mean_ttft_ms": 1.0})  # header keys only
    assert figure_caption({}).count("?") == 4  # a summary without them says so


def test_every_run_figure_carries_the_caption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = api.run(CHAT, ["workload.num_requests=30"])
    figures = prepare_figures(result.figure_job(tmp_path))
    assert figures.caption == figure_caption(result.summary)
    drawn: list[Figure] = []
    save = figure_draw.save_png

    def keep(fig: Figure, path: str | Path) -> Path:
        drawn.append(fig)
        return save(fig, path)

    monkeypatch.setattr(figure_draw, "save_png", keep)
    paths = figure_draw.draw_prepared(figures)
    assert len(drawn) == len(paths) == 3
    for fig in drawn:
        texts = [t.get_text() for t in fig.texts]
        assert figures.caption in texts


def test_a_sweeps_caption_lists_what_its_runs_varied() -> None:
    row: dict[str, Any] = {
        "scenario": "chat",
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost_model": "roofline:llama-3-8b@h100 (uncalibrated)",
    }
    one = sweep_caption(pd.DataFrame([row, row]))
    assert one == figure_caption(row)
    two = sweep_caption(pd.DataFrame([row, {**row, "hardware": "a100-80gb"}]))
    assert "h100 | a100-80gb" in two
    many = [{**row, "scenario": f"s{i}"} for i in range(MAX_CAPTION_VALUES + 1)]
    assert sweep_caption(pd.DataFrame(many)).startswith(f"{MAX_CAPTION_VALUES + 1} scenarios · ")


def test_a_long_caption_is_wrapped_at_its_breaks() -> None:
    caption = " · ".join(["scenario chat", "a" * 30, "b" * 30, "c" * 30])
    assert wrap_caption(caption, 20.0) == caption  # fits on one line
    lines = wrap_caption(caption, 5.0).split("\n")
    assert len(lines) > 1 and " · ".join(lines) == caption  # cut only at the breaks


def test_sweep_figures_carry_the_caption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.planning.sweep_plots as sweep_plots

    drawn: list[Figure] = []
    save = sweep_plots.save_figure

    def keep(fig: Figure, path: Path) -> Path:
        drawn.append(fig)
        return save(fig, path)

    monkeypatch.setattr(sweep_plots, "save_figure", keep)
    table = pd.DataFrame(
        {
            "config": ["a", "a"],
            "point": [0, 1],
            "request_throughput": [1.0, 2.0],
            "p99_ttft_ms": [10.0, 20.0],
            "p99_tpot_ms": [5.0, 6.0],
            "slo_met": [True, True],
            "usd_per_1k_requests": [2.0, 1.0],
            "scenario": "chat",
            "model": "llama-3-8b",
            "hardware": "h100",
            "cost_model": "linear",
        }
    )
    paths = sweep_plots.plot_sweep(table, table, (), None, tmp_path)
    assert len(paths) == len(drawn) == 2
    for fig in drawn:
        assert fig.get_suptitle() == sweep_caption(table)
