"""Scheduling policies, one module each; this map is the one place to register one."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sim.policies.base import Scheduler
from sim.policies.continuous import Continuous, ContinuousConfig
from sim.policies.dynamic import Dynamic, DynamicConfig
from sim.policies.orca import Orca, OrcaConfig
from sim.policies.prefill_first import PrefillFirst, PrefillFirstConfig
from sim.policies.priority import Priority, PriorityConfig
from sim.policies.shortest_prompt_first import ShortestPromptFirst, ShortestPromptFirstConfig
from sim.policies.static import Static, StaticConfig

PolicyConfig = Annotated[
    ContinuousConfig
    | StaticConfig
    | DynamicConfig
    | OrcaConfig
    | PrefillFirstConfig
    | PriorityConfig
    | ShortestPromptFirstConfig,
    Field(discriminator="kind"),
]

__all__ = [
    "Continuous",
    "ContinuousConfig",
    "Dynamic",
    "DynamicConfig",
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
