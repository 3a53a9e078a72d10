"""Which loop a run asks for, decided without importing the loop (numba's
start-up, and ~15 ms of modules, are then paid only by runs that take it).

``sim.serving.compiled.path.choose_loop`` turns the answer into the function.
"""

from __future__ import annotations

import os
from typing import Literal

from sim.errors import ConfigError

# Below this many requests one run does not pay for the compiled loop's start-up
# (numba's import and a cached compilation's load, ~0.4 s once a process); a
# caller that makes many runs asks for it at any size (a sweep's points);
# SERVESIM_COMPILED=never|always|python overrides (tests, benchmarks).
MIN_REQUESTS = 20_000
MODES = ("auto", "always", "never", "python")

LoopKind = Literal["compiled", "python"]


def loop_kind(num_requests: int, wanted: bool | None = None) -> LoopKind | None:
    """``"compiled"``, ``"python"`` (the loop's function uncompiled) or None (the
    simulator's own loop).

    ``wanted``: None from ``MIN_REQUESTS`` requests, True at any size, False
    never; the environment variable ``SERVESIM_COMPILED``, when set to other
    than ``auto``, decides instead.
    """
    mode = os.environ.get("SERVESIM_COMPILED", "auto")
    if mode not in MODES:
        raise ConfigError(f"SERVESIM_COMPILED={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "never" or (mode == "auto" and wanted is False):
        return None
    if mode == "python":  # the same function uncompiled: slow, for tests without numba
        return "python"
    if mode == "auto" and wanted is None and num_requests < MIN_REQUESTS:
        return None
    return "compiled"
