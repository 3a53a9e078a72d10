"""Session 13's GuideLLM audit: requests a phase cut off unfinished (``incomplete``)
and the server's prefix-cache hits (``cached_tokens``) were read and then not said in
``validate``'s caveats, though the prediction replays neither."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from calibration.compare_measured import load_measured, validate
from sim.errors import ConfigError
from sim.hardware.specs import model_preset
from sim.scenario import load_scenario
from sim.validation.fit_runs import replay_runs
from sim.validation.importers import import_run
from sim.validation.match import RunFacts
from sim.workload.generate import shared_prefixes
from tests.test_import_validate import DATA, scenario_of


def report(tmp_path: Path, change: Any) -> Path:
    """The handwritten GuideLLM fixture (3 successful requests, 1 errored), changed."""
    document = json.loads((DATA / "guidellm_report.json").read_text())
    change(document["benchmarks"][0]["requests"])
    path = tmp_path / "guidellm.json"
    path.write_text(json.dumps(document))
    return path


def caveats(tmp_path: Path, path: Path) -> list[str]:
    scenario = scenario_of(tmp_path, path, "qwen3-8b")
    measured = load_measured(path, assume_device="h100", assume_model="qwen3-8b")
    caveats: list[str] = validate(load_scenario(scenario), measured, base_dir=tmp_path).caveats
    return caveats


def test_requests_cut_off_when_the_phase_ended_are_said_with_the_failed_ones(
    tmp_path: Path,
) -> None:
    said = [c for c in caveats(tmp_path, report(tmp_path, cut_two)) if "not replayed" in c]
    assert len(said) == 1  # one caveat for every request the replay lacks
    assert "1 of the run's 6 requests failed, 2 were cut off unfinished when" in said[0]


def test_prefix_cache_hits_with_no_shared_prefix_are_said(tmp_path: Path) -> None:
    def hits(requests: dict[str, Any]) -> None:
        requests["successful"][1]["cached_tokens"] = 16
        requests["successful"][2]["input_metrics"]["cached_tokens"] = 32

    said = caveats(tmp_path, report(tmp_path, hits))
    assert any("reported 48 prompt tokens as prefix-cache hits" in c for c in said)
    assert not any("prefix-cache" in c for c in caveats(tmp_path, DATA / "guidellm_report.json"))


def test_prefix_cache_hits_of_a_declared_shared_prefix_get_no_caveat(tmp_path: Path) -> None:
    def hits(requests: dict[str, Any]) -> None:
        for request in requests["successful"]:
            request["cached_tokens"] = 16

    run = import_run(report(tmp_path, hits), prefix_tokens=16)
    assert run.meta["num_cached_tokens"] == 16 * len(run.requests)
    assert RunFacts.from_summary(run.requests, run.meta).num_cached_tokens == 0


def cut_two(requests: dict[str, Any]) -> None:
    """Two requests cut off unfinished when the phase ended (with the fixture's 1 errored)."""
    requests["incomplete"] = [dict(requests["successful"][0], request_id=i) for i in "xy"]


def test_a_scenario_of_every_request_sent_cut_off_ones_included_is_taken(
    tmp_path: Path,
) -> None:
    path = report(tmp_path, cut_two)
    scenario = scenario_of(tmp_path, path, "qwen3-8b")
    trace = tmp_path / "imported" / "trace.csv"
    rows = trace.read_text().splitlines()
    trace.write_text("\n".join([*rows, *[rows[-1]] * 3]) + "\n")  # + 1 failed, 2 cut off
    measured = load_measured(path, assume_device="h100", assume_model="qwen3-8b")
    said = validate(load_scenario(scenario), measured, base_dir=tmp_path).caveats
    assert any("2 were cut off unfinished" in c for c in said)
    trace.write_text("\n".join([*rows, *[rows[-1]] * 2]) + "\n")  # one short of all sent
    with pytest.raises(ConfigError) as refused:
        validate(load_scenario(scenario), measured, base_dir=tmp_path)
    said_count = "3 requests measured (and 1 failed, 2 cut off unfinished), 5 in the scenario"
    assert said_count in str(refused.value)


def shared_scenario(tmp_path: Path, path: Path) -> Path:
    """A scenario replaying the run's requests with a 16-token shared prefix (its
    trace's hash ids), though the run itself declares none."""
    run = import_run(path, prefix_tokens=16)
    run.write(tmp_path / "imported")
    scenario = tmp_path / "shared.yaml"
    document = {
        "name": "shared",
        "model": "qwen3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "workload": run.replay_workload("imported/trace.csv"),
    }
    scenario.write_text(json.dumps(document))
    return scenario


def hits(requests: dict[str, Any]) -> None:
    for request in requests["successful"]:
        request["cached_tokens"] = 16


def test_prefix_cache_hits_get_no_caveat_where_the_scenario_shares_prefixes(
    tmp_path: Path,
) -> None:
    path = report(tmp_path, hits)
    scenario = load_scenario(shared_scenario(tmp_path, path))
    assert shared_prefixes(scenario.workload) is not None
    measured = load_measured(path, assume_device="h100", assume_model="qwen3-8b")
    assert measured.summary["num_cached_tokens"] == 48  # the run declares no prefix
    said = validate(scenario, measured, base_dir=tmp_path).caveats
    assert not any("prefix-cache" in c for c in said), said


def test_a_fit_with_a_scenario_sharing_prefixes_gives_no_cache_hit_caveat(
    tmp_path: Path,
) -> None:
    path = report(tmp_path, hits)
    model = model_preset("qwen3-8b")
    alone = replay_runs([str(path)], model, "h100", None, "multipliers").caveats
    assert any("prefix-cache hits" in c for c in alone)  # its own replay shares nothing
    scenario = str(shared_scenario(tmp_path, path))
    caveats = replay_runs([str(path)], model, None, scenario, "multipliers").caveats
    assert not any("prefix-cache" in c for c in caveats), caveats
