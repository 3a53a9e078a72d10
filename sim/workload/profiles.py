"""Load profiles as the benchmark tools define them: ``workload: {profile: ...}``.

A convenience that expands, before validation, into the ``synthetic`` and
``closed_loop`` workloads, so every layer below sees only those two; the README's
"Load profiles" table gives each profile's GuideLLM / vLLM counterpart and what it
expands into (``synchronous`` and ``concurrent``: closed loops without think time;
``throughput``: every request at once; ``constant`` / ``poisson``: renewal arrivals
from the start, as GuideLLM draws them, not ``vllm bench serve``'s rescaled sums).
GuideLLM's ``sweep`` is several runs whose rates depend on the first two:
:func:`sweep_rates_per_s` gives those rates and ``sim.planning.profile_sweep`` runs
them; ``profile: sweep`` in a scenario's workload is refused with that pointer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Keys a profile takes besides the lengths and extent every workload takes.
_OWN_KEYS: dict[str, tuple[str, ...]] = {
    "synchronous": (),
    "concurrent": ("streams",),
    "throughput": ("max_concurrency",),
    "constant": ("rate_per_s", "max_concurrency"),
    "poisson": ("rate_per_s", "max_concurrency"),
}
PROFILES = tuple(_OWN_KEYS)
"""The profiles a scenario's workload may name (``sweep`` is several runs)."""
_PROFILE_KEYS = ("profile", "streams", "rate_per_s", "max_concurrency")
_NO_THINK = {"kind": "fixed", "value_s": 0.0}


def expand_profile(value: Any) -> Any:
    """A ``workload:`` mapping with ``profile:`` rewritten as the workload it means;
    anything else unchanged. Raises ValueError (one line) for a key the profile
    does not take, a missing one, or one it sets itself (``arrival``, ``num_users``)."""
    if not isinstance(value, dict) or "profile" not in value:
        return value
    profile = value["profile"]
    if "kind" in value:
        raise ValueError("give profile or kind, not both")
    if profile == "sweep":
        raise ValueError(
            "profile sweep is several runs (synchronous, throughput, then rates between "
            "their measured rates: sim.planning.profile_sweep runs them); give one "
            f"profile of {', '.join(PROFILES)} per scenario"
        )
    if profile not in _OWN_KEYS:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}, sweep")
    own = _OWN_KEYS[profile]
    for key in _PROFILE_KEYS[1:]:
        if key in value and key not in own:
            raise ValueError(f"{key} does not apply to profile {profile}")
    rest = {k: v for k, v in value.items() if k not in _PROFILE_KEYS}
    drive: dict[str, Any]
    if profile in ("synchronous", "concurrent"):
        if profile == "concurrent" and "streams" not in value:
            raise ValueError("profile concurrent needs streams (requests in flight)")
        num_users = value["streams"] if profile == "concurrent" else 1
        drive = {"kind": "closed_loop", "num_users": num_users, "think_time_s": _NO_THINK}
    else:
        if profile == "throughput":
            arrival: dict[str, Any] = {"kind": "constant", "rate_per_s": float("inf")}
        else:
            if "rate_per_s" not in value:
                raise ValueError(f"profile {profile} needs rate_per_s")
            arrival = {"kind": profile, "rate_per_s": value["rate_per_s"]}
            if profile == "poisson":
                arrival["spacing"] = "renewal"
        limit = {"max_concurrency": value["max_concurrency"]} if "max_concurrency" in value else {}
        drive = {"kind": "synthetic", "arrival": arrival} | limit
    for key in rest:
        if key in drive:  # it would replace the profile's own, silently
            raise ValueError(f"{key} is profile {profile}'s to set; give the profile or {key}")
    return drive | rest


def sweep_rates_per_s(
    synchronous_rate_per_s: float, throughput_rate_per_s: float, sweep_size: int
) -> list[float]:
    """The rates of a GuideLLM sweep's rate runs: ``sweep_size - 2`` of them, evenly
    spaced from the synchronous run's measured rate (excluded) to the throughput
    run's (included), as GuideLLM's ``SweepProfile`` places them."""
    if sweep_size < 2:
        raise ValueError(f"sweep_size must be >= 2, got {sweep_size}")
    if not throughput_rate_per_s > 0 or not synchronous_rate_per_s >= 0:
        raise ValueError("sweep rates need a positive throughput rate")
    grid = np.linspace(synchronous_rate_per_s, throughput_rate_per_s, sweep_size - 1)
    return [float(rate) for rate in grid[1:]]


# A workload's fields that say how it is driven: a new profile replaces them.
_DRIVE_KEYS = ("kind", "arrival", "duration_s", "num_users", "think_time_s", "max_concurrency")


def with_profile(workload: dict[str, Any], profile: str, **settings: Any) -> dict[str, Any]:
    """``workload`` (a drawn workload as a mapping) driven by ``profile`` instead: the
    same lengths, count and prefix groups, the profile's ``settings`` (None ones left
    out), expanded; ValueError for a trace, a workload not counted, or a profile refused."""
    if workload.get("kind") == "trace":
        raise ValueError("a trace keeps its own arrivals: a profile applies to drawn workloads")
    if workload.get("num_requests") is None:
        raise ValueError("a profile needs workload.num_requests (not duration_s)")
    kept = {k: v for k, v in workload.items() if k not in _DRIVE_KEYS and v is not None}
    chosen = {k: v for k, v in settings.items() if v is not None}
    return expand_profile({"profile": profile} | chosen | kept)
