"""Cost models: pure functions from a step's shape to seconds.

The names below are loaded on first use (PEP 562): importing one submodule
(``sim.cost.base``, say, as the engine does) does not import them all, the
kernel tables and artifact readers included (issue 16: start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.cost.lazy import load_name, names

if TYPE_CHECKING:
    from sim.cost.base import CostModel, FloatArray, StepShape, decode_steps_by_loop
    from sim.cost.config import (
        CostConfig,
        LinearCostConfig,
        RooflineCostConfig,
        build_cost_model,
    )
    from sim.cost.kv_capacity import KvCacheBudget, KvSizing, kv_cache_budget, vllm_num_kv_blocks
    from sim.cost.linear import LinearCost
    from sim.cost.roofline import RooflineCost
    from sim.cost.specs import (
        HARDWARE_PRESETS,
        MODEL_PRESETS,
        TINY_MODEL,
        HardwareRef,
        HardwareSpec,
        ModelRef,
        ModelSpec,
        hardware_preset,
        model_preset,
    )

# Each public name and the submodule that defines it.
_SOURCES = {
    "CostModel": "base",
    "FloatArray": "base",
    "StepShape": "base",
    "decode_steps_by_loop": "base",
    "CostConfig": "config",
    "LinearCostConfig": "config",
    "RooflineCostConfig": "config",
    "build_cost_model": "config",
    "KvCacheBudget": "kv_capacity",
    "KvSizing": "kv_capacity",
    "kv_cache_budget": "kv_capacity",
    "vllm_num_kv_blocks": "kv_capacity",
    "LinearCost": "linear",
    "RooflineCost": "roofline",
    "HARDWARE_PRESETS": "specs",
    "MODEL_PRESETS": "specs",
    "TINY_MODEL": "specs",
    "HardwareRef": "specs",
    "HardwareSpec": "specs",
    "ModelRef": "specs",
    "ModelSpec": "specs",
    "hardware_preset": "specs",
    "model_preset": "specs",
}

__all__ = [
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "TINY_MODEL",
    "CostConfig",
    "CostModel",
    "FloatArray",
    "HardwareRef",
    "HardwareSpec",
    "KvCacheBudget",
    "KvSizing",
    "LinearCost",
    "LinearCostConfig",
    "ModelRef",
    "ModelSpec",
    "RooflineCost",
    "RooflineCostConfig",
    "StepShape",
    "build_cost_model",
    "decode_steps_by_loop",
    "hardware_preset",
    "kv_cache_budget",
    "model_preset",
    "vllm_num_kv_blocks",
]


def __getattr__(name: str) -> Any:
    """Import ``name``'s submodule on first use and return ``name`` from it."""
    return load_name(__name__, _SOURCES, globals(), name)


def __dir__() -> list[str]:
    return names(globals(), _SOURCES)
