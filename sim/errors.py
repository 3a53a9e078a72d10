"""The one exception type users see: a one-line message naming file, field or line."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input (scenario, trace, artifact, CLI option).

    The CLI prints ``str(error)`` on one line and exits with status 2, so the
    message must say where the problem is (file, field or line) and what is
    wrong, without relying on a traceback.
    """
