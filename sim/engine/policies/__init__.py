"""Scheduling policies, one module each; this map is the one place to register one."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sim.engine.policies.dynamic import DynamicConfig
from sim.engine.policies.least_attained_service import LeastAttainedServiceConfig
from sim.engine.policies.orca import OrcaConfig
from sim.engine.policies.prefill_first import PrefillFirstConfig
from sim.engine.policies.priority import PriorityConfig
from sim.engine.policies.shortest_prompt_first import ShortestPromptFirstConfig
from sim.engine.policies.static import StaticConfig
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
    "DynamicConfig",
    "LeastAttainedServiceConfig",
    "OrcaConfig",
    "PolicyConfig",
    "PrefillFirstConfig",
    "PriorityConfig",
    "Scheduler",
    "ShortestPromptFirstConfig",
    "StaticConfig",
]
