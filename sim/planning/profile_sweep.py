"""GuideLLM's ``sweep`` profile, simulated: synchronous, throughput, then rates between.

GuideLLM's sweep runs a ``synchronous`` benchmark and a ``throughput`` one, takes
their measured request rates (completed requests per second), and then runs
``sweep_size - 2`` rate benchmarks (``constant`` or ``poisson``) at rates evenly
spaced from the synchronous rate (excluded) to the throughput rate (included)
(``sim.workload.profiles.sweep_rates_per_s``). A scenario's workload names one
run, so the sweep is this function over a scenario: the scenario's request
lengths, count and prefix groups, each phase under its own profile, the
throughput and rate phases under the workload's ``max_concurrency`` if it has
one, every phase from the scenario's seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from sim import api
from sim.api.result import Result
from sim.errors import ConfigError, format_error
from sim.scenario import Scenario
from sim.workload.generate import WorkloadConfig
from sim.workload.profiles import sweep_rates_per_s, with_profile


@dataclass(frozen=True)
class SweepPhase:
    """One benchmark of a sweep: its load (a profile with its settings) and its run."""

    load: dict[str, Any]
    result: Result

    @property
    def rate_per_s(self) -> float:
        """Completed requests per second (GuideLLM's ``request_throughput``)."""
        return float(self.result.summary["request_throughput"])


def _driven(scenario: Scenario, load: dict[str, Any]) -> Scenario:
    settings = {k: v for k, v in load.items() if k != "profile"}
    mapping = with_profile(scenario.workload.model_dump(), load["profile"], **settings)
    try:
        workload = TypeAdapter(WorkloadConfig).validate_python(mapping)
    except ValidationError as error:
        where = f"sweep, {load['profile']}"
        raise ConfigError(format_error(where, error, mapping, "workload")) from None
    return scenario.model_copy(update={"workload": workload})


def profile_sweep(
    scenario: Scenario,
    sweep_size: int = 10,
    strategy: Literal["constant", "poisson"] = "constant",
    run: Callable[[Scenario], Result] = api.run,
) -> list[SweepPhase]:
    """The sweep's phases in GuideLLM's order (``sweep_size`` of them, or fewer when
    the throughput phase is no faster than the synchronous one); ``run`` simulates
    one scenario (``api.run``; a caller may pass its own options)."""
    if sweep_size < 2:
        raise ConfigError(f"sweep_size must be >= 2, got {sweep_size}")
    try:
        workload = scenario.workload
        limit = None if workload.kind == "closed_loop" else workload.max_concurrency
        cap: dict[str, Any] = {} if limit is None else {"max_concurrency": limit}
        first_two = [{"profile": "synchronous"}, {"profile": "throughput"} | cap]
        phases = [SweepPhase(load, run(_driven(scenario, load))) for load in first_two]
    except ValueError as error:  # a trace, or no num_requests
        raise ConfigError(f"sweep: {error}") from None
    synchronous, throughput = (phase.rate_per_s for phase in phases)
    if not throughput > synchronous:
        return phases  # nothing between the two (GuideLLM stops too)
    for rate in sweep_rates_per_s(synchronous, throughput, sweep_size):
        load = {"profile": strategy, "rate_per_s": rate} | cap
        phases.append(SweepPhase(load, run(_driven(scenario, load))))
    return phases
