"""Model and hardware descriptions, their presets, and the config form naming them.

A ``ModelSpec`` is the shape of a Llama-style decoder (RMSNorm, grouped-query
attention, gated SiLU MLP); everything a cost model needs (parameter count,
weight bytes, KV bytes per token, FLOPs per token) is derived from it. The
``tiny`` preset is also what ``calibration/`` builds as a real PyTorch model,
so its shape lives here and nowhere else.

A ``HardwareSpec`` is one accelerator: datasheet peak dense FLOP/s and memory
bandwidth, memory size, the fractions of peak a real engine reaches, and a
fixed per-step overhead (scheduling, kernel launches, sampling).

In a scenario, ``model:`` and ``hardware:`` accept a preset name
(``model: llama-3-8b``), an inline spec (a mapping with every field), or a
preset with overrides (``{preset: llama-3-8b, kv_dtype_bytes: 1}``); see
``ModelRef`` and ``HardwareRef``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator

from sim.errors import ConfigError
from sim.hardware.architecture import load_architecture
from sim.hardware.gpus import HARDWARE_SPECS, HardwareSpec
from sim.hardware.model_configs import HF_CONFIGS
from sim.hardware.model_spec import _MODELS, TINY_MODEL, ModelSpec

__all__ = [
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "TINY_MODEL",
    "HardwareRef",
    "HardwareSpec",
    "ModelRef",
    "ModelSpec",
    "hardware_preset",
    "lookup_preset",
    "model_preset",
    "preset_validator",
]

# Hugging Face configs written in the repo (sim.hardware.model_configs) are model
# presets too, as the dense ModelSpec with their weight and KV bytes
# (llama-3.1-8b has llama-3-8b's shapes under its own name).
_FROM_CONFIGS = [load_architecture(name).to_model_spec() for name in HF_CONFIGS]
MODEL_PRESETS: Mapping[str, ModelSpec] = MappingProxyType(
    {m.name: m for m in [*_MODELS, *_FROM_CONFIGS]}
)
HARDWARE_PRESETS: Mapping[str, HardwareSpec] = MappingProxyType({h.name: h for h in HARDWARE_SPECS})

_T = TypeVar("_T", bound=BaseModel)


def lookup_preset(presets: Mapping[str, _T], kind: str, name: str) -> _T:
    """``presets[name]``; a ConfigError listing the known names if there is none."""
    try:
        return presets[name]
    except KeyError:
        known = ", ".join(sorted(presets))
        raise ConfigError(f"unknown {kind} preset {name!r}; known: {known}") from None


def model_preset(name: str) -> ModelSpec:
    """The model preset called ``name``; ConfigError listing known names if none."""
    return lookup_preset(MODEL_PRESETS, "model", name)


def hardware_preset(name: str) -> HardwareSpec:
    """The hardware preset called ``name``; ConfigError listing known names if none."""
    return lookup_preset(HARDWARE_PRESETS, "hardware", name)


def preset_validator(presets: Mapping[str, _T], kind: str) -> Any:
    """Before-validator turning a name or ``{preset: name, **overrides}`` into a dict."""

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            return lookup_preset(presets, kind, value)
        if isinstance(value, dict) and "preset" in value:
            overrides = {k: v for k, v in value.items() if k != "preset"}
            return {**lookup_preset(presets, kind, value["preset"]).model_dump(), **overrides}
        return value

    return resolve


# Scenario field types. Inside pydantic a ConfigError from an unknown name is a
# ValueError, so it surfaces as a ValidationError carrying the same message and
# the field path; the scenario loader turns that into a one-line ConfigError.
ModelRef = Annotated[ModelSpec, BeforeValidator(preset_validator(MODEL_PRESETS, "model"))]
HardwareRef = Annotated[
    HardwareSpec, BeforeValidator(preset_validator(HARDWARE_PRESETS, "hardware"))
]
