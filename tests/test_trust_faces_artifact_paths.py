"""A scenario's relative ``engine.cpu_artifact`` is read from its own folder by every
face, as ``servesim run`` reads it: capacity's loads and a sweep's points validate
each point again, and must find it there too (not in the working directory)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sim import api
from sim.lab.runs import run_doc
from sim.metrics.slo_targets import SloTarget
from sim.planning.capacity import Searcher
from sim.planning.sweep_exec import run_point
from sim.scenario import load_scenario

ARTIFACT = (
    Path(__file__).resolve().parent.parent
    / "docs/validation/blackbox/engine-cpu/rtx4090-llama-3.1-8b.json"
)
DOC = {
    "name": "fitted_cpu",
    "model": "llama-3-8b",
    "hardware": "rtx-4090",
    "cost": {"kind": "roofline"},
    "engine": {"cpu_artifact": "cpu.json", "max_model_len_tokens": 4096},
    "workload": {
        "kind": "synthetic",
        "num_requests": 60,
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 200},
        "output_tokens": {"kind": "fixed", "tokens": 20},
    },
}


@pytest.fixture
def scenario_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "scenario"
    folder.mkdir()
    shutil.copy(ARTIFACT, folder / "cpu.json")
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(DOC))
    monkeypatch.chdir(tmp_path)  # the working directory holds no cpu.json
    return path


def test_a_capacity_load_is_the_run_of_its_scenario(scenario_file: Path) -> None:
    scenario = load_scenario(scenario_file)
    expected = api.run(scenario_file).summary["median_ttft_ms"]
    searcher = Searcher(scenario, [SloTarget("ttft", "median", 1e4)], num_seeds=1)
    assert searcher.evaluate(2.0).mean_of("median_ttft_ms") == pytest.approx(expected)


def test_a_sweep_point_is_the_run_of_its_scenario(scenario_file: Path) -> None:
    scenario = load_scenario(scenario_file)
    expected = api.run(scenario_file).summary["median_ttft_ms"]
    task = {"scenario": scenario.model_dump(mode="json"), "base_dir": str(scenario_file.parent)}
    assert run_point(task)["median_ttft_ms"] == pytest.approx(expected)


def test_the_labs_run_is_the_run_of_its_scenario(scenario_file: Path) -> None:
    expected = api.run(scenario_file).summary["median_ttft_ms"]
    doc = yaml.safe_load(scenario_file.read_text())
    assert run_doc(doc, scenario_file.parent).summary["median_ttft_ms"] == pytest.approx(expected)
