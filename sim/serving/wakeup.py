"""The idle event an executor sleeps on: an arrival, or the policy's wake-up time."""

from __future__ import annotations

import simpy


def idle_event(env: simpy.Environment, wake_at_s: float | None) -> simpy.Event:
    """An event the caller succeeds when work arrives; it also fires at ``wake_at_s`` (s)."""
    idle = env.event()
    if wake_at_s is not None:
        timer = env.timeout(max(0.0, wake_at_s - env.now))

        def wake(_: simpy.Event) -> None:
            if not idle.triggered:
                idle.succeed()

        timer.callbacks.append(wake)
    return idle
