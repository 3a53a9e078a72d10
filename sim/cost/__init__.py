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
    from sim.cost.linear import LinearCost
    from sim.cost.roofline import RooflineCost

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
    "LinearCost": "linear",
    "RooflineCost": "roofline",
}

__all__ = [
    "CostConfig",
    "CostModel",
    "FloatArray",
    "LinearCost",
    "LinearCostConfig",
    "RooflineCost",
    "RooflineCostConfig",
    "StepShape",
    "build_cost_model",
    "decode_steps_by_loop",
]


def __getattr__(name: str) -> Any:
    """Import ``name``'s submodule on first use and return ``name`` from it."""
    return load_name(__name__, _SOURCES, globals(), name)


def __dir__() -> list[str]:
    return names(globals(), _SOURCES)
