"""Session 13's audit of where a scenario's relative paths are read from.

A scenario names files by path: its model (a Hugging Face folder), ``engine.cpu_artifact``,
``cost.artifact`` (and the kernels' ``architecture`` and ``data_dir``), a trace's and an
empirical length's ``path``. Validating read the first two against the folder given to
validation, building the run read the others against the folder given to ``api.run``:

- ``api.run(path, base_dir=X)`` read ``engine.cpu_artifact`` from the file's folder and
  the cost artifact and length files from ``X``;
- ``api.run(load_scenario(path))`` (and ``engine_for``, ``cost_model_for``, ``replay``
  of one) read ``engine.cpu_artifact`` from the file's folder and the rest from the
  working directory;
- ``api.run(scenario, base_dir=X)`` kept the engine CPU work read where the scenario
  was validated;
- ``servesim plan``'s best.yaml, written into ``--out``, kept a relative ``cost.artifact``
  (and a trace's ``path``) relative: run from there, it named no file.

A validated scenario now carries the folder its paths are read against
(``Scenario.base_dir``), and every build step reads them from there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from sim import api
from sim.scenario import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
CPU_ARTIFACT = ROOT / "docs/validation/blackbox/engine-cpu/rtx4090-llama-3.1-8b.json"
KERNELS = ROOT / "sim/cost/kernels/artifacts/rtx4090-vllm-0.19.0-llama-3.1-8b-tp1.json.gz"
DOC = {
    "name": "paths",
    "model": "llama-3-8b",
    "hardware": "rtx-4090",
    "cost": {"kind": "kernels", "source": "path", "artifact": "kernels.json.gz"},
    "engine": {"cpu_artifact": "cpu.json", "max_model_len_tokens": 4096},
    "workload": {
        "kind": "synthetic",
        "num_requests": 40,
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "prompt_tokens": {"kind": "empirical", "path": "lengths.csv", "column": "tokens"},
        "output_tokens": {"kind": "fixed", "tokens": 20},
    },
}


def scenario_folder(folder: Path, yaml_only: bool = False) -> Path:
    """``folder/s.yaml``, with every file it names beside it unless ``yaml_only``."""
    folder.mkdir()
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(DOC))
    if not yaml_only:
        shutil.copy(CPU_ARTIFACT, folder / "cpu.json")
        shutil.copy(KERNELS, folder / "kernels.json.gz")
        (folder / "lengths.csv").write_text("tokens\n100\n300\n700\n")
    return path


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory that holds none of the files."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_api_runs_base_dir_anchors_every_path_of_a_file(tmp_path: Path, elsewhere: Path) -> None:
    expected = api.run(scenario_folder(tmp_path / "files")).summary
    bare = scenario_folder(tmp_path / "bare", yaml_only=True)
    # The files are beside the base folder given, none beside the YAML.
    assert api.run(bare, base_dir=tmp_path / "files").summary == expected


def test_a_loaded_scenario_reads_its_paths_from_its_own_folder(
    tmp_path: Path, elsewhere: Path
) -> None:
    path = scenario_folder(tmp_path / "files")
    expected = api.run(path).summary
    scenario = load_scenario(path)
    assert api.run(scenario).summary == expected
    assert scenario.base_dir == path.parent
    assert api.cost_model_for(scenario).label == api.engine_for(scenario).cost.label


def test_a_scenario_object_run_with_another_base_dir_reads_every_path_there(
    tmp_path: Path, elsewhere: Path
) -> None:
    expected = api.run(scenario_folder(tmp_path / "files")).summary
    # Validated against the working directory, whose cpu.json is another (a thousand
    # times the per-step work), then run against the folder of the scenario's own files: its
    # engine CPU work too is the one there.
    other = json.loads(CPU_ARTIFACT.read_text())
    other["cpu"]["per_step_s"] *= 1000
    (elsewhere / "cpu.json").write_text(json.dumps(other))
    scenario = scenario_from_dict(dict(DOC), "doc")
    assert api.run(scenario, base_dir=tmp_path / "files").summary == expected


def test_plans_best_yaml_anchors_every_path_the_scenario_names(tmp_path: Path) -> None:
    # best.yaml is written into --out: each relative path must still name the file
    # beside the scenario (it named the model, lengths and CPU artifact, not the cost's
    # files or a trace). Shipped names and presets stay names.
    from sim.planning.plan_report import _anchor_paths

    folder = tmp_path / "scenario"
    scenario_folder(folder)
    (folder / "trace.jsonl").write_text("")
    doc = yaml.safe_load((folder / "s.yaml").read_text())
    doc["workload"] = {"kind": "trace", "path": "trace.jsonl", "format": "mooncake"}
    doc["cost"]["architecture"] = "llama-3-8b"
    _anchor_paths(doc, folder)
    assert doc["cost"]["artifact"] == str((folder / "kernels.json.gz").resolve())
    assert doc["workload"]["path"] == str((folder / "trace.jsonl").resolve())
    assert doc["engine"]["cpu_artifact"] == str((folder / "cpu.json").resolve())
    assert (doc["model"], doc["cost"]["architecture"]) == ("llama-3-8b", "llama-3-8b")
    shipped = {"kind": "kernels", "artifact": "rtx4090-vllm-0.19.0-llama-3.1-8b-tp1"}
    named = {"cost": dict(shipped), "workload": {}}
    _anchor_paths(named, folder)
    assert named["cost"] == shipped
