"""Cost models: pure functions from a step's shape to seconds."""

from sim.cost.base import CostModel, FloatArray, StepShape, decode_steps_by_loop
from sim.cost.config import (
    CostConfig,
    LinearCostConfig,
    RooflineCostConfig,
    build_cost_model,
)
from sim.cost.linear import LinearCost
from sim.cost.memory import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    default_activation_reserve_bytes,
    num_kv_blocks,
)
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

__all__ = [
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "TINY_MODEL",
    "CostConfig",
    "CostModel",
    "FloatArray",
    "HardwareRef",
    "HardwareSpec",
    "LinearCost",
    "LinearCostConfig",
    "ModelRef",
    "ModelSpec",
    "RooflineCost",
    "RooflineCostConfig",
    "StepShape",
    "build_cost_model",
    "decode_steps_by_loop",
    "default_activation_reserve_bytes",
    "hardware_preset",
    "model_preset",
    "num_kv_blocks",
]
