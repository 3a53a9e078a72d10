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
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

from sim.errors import ConfigError

BYTES_PER_REQUEST = 3_000  # measured ~2.7 KB (module docstring), rounded up
BASE_BYTES = 200_000_000  # interpreter, libraries, the first chunk of results
SECONDS_PER_REQUEST = 3e-4  # the slower of the measured cases (module docstring)
SLOW_RUN_S = 600.0  # warn when a run is expected to take longer than this


def expected_num_requests(workload: Any) -> int | None:
    """Requests the workload will generate (``None``: a trace of unknown length)."""
    count = getattr(workload, "num_requests", None)
    if count is not None:
        return int(count)
    if workload.kind == "trace":
        return getattr(workload, "max_requests", None)
    duration_s = getattr(workload, "duration_s", None)
    rate_per_s = getattr(getattr(workload, "arrival", None), "rate_per_s", None)
    if duration_s is not None and rate_per_s is not None:
        return math.ceil(duration_s * rate_per_s)
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


def check_run_size(workload: Any, memory_bytes: int | None = None) -> None:
    """Refuse a run that cannot fit in memory; warn about one that will take long.

    ``memory_bytes`` defaults to :func:`available_bytes`.
    """
    num = expected_num_requests(workload)
    if num is None:
        return
    memory = available_bytes() if memory_bytes is None else memory_bytes
    needed = BASE_BYTES + num * BYTES_PER_REQUEST
    field = "num_requests" if getattr(workload, "num_requests", None) is not None else None
    field = field or ("max_requests" if workload.kind == "trace" else "duration_s")
    if memory is not None and needed > memory:
        fits = max(0, (memory - BASE_BYTES) // BYTES_PER_REQUEST)
        raise ConfigError(
            f"workload: {num:,} requests need about {needed / 1e9:,.1f} GB of memory "
            f"(~{BYTES_PER_REQUEST / 1e3:g} KB each), more than the {memory / 1e9:.1f} GB "
            f"available; lower workload.{field} to fit at most {fits:,} requests, or run "
            "several seeds of fewer requests"
        )
    hours = num * SECONDS_PER_REQUEST / 3600
    if num * SECONDS_PER_REQUEST > SLOW_RUN_S:
        warnings.warn(
            f"workload: {num:,} requests will take about {hours:.1f} h to simulate "
            f"(~{SECONDS_PER_REQUEST * 1e3:g} ms each); lower workload.{field} for a quicker run",
            stacklevel=2,
        )
