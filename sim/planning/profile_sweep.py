"""GuideLLM's ``sweep`` profile: synchronous, throughput, then rates between.

A ``synchronous`` and a ``throughput`` benchmark, then ``sweep_size - 2`` rate ones
evenly spaced between their measured request rates
(``sim.workload.profiles.sweep_rates_per_s``), each a phase of one scenario: its
lengths, count, prefix groups and seed, the throughput and rate phases under its
``max_concurrency`` if any. ``servesim run --profile sweep`` simulates the phases and
``measure --endpoint --profile sweep`` measures them, both through ``profile_sweep``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from sim import api
from sim.errors import ConfigError, format_error
from sim.scenario import Scenario
from sim.workload.generate import WorkloadConfig
from sim.workload.profiles import sweep_rates_per_s, with_profile

RunPhase = Callable[[str, dict[str, Any], Scenario], Mapping[str, Any]]
"""Runs one phase (its folder ``phase-N``, load and scenario); returns its summary."""


@dataclass(frozen=True)
class SweepPhase:
    """One benchmark of a sweep: its folder, load (a profile and its settings), summary."""

    folder: str
    load: dict[str, Any]
    summary: Mapping[str, Any]

    @property
    def rate_per_s(self) -> float:
        """Completed requests per second (GuideLLM's ``request_throughput``; 0 for none)."""
        return float(self.summary.get("request_throughput") or 0.0)


def driven(scenario: Scenario, load: Mapping[str, Any], where: str) -> Scenario:
    """``scenario`` with its workload driven by ``load`` (a profile and its settings,
    None ones left out: ``with_profile``); ConfigError ``"{where}: reason"``."""
    settings = {k: v for k, v in load.items() if k != "profile"}
    try:
        mapping = with_profile(scenario.workload.model_dump(), load["profile"], **settings)
    except ValueError as error:  # the profile's own settings refused
        raise ConfigError(f"{where}: {error}") from None
    try:
        workload = TypeAdapter(WorkloadConfig).validate_python(mapping)
    except ValidationError as error:
        raise ConfigError(format_error(where, error, mapping, "workload")) from None
    return scenario.model_copy(update={"workload": workload})


def _simulated(folder: str, load: dict[str, Any], scenario: Scenario) -> Mapping[str, Any]:
    return api.run(scenario).summary


def profile_sweep(
    scenario: Scenario,
    sweep_size: int = 10,
    strategy: Literal["constant", "poisson"] = "constant",
    run: RunPhase = _simulated,
) -> list[SweepPhase]:
    """The sweep's phases in GuideLLM's order (``sweep_size`` of them, or fewer when
    the throughput phase is no faster than the synchronous one); ``run`` runs one
    (by default simulates it with ``api.run``; a caller passes its own to write each
    phase's folder or to measure a server)."""
    if sweep_size < 2:
        raise ConfigError(f"sweep_size must be >= 2, got {sweep_size}")
    workload = scenario.workload
    limit = None if workload.kind == "closed_loop" else workload.max_concurrency
    cap: dict[str, Any] = {} if limit is None else {"max_concurrency": limit}
    phases: list[SweepPhase] = []

    def phase(load: dict[str, Any]) -> float:
        folder = f"phase-{len(phases)}"
        where = f"sweep, {load['profile']}"
        phases.append(SweepPhase(folder, load, run(folder, load, driven(scenario, load, where))))
        return phases[-1].rate_per_s

    synchronous = phase({"profile": "synchronous"})
    throughput = phase({"profile": "throughput"} | cap)
    if not throughput > synchronous:
        return phases  # nothing between the two (GuideLLM stops too)
    for rate in sweep_rates_per_s(synchronous, throughput, sweep_size):
        phase({"profile": strategy, "rate_per_s": rate} | cap)
    return phases


def write_phases(out: Path, source: str, phases: list[SweepPhase]) -> Path:
    """``out/phases.json``: the command that ran the sweep and each phase's folder, load
    and request rate (``validate --measured out/phase-N`` reads a measured one)."""
    rows = [
        {"folder": p.folder, "load": p.load, "request_throughput": p.rate_per_s} for p in phases
    ]
    path = out / "phases.json"
    path.write_text(json.dumps({"source": source, "phases": rows}, indent=2) + "\n")
    return path
