"""Scheduling policies, one module each; this map is the one place to register one."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sim.engine.policies.dynamic import Dynamic, DynamicConfig
from sim.engine.policies.least_attained_service import (
    LeastAttainedService,
    LeastAttainedServiceConfig,
)
from sim.engine.policies.orca import Orca, OrcaConfig
from sim.engine.policies.prefill_first import PrefillFirst, PrefillFirstConfig
from sim.engine.policies.priority import Priority, PriorityConfig
from sim.engine.policies.shortest_prompt_first import ShortestPromptFirst, ShortestPromptFirstConfig
from sim.engine.policies.static import Static, StaticConfig
from sim.engine.scheduler import Continuous, ContinuousConfig, Scheduler

PolicyConfig = Annotated[
    ContinuousConfig
    | StaticConfig
    | DynamicConfig
    | OrcaConfig
    | PrefillFirstConfig
    | PriorityConfig
    | ShortestPromptFirstConfig
    | LeastAttainedServiceConfig,
    Field(discriminator="kind"),
]

__all__ = [
    "Continuous",
    "ContinuousConfig",
    "Dynamic",
    "DynamicConfig",
    "LeastAttainedService",
    "LeastAttainedServiceConfig",
    "Orca",
    "OrcaConfig",
    "PolicyConfig",
    "PrefillFirst",
    "PrefillFirstConfig",
    "Priority",
    "PriorityConfig",
    "Scheduler",
    "ShortestPromptFirst",
    "ShortestPromptFirstConfig",
    "Static",
    "StaticConfig",
]
