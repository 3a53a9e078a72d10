"""One folder, one record: ``validate --measured`` and ``calibrate --from-run`` read a
measured run's model, device and layout the same way, and refuse the same runs.

The two faces once had a loader each (``calibration.compare_measured.load_measured``,
``sim.validation.fit_runs.load_measured_run``): a hand-written ``run.json`` naming its
model and device at the top level named them to ``calibrate`` only, so ``validate``
refused the very folder ``calibrate`` fitted; an old measure folder of a CPU run (no
``hardware``, like the committed ``docs/validation/blackbox`` runs) was a CPU run to
``calibrate`` and an unknown device to ``validate``; a ``run.json``'s top-level
``engine_settings`` (as an endpoint folder writes it) was checked by ``calibrate`` only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibration.compare_measured import load_measured, validate
from sim.errors import ConfigError
from sim.hardware.specs import model_preset
from sim.scenario import load_scenario
from sim.validation.fit_runs import load_measured_run, replay_runs
from sim.validation.match import LAYOUT_SETTINGS, RunFacts
from sim.validation.runs import ImportedRun, request_table


def _requests() -> ImportedRun:
    """Four served requests (ids 0..3 in arrival order), nothing recorded about them."""
    arrival = np.array([0.0, 0.1, 0.25, 0.4])
    prompts, outputs = np.array([40, 64, 32, 50]), np.array([4, 6, 3, 5])
    table = request_table(arrival, arrival + 0.01, arrival + 0.05, arrival + 0.2, prompts, outputs)
    return ImportedRun(table, {})


def hand_written(folder: Path) -> Path:
    """A run.json written by hand: model, device and layout at its top level."""
    meta = {
        "format": "by-hand",
        "model": "tiny",
        "device": "cpu",
        "engine_settings": {"tensor_parallel_size": 1},
    }
    ImportedRun(_requests().requests, meta).write(folder)
    return folder


def imported(folder: Path) -> Path:
    """``servesim import-run``'s folder: what the run recorded under ``engine``."""
    engine = {"model": "tiny", "device_name": "cpu", "tensor_parallel_size": 1}
    ImportedRun(_requests().requests, {"format": "test", "engine": engine}).write(folder)
    return folder


def measure_folder(folder: Path) -> Path:
    """A ``servesim measure`` folder of a CPU run written before measure recorded its
    hardware preset (as the committed blackbox runs are), with its layout."""
    folder.mkdir(parents=True)
    _requests().requests.to_parquet(folder / "requests.parquet")
    summary = {
        "mode": "measured",
        "model": "tiny",
        "device": "cpu",
        "device_name": "Intel(R) Xeon(R) Processor",
        "engine_settings": dict.fromkeys(LAYOUT_SETTINGS, 1),
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


FOLDERS: dict[str, Callable[[Path], Path]] = {
    "hand-written run.json": hand_written,
    "imported run": imported,
    "measure folder": measure_folder,
}


def _scenario(tmp_path: Path, run: Path, **changes: Any) -> Path:
    """A scenario of ``run``'s own requests (its trace) on the tiny model and a CPU."""
    trace = tmp_path / "trace.csv"
    _requests().write(tmp_path / "trace-run")
    trace.write_text((tmp_path / "trace-run" / "trace.csv").read_text())
    doc: dict[str, Any] = {
        "name": "record",
        "seed": 0,
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": {"kind": "linear", "step_overhead_s": 0.01, "per_decode_seq_s": 1e-3},
        "scheduler": {"kind": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 256},
        "workload": {"kind": "trace", "format": "csv", "path": str(trace)},
        **changes,
    }
    path = tmp_path / f"scenario-{len(list(tmp_path.glob('scenario-*')))}.yaml"
    path.write_text(json.dumps(doc))
    return path


def _validate(scenario: Path, run: Path) -> None:
    validate(load_scenario(scenario), load_measured(run), base_dir=scenario.parent)


def _calibrate(scenario: Path, run: Path) -> None:
    model = model_preset(load_scenario(scenario).model.name)
    replay_runs([str(run)], model, None, str(scenario), "multipliers")


def _refusals(scenario: Path, run: Path) -> tuple[str, str]:
    """Both faces' one-line refusals of ``run`` against ``scenario``."""
    with pytest.raises(ConfigError) as by_validate:
        _validate(scenario, run)
    with pytest.raises(ConfigError) as by_calibrate:
        _calibrate(scenario, run)
    said = str(by_validate.value), str(by_calibrate.value)
    assert "\n" not in said[0] and said[0].startswith(f"--measured {run}")
    assert "\n" not in said[1] and said[1].startswith(f"--from-run {run}")
    return said


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_both_faces_record_the_same_model_device_and_layout(kind: str, tmp_path: Path) -> None:
    run = FOLDERS[kind](tmp_path / "run")
    seen = load_measured(run)
    fitted = load_measured_run(run)
    by_validate = RunFacts.from_summary(seen.requests, seen.summary)
    by_calibrate = RunFacts.from_summary(fitted.requests, fitted.meta)

    def record(facts: RunFacts) -> tuple[object, ...]:
        return facts.model, facts.hardware, facts.device_name, facts.engine_settings

    assert record(by_validate) == record(by_calibrate)
    assert by_validate.model == "tiny"
    assert by_validate.hardware is None and by_validate.device_name == "cpu"
    assert by_validate.engine_settings is not None
    assert by_validate.engine_settings["tensor_parallel_size"] == 1


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_both_faces_take_a_run_of_the_scenario(kind: str, tmp_path: Path) -> None:
    run = FOLDERS[kind](tmp_path / "run")
    scenario = _scenario(tmp_path, run)
    _validate(scenario, run)
    _calibrate(scenario, run)


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_both_faces_refuse_a_run_of_another_model_naming_both(kind: str, tmp_path: Path) -> None:
    run = FOLDERS[kind](tmp_path / "run")
    for said in _refusals(_scenario(tmp_path, run, model="smollm2-135m"), run):
        assert "tiny" in said and "smollm2-135m" in said


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_both_faces_refuse_a_run_on_other_hardware_naming_both(kind: str, tmp_path: Path) -> None:
    run = FOLDERS[kind](tmp_path / "run")
    for said in _refusals(_scenario(tmp_path, run, hardware="h100"), run):
        assert "'cpu'" in said or "ran on cpu," in said
        assert "h100" in said


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_both_faces_refuse_a_run_of_another_layout(kind: str, tmp_path: Path) -> None:
    run = FOLDERS[kind](tmp_path / "run")
    two = _scenario(tmp_path, run, parallelism={"tensor_parallel_size": 2})
    for said in _refusals(two, run):
        assert "tensor_parallel_size 1 measured, parallelism.tensor_parallel_size 2" in said
