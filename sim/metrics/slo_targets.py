"""SLOs on run statistics, as capacity planning and sweeps state them.

``ttft_p99_ms=500``: "the run's p99 TTFT (summary key ``p99_ttft_ms``) is at most
500 ms". Unlike a scenario's per-request ``slo:`` (goodput), a target judges a run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from sim.errors import ConfigError
from sim.metrics.stats import Slo

Metric = Literal["ttft", "tpot", "itl", "e2el"]
Stat = Literal["mean", "median", "p90", "p99"]
METRICS: tuple[Metric, ...] = ("ttft", "tpot", "itl", "e2el")
STATS: tuple[Stat, ...] = ("mean", "median", "p90", "p99")
VALID_FORMS = "<metric>_<stat>_ms=<limit> with metric in ttft|tpot|itl|e2el and stat in " + (
    "mean|median|p90|p99, e.g. ttft_p99_ms=500"
)


@dataclass(frozen=True, slots=True)
class SloTarget:
    """``stat`` of ``metric`` over a run must be at most ``limit_ms``."""

    metric: Metric
    stat: Stat
    limit_ms: float

    @property
    def name(self) -> str:
        """The user-facing spelling, e.g. ``ttft_p99_ms``."""
        return f"{self.metric}_{self.stat}_ms"

    @property
    def summary_key(self) -> str:
        """The key in a run summary, e.g. ``p99_ttft_ms``."""
        return f"{self.stat}_{self.metric}_ms"

    def __str__(self) -> str:
        return f"{self.name}={self.limit_ms:g}"


def parse_target(name: str, value: Any, where: str = "--slo") -> SloTarget:
    """One target from a name such as ``tpot_p99_ms`` and a limit in ms."""
    parts = name.strip().split("_")
    if len(parts) != 3 or parts[2] != "ms" or parts[0] not in METRICS or parts[1] not in STATS:
        raise ConfigError(f"{where}: unknown SLO {name!r}; expected {VALID_FORMS}")
    try:
        limit_ms = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {name} limit {value!r} is not a number") from None
    if not (limit_ms > 0 and math.isfinite(limit_ms)):
        raise ConfigError(f"{where}: {name} limit must be a positive number of ms, got {value}")
    return SloTarget(cast(Metric, parts[0]), cast(Stat, parts[1]), limit_ms)


def parse_targets(pairs: Iterable[str], where: str = "--slo") -> tuple[SloTarget, ...]:
    """Targets from ``name=limit`` strings; a name given twice is an error."""
    targets: dict[str, SloTarget] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"{where}: expected name=limit, got {pair!r}; form: {VALID_FORMS}")
        target = parse_target(name, value, where)
        if target.name in targets:
            raise ConfigError(f"{where}: {target.name} given twice")
        targets[target.name] = target
    return tuple(targets.values())


def targets_from_mapping(mapping: Mapping[str, Any], where: str) -> tuple[SloTarget, ...]:
    """Targets from a ``{name: limit}`` mapping (e.g. a sweep file's ``slo:``)."""
    return tuple(parse_target(str(name), value, where) for name, value in mapping.items())


def metric_value(summary: Mapping[str, Any], target: SloTarget) -> float:
    """The statistic ``target`` judges, from a run summary: ``inf`` without a completed
    request (it fails every target), 0 for a missing sample otherwise (e.g. no TPOT:
    no request can have broken that target)."""
    value = summary.get(target.summary_key)
    if value is not None and not (isinstance(value, float) and math.isnan(value)):
        return float(value)
    return math.inf if not summary.get("completed") else 0.0


def meets(summary: Mapping[str, Any], targets: Iterable[SloTarget]) -> bool:
    """True when one run's summary satisfies every target."""
    return all(metric_value(summary, t) <= t.limit_ms for t in targets)


def per_request_slo(targets: Iterable[SloTarget]) -> Slo | None:
    """The per-request SLO for goodput: each metric's largest limit (ITL has no
    per-request form); ``None`` if nothing remains."""
    limits: dict[str, float] = {}
    for target in targets:
        if target.metric == "itl":
            continue
        key = f"{target.metric}_ms"
        limits[key] = max(limits.get(key, 0.0), target.limit_ms)
    return Slo.model_validate(limits) if limits else None
