"""The exceptions users see, each printed as one line: bad input (``ConfigError``,
naming the file, field or line) and a run that broke an invariant
(``InvariantError``, a simulator bug)."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input (scenario, trace, artifact, CLI option).

    The CLI prints ``str(error)`` on one line and exits with status 2, so the
    message must say where the problem is (file, field or line) and what is
    wrong, without relying on a traceback.
    """


class InvariantError(RuntimeError):
    """A run broke an invariant (``name``, one of ``sim.metrics.invariants.INVARIANTS``):
    a simulator bug, not bad input. The CLI prints it on one line and exits with status 1."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"invariant {name} broken: {detail} (a simulator bug: please report it)")
        self.name, self.detail = name, detail

    def __reduce__(self) -> tuple[type[InvariantError], tuple[str, str]]:
        # Rebuilt from its two parts: a sweep's worker process sends it back pickled.
        return (InvariantError, (self.name, self.detail))
