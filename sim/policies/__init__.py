"""Scheduling policies, one module each; this map is the one place to register one."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sim.policies.base import Scheduler
from sim.policies.continuous import Continuous, ContinuousConfig
from sim.policies.static import Static, StaticConfig

PolicyConfig = Annotated[ContinuousConfig | StaticConfig, Field(discriminator="kind")]

__all__ = [
    "Continuous",
    "ContinuousConfig",
    "PolicyConfig",
    "Scheduler",
    "Static",
    "StaticConfig",
]
