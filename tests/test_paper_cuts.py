"""Paper cuts of issue 14: messages, help, progress and plot labels say what is true."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.figure import Figure
from test_capacity import md1_doc
from test_sweep import write_sweep

import sim.planning.sweep_plots as sweep_plots
from calibration.cli import torch_missing
from sim.cli import build_parser, main
from sim.planning.capacity import CapacitySearch, LoadKnob, LoadPoint
from sim.planning.capacity_report import fleet_for, format_capacity
from sim.planning.sweep import load_sweep, run_sweep
from sim.planning.sweep_report import per_point
from sim.validation.predict import Latencies
from sim.validation.report import plot_cdfs

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


# --- 11: one message for a missing torch -----------------------------------------------------


def test_calibrate_and_measure_give_the_same_install_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    calibrate, measure = str(torch_missing("calibrate")), str(torch_missing("measure"))
    assert calibrate.replace("calibrate", "X", 1) == measure.replace("measure", "X", 1)
    assert "pip install -e '.[calibrate]'" in calibrate
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "calibration.measure", None)
    out = str(tmp_path / "o")
    assert main(["calibrate", "--model", "tiny", "--out", str(tmp_path / "a.json")]) == 2
    assert capsys.readouterr().err.strip() == f"servesim: error: {calibrate}"
    tiny = str(SCENARIOS / "validate_tiny_cpu.yaml")
    assert main(["measure", tiny, "--out", out, "-q"]) == 2
    assert capsys.readouterr().err.strip() == f"servesim: error: {measure}"


# --- 12: replicas and routers are simulated ----------------------------------------------------


def test_the_fleet_note_does_not_claim_routing_is_unsimulated() -> None:
    record = {"request_throughput": 9.9, "total_output_tokens": 100, "completed": 10}
    result = CapacitySearch(LoadKnob("rate", "k", 1.0), (), (0, 1))
    result.points = [LoadPoint(10.0, [record, record], {}, {}, "pass", 0.5)]
    result.lower, result.upper, result.estimate = 10.0, 12.0, 10.0
    result.at_estimate = result.points[0]
    text = format_capacity(result, "x", fleet_for(result, 95.0, 1, None), 1, None)
    assert "not simulated yet" not in text
    assert "perfect load balancer" in text and "cluster:" in text


# --- 13: calibrate --help is plain text and explains the grids ---------------------------------


def test_calibrate_help_has_no_markup_and_explains_every_grid() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = sub.choices["calibrate"].format_help()  # type: ignore[index]
    assert "``" not in text
    flat = " ".join(text.split())
    for grid, what in [
        ("small:", "(CI)"),
        ("default:", "the tiny model on CPU"),
        ("compact:", "smollm2-135m"),
        ("ci:", "validation test"),
        ("gpu:", "for a GPU"),
    ]:
        assert grid in flat and what in flat


# --- 14: the capacity progress bar ends full ---------------------------------------------------


def test_the_capacity_progress_bar_ends_at_its_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "md1.yaml"
    path.write_text(yaml.safe_dump(md1_doc(100)))
    argv = ["capacity", str(path), "--slo", "ttft_mean_ms=5", "--seeds", "1", "--jobs", "1"]
    assert main([*argv, "--max-sims", "40", "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    done = last.split("|")[-1].split()[0]  # e.g. "6/6"
    num, total = done.split("/")
    assert num == total and int(total) < 40  # stopped early, bar full


# --- 15: plots say what their axes are and keep legends off the curves ------------------------


def test_latency_vs_load_says_its_axis_is_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[Figure] = []
    save = sweep_plots.save_figure

    def keep(fig: Figure, path: Path) -> Path:
        figures.append(fig)
        return save(fig, path)

    monkeypatch.setattr(sweep_plots, "save_figure", keep)
    plan = load_sweep(write_sweep(tmp_path))
    table = run_sweep(plan, tmp_path / "out", jobs=1).table
    points = per_point(table, plan.targets, plan.override_keys)
    sweep_plots.plot_latency_vs_load(points, table, plan.targets, plan.load_key, tmp_path / "l.png")
    axes = figures[0].axes
    assert all(ax.get_yscale() == "log" and "log scale" in ax.get_ylabel() for ax in axes)


def test_the_validation_cdf_legend_covers_no_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[Any] = []
    monkeypatch.setattr(plt, "close", figures.append)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({k: rng.uniform(0.01, 0.2, 50) for k in ("ttft_s", "tpot_s", "e2el_s")})
    runs = {"measured": Latencies(frame, rng.uniform(0.01, 0.02, 200))}
    runs["predicted"] = Latencies(frame * 1.1, rng.uniform(0.01, 0.02, 200))
    plot_cdfs(runs, tmp_path / "cdf.png", "t")
    fig = figures[0]
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    renderer = fig.canvas.get_renderer()
    legend_box = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert not legend_box.overlaps(ax.get_window_extent(renderer))
    plt.close(fig)
