"""For tests of code that forks (``servesim run``'s figure processes)."""

from __future__ import annotations

import os


def no_children_left() -> bool:
    """Whether this process has no child left to reap (no zombie, none running)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False
