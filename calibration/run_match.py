"""Is a measured run the scenario's? Checked before ``validate`` predicts it.

``validate`` replays the measured requests through the simulator, so a run
measured from another scenario (another model, hardware, request count or
lengths) would still produce a report: one that compares the wrong things.
Each difference is listed in one line and the run is refused. A run cut short
(``status`` other than complete: a time limit, Ctrl-C) may hold fewer
requests than the scenario, but those it holds must be the scenario's first.
Torch-free: it reads the run's summary and request table only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ConfigError
from sim.scenario import Scenario
from sim.validation.match import same_model
from sim.workload.generate import ClosedLoopWorkload, generate_open_loop


def _field(summary: dict[str, Any], key: str, expected: str) -> list[str]:
    value = summary.get(key)
    return [] if value is None or value == expected else [f"{key} {value} (scenario: {expected})"]


def _lengths(name: str, measured: np.ndarray, expected: np.ndarray, ids: np.ndarray) -> list[str]:
    differ = np.flatnonzero(measured != expected)
    if differ.size == 0:
        return []
    first = int(differ[0])
    return [
        f"{differ.size} requests' {name} differ (request {int(ids[first])}: "
        f"{int(measured[first])}, scenario: {int(expected[first])})"
    ]


def mismatches(
    scenario: Scenario, summary: dict[str, Any], requests: pd.DataFrame, base_dir: Path
) -> list[str]:
    """How the measured run differs from ``scenario`` (empty: it is the scenario's)."""
    model = summary.get("model")
    found = (
        []
        if model is None or same_model(scenario.model.name, str(model))
        else [f"model {model} (scenario: {scenario.model.name})"]
    )
    found += _field(summary, "hardware", scenario.hardware.name)
    if isinstance(scenario.workload, ClosedLoopWorkload):
        return found  # users' requests depend on the server: only the model and hardware
    work = generate_open_loop(scenario.workload, np.random.default_rng(scenario.seed), base_dir)
    num_expected, num_measured = len(work.arrival_s), len(requests)
    complete = summary.get("status", "complete") == "complete"
    if num_measured > num_expected or (complete and num_measured != num_expected):
        found.append(f"{num_measured} requests (scenario: {num_expected})")
    rows = requests.sort_values("request_id").head(min(num_measured, num_expected))
    ids = rows["request_id"].to_numpy()
    if len(ids) and not np.array_equal(ids, np.arange(len(ids))):
        found.append("request ids are not 0, 1, 2, ... as a measure run writes them")
        return found
    n = len(ids)
    for name in ("num_prompt_tokens", "num_output_tokens"):
        expected = np.asarray(getattr(work, name))[:n]
        found += _lengths(name, rows[name].to_numpy(), expected, ids)
    return found


def check_matches(
    scenario: Scenario, summary: dict[str, Any], requests: pd.DataFrame, base_dir: Path, where: str
) -> None:
    """A one-line ConfigError listing every difference, if there is one."""
    found = mismatches(scenario, summary, requests, base_dir)
    if found:
        raise ConfigError(
            f"{where}: not a run of this scenario: "
            + "; ".join(found)
            + " (measure it again, or give the scenario and --set it was measured with)"
        )
