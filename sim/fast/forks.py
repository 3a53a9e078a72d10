"""Whether this process may fork helpers that go on without ``exec``: Linux only.

Two things fork: ``sim.fast.workers`` (round-robin replicas simulated in
worker processes) and ``servesim run``'s figure process (``sim.cli.figures``).
Elsewhere a fork without ``exec`` is unsafe (macOS's system libraries) or
missing (Windows), and both run in this process instead. Imports nothing but
the standard library: the CLI asks before it loads the simulator.
"""

from __future__ import annotations

import os
import sys


def forking_supported() -> bool:
    """Whether helpers may be forked here (Linux, with ``os.fork``)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")
