"""How many requests a workload asks for, and whether a run of them fits in memory.

A run keeps every request: the generated arrays, the engine's records and
the per-request results table. Measured on chat.yaml (``/usr/bin/time``, peak
resident memory at 20,000 and 80,000 requests: 224 MB and 385 MB) that is
~2.7 KB per request above a ~170 MB base. CPU time per request
(``benchmarks/sim_speed.py``, December 2026): ~0.15 ms for short fixed-length
requests at 8 req/s, ~0.3 ms for chat.yaml at 25 req/s or 16 replicas. A
billion requests would therefore need terabytes: such a run is refused up
front, with the estimate and the largest count that fits, instead of
filling memory for minutes and then failing.

Replicas cost too, whatever the requests: each keeps its engine core, step
log and frontend (~13 KB, measured with 1,000 and 3,000 replicas of 1,000
KV blocks: peak resident memory over the replicas), and with prefix caching
(``engine.enable_prefix_caching``) its pool keeps ~56 B per KV block
(``tracemalloc`` of ``PrefixCachingPool`` at 100,000 and 400,000 blocks:
reference counts, cache keys and vLLM's free-block queue), built at
~2.5-4.5e-7 s per block. A replica also costs ~1.4-1.8 ms of simulation
(round-robin, 1,000 requests over 1,000 and 3,000 replicas). So 10,000 replicas
of chat.yaml's 215,056 blocks need ~120 GB and ~20 min before the first
request: refused or announced the same way.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import TYPE_CHECKING

from sim.errors import ConfigError

if TYPE_CHECKING:  # sim.workload.generate imports this package's modules
    from sim.workload.generate import WorkloadConfig

BYTES_PER_REQUEST = 3_000  # measured ~2.7 KB (module docstring), rounded up
BASE_BYTES = 200_000_000  # interpreter, libraries, the first chunk of results, one replica
SECONDS_PER_REQUEST = 3e-4  # the slower of the measured cases (module docstring)
SLOW_RUN_S = 600.0  # warn when a run is expected to take longer than this
BYTES_PER_REPLICA = 20_000  # measured ~13 KB (module docstring), rounded up
BYTES_PER_CACHED_BLOCK = 60  # measured ~56 B per block of a prefix-caching pool
SECONDS_PER_REPLICA = 2e-3  # measured 1.4-1.8 ms
SECONDS_PER_CACHED_BLOCK = 5e-7  # building a prefix-caching pool, measured 2.5-4.5e-7 s


def expected_num_requests(workload: WorkloadConfig) -> int | None:
    """Requests the workload will generate (``None``: a trace of unknown length)."""
    if workload.kind == "trace":
        return workload.max_requests
    if workload.num_requests is not None:
        return int(workload.num_requests)
    # A synthetic workload given by its duration (a closed loop has num_requests).
    if workload.duration_s is not None:
        return math.ceil(workload.duration_s * workload.arrival.rate_per_s)
    return None


def available_bytes() -> int | None:
    """Memory this machine can still give (``MemAvailable``), ``None`` if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def check_run_size(
    workload: WorkloadConfig,
    memory_bytes: int | None = None,
    *,
    num_replicas: int = 1,
    num_kv_blocks: int = 0,
    prefix_caching: bool = False,
) -> None:
    """Refuse a run that cannot fit in memory; warn about one that will take long.

    ``memory_bytes`` defaults to :func:`available_bytes`. ``num_replicas`` of
    ``num_kv_blocks`` KV blocks each (a prefix-caching pool when ``prefix_caching``)
    count beside the requests (module docstring).
    """
    num = expected_num_requests(workload)
    requests_bytes = 0 if num is None else num * BYTES_PER_REQUEST
    cached = num_kv_blocks if prefix_caching else 0
    replica_bytes = BYTES_PER_REPLICA + cached * BYTES_PER_CACHED_BLOCK
    # BASE_BYTES holds one replica's engine (measured with one); its blocks count.
    replicas_bytes = (num_replicas - 1) * BYTES_PER_REPLICA + num_replicas * (
        cached * BYTES_PER_CACHED_BLOCK
    )
    memory = available_bytes() if memory_bytes is None else memory_bytes
    needed = BASE_BYTES + requests_bytes + replicas_bytes
    if workload.kind == "trace":
        field = "max_requests"
    else:
        field = "num_requests" if workload.num_requests is not None else "duration_s"
    # What each replica costs, said as it was estimated.
    each = f"~{replica_bytes / 1e6:.2g} MB each" + (
        f": prefix caching keeps ~{BYTES_PER_CACHED_BLOCK} B for each of their "
        f"{num_kv_blocks:,} KV blocks"
        if cached
        else ""
    )
    if memory is not None and needed > memory:
        if num is not None and requests_bytes >= replicas_bytes:
            fits = max(0, (memory - BASE_BYTES - replicas_bytes) // BYTES_PER_REQUEST)
            # Advice that can be followed: "at most 0 requests" is not a run.
            advice = (
                f"lower workload.{field} to fit at most {fits:,} requests, or run "
                "several seeds of fewer requests"
                if fits > 0
                else f"the {num_replicas:,} replicas alone leave no room for requests: "
                "lower cluster.num_replicas as well"
            )
            raise ConfigError(
                f"workload: {num:,} requests need about {needed / 1e9:,.1f} GB of memory "
                f"(~{BYTES_PER_REQUEST / 1e3:g} KB each), more than the {memory / 1e9:.1f} GB "
                f"available; {advice}"
            )
        fits = max(0, (memory - BASE_BYTES - requests_bytes + BYTES_PER_REPLICA) // replica_bytes)
        smaller = " (or engine.num_kv_blocks), or set engine.enable_prefix_caching: false"
        advice = (
            f"lower cluster.num_replicas to at most {fits:,}"
            if fits > 0
            else f"even one replica does not fit beside the requests: lower workload.{field}"
        )
        raise ConfigError(
            f"cluster: {num_replicas:,} replicas need about {needed / 1e9:,.1f} GB of memory "
            f"({each}), more than the {memory / 1e9:.1f} GB available; "
            f"{advice}{smaller if cached else ''}"
        )
    requests_s = 0.0 if num is None else num * SECONDS_PER_REQUEST
    replica_s = SECONDS_PER_REPLICA + cached * SECONDS_PER_CACHED_BLOCK
    replicas_s = num_replicas * replica_s
    if requests_s + replicas_s <= SLOW_RUN_S:
        return
    hours = (requests_s + replicas_s) / 3600
    if requests_s >= replicas_s:
        warnings.warn(
            f"workload: {num:,} requests will take about {hours:.1f} h to simulate "
            f"(~{SECONDS_PER_REQUEST * 1e3:g} ms each); lower workload.{field} for a quicker run",
            stacklevel=2,
        )
    else:
        building = f", building their {num_kv_blocks:,}-block prefix caches" if cached else ""
        warnings.warn(
            f"cluster: {num_replicas:,} replicas will take about {hours:.1f} h to simulate "
            f"(~{replica_s:.2g} s each{building}); lower cluster.num_replicas for a quicker run",
            stacklevel=2,
        )
