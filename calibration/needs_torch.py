"""The one message for a command that needs PyTorch where it is not installed."""

from __future__ import annotations

from sim.errors import ConfigError


def torch_missing(command: str) -> ConfigError:
    """``servesim <command>`` cannot run without torch: how to install it (README, Set-up)."""
    return ConfigError(
        f"servesim {command} needs PyTorch, an optional extra: pip install -e '.[calibrate]' "
        "(for the CPU-only build see the README's set-up); the simulator itself does not"
    )
