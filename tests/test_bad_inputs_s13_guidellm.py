"""Session 13's GuideLLM audit: requests a phase cut off unfinished (``incomplete``)
and the server's prefix-cache hits (``cached_tokens``) were read and then not said in
``validate``'s caveats, though the prediction replays neither."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from calibration.compare_measured import load_measured, validate
from sim.scenario import load_scenario
from sim.validation.importers import import_run
from sim.validation.match import RunFacts
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
    def cut_two(requests: dict[str, Any]) -> None:
        requests["incomplete"] = [dict(requests["successful"][0], request_id=i) for i in "xy"]

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
