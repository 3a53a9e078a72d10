"""Cost models: pure functions from a step's shape to seconds."""

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
