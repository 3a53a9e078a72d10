"""Scenario configuration of the cost model, and the factory that builds one.

``cost:`` in a scenario is a tagged union on ``kind``:

- ``linear``: explicit coefficients, see ``sim.cost.linear``;
- ``roofline``: derived from the scenario's model and hardware specs, with
  optional overrides of the hardware's efficiencies and step overhead;
- ``calibrated``: a measured curve from a calibration artifact;
- ``kernels``: the sum of vLLM's operators from measured kernel tables,
  see ``sim.cost.kernels``;
- ``fitted``: a base model (any of the above) with an overhead and prefill /
  decode multipliers fitted to measured runs, see ``sim.cost.fitted``;
- ``auto`` (the default): kernel tables covering this model and GPU, else a
  shipped artifact for this model and hardware, else the roofline, labelled
  uncalibrated (see ``sim.cost.select``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from sim.cost.base import CostModel
from sim.cost.fitted import FittedCost, FittedCostArtifact, load_fitted_artifact
from sim.cost.kernels.config import KernelsCostConfig, build_kernels
from sim.cost.linear import LinearCost, zero_step_problem
from sim.cost.roofline import RooflineCost
from sim.cost.select import AutoCostConfig, CalibratedCostConfig, build_auto, build_calibrated
from sim.errors import ConfigError
from sim.hardware.specs import HardwareSpec, ModelSpec

_FROZEN = ConfigDict(extra="forbid", frozen=True)

NonNegativeSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class LinearCostConfig(BaseModel):
    """Coefficients of ``LinearCost``, all in seconds per unit, all >= 0."""

    model_config = _FROZEN

    kind: Literal["linear"] = "linear"
    step_overhead_s: NonNegativeSeconds = 0.0
    per_prefill_seq_s: NonNegativeSeconds = 0.0
    per_prefill_token_s: NonNegativeSeconds = 0.0
    per_attention_pair_s: NonNegativeSeconds = 0.0
    per_decode_seq_s: NonNegativeSeconds = 0.0
    per_context_token_s: NonNegativeSeconds = 0.0

    @model_validator(mode="after")
    def _no_zero_steps(self) -> LinearCostConfig:
        problem = zero_step_problem(**self.model_dump(exclude={"kind"}))
        if problem is not None:
            raise ValueError(problem)
        return self


class RooflineCostConfig(BaseModel):
    """Roofline model; ``None`` fields keep the hardware preset's value."""

    model_config = _FROZEN

    kind: Literal["roofline"] = "roofline"
    compute_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    memory_efficiency: Annotated[float, Field(gt=0, le=1)] | None = None
    step_overhead_s: NonNegativeSeconds | None = None


class FittedCostConfig(BaseModel):
    """A base model with parameters fitted to measured runs (``servesim calibrate --from-run``).

    ``artifact`` is a path (relative to the scenario's folder) to the JSON
    file the fit wrote; it names its own base model.
    """

    model_config = _FROZEN

    kind: Literal["fitted"] = "fitted"
    artifact: str = Field(min_length=1)


# The kinds a fitted artifact may wrap (a fitted model is not refitted).
BaseCostConfig = Annotated[
    AutoCostConfig
    | CalibratedCostConfig
    | KernelsCostConfig
    | LinearCostConfig
    | RooflineCostConfig,
    Field(discriminator="kind"),
]

# A new kind goes into this union and into build_cost_model.
CostConfig = Annotated[
    AutoCostConfig
    | CalibratedCostConfig
    | FittedCostConfig
    | KernelsCostConfig
    | LinearCostConfig
    | RooflineCostConfig,
    Field(discriminator="kind"),
]

_BASE_ADAPTER: TypeAdapter[BaseCostConfig] = TypeAdapter(BaseCostConfig)


def fitted_artifact_path(config: FittedCostConfig, base_dir: Path | None) -> Path:
    """The file ``config.artifact`` names, anchored at the scenario's folder."""
    path = Path(config.artifact)
    return path if path.is_absolute() or base_dir is None else base_dir / path


def fitted_base(path: Path, artifact: FittedCostArtifact) -> BaseCostConfig:
    """The base model's ``cost:`` block stored in a fitted artifact (ConfigError if bad)."""
    try:
        return _BASE_ADAPTER.validate_python(artifact.base_cost)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"{path}: field 'base_cost.{where}': {first['msg']}") from None


def load_fitted(config: FittedCostConfig, base_dir: Path | None) -> tuple[Path, FittedCostArtifact]:
    """The artifact ``config`` names, read and validated."""
    path = fitted_artifact_path(config, base_dir)
    return path, load_fitted_artifact(path)


def build_cost_model(
    config: CostConfig, model: ModelSpec, hardware: HardwareSpec, base_dir: Path | None = None
) -> CostModel:
    """The cost model ``config`` describes, for ``model`` running on ``hardware``.

    ``base_dir`` anchors a relative artifact path (the scenario file's folder).
    """
    if isinstance(config, AutoCostConfig):
        return build_auto(model, hardware)
    if isinstance(config, FittedCostConfig):
        path, artifact = load_fitted(config, base_dir)
        base = build_cost_model(fitted_base(path, artifact), model, hardware, path.parent)
        return FittedCost(base, artifact.parameters.to_params(), source=path.name)
    if isinstance(config, CalibratedCostConfig):
        return build_calibrated(config, model, hardware, base_dir)
    if isinstance(config, KernelsCostConfig):
        return build_kernels(config, model, hardware, None, base_dir)
    if isinstance(config, LinearCostConfig):
        return LinearCost(**config.model_dump(exclude={"kind"}))
    if isinstance(config, RooflineCostConfig):
        overrides = {
            field: value
            for field, value in config.model_dump(exclude={"kind"}).items()
            if value is not None
        }
        return RooflineCost(model, hardware.model_copy(update=overrides))
    raise TypeError(f"unknown cost config {type(config).__name__}")  # pragma: no cover
