"""The search space of ``servesim plan``: the plan file's fields and their defaults.

``PlanConfig``'s defaults apply without a plan file (``--plan FILE``); docs/capacity.md
("The plan file") tells each field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, ValidationError, field_validator

from sim.config import Frozen
from sim.errors import ConfigError, format_error
from sim.scenario.strict_yaml import read_yaml


class DisaggregationSpace(Frozen):
    """Disaggregated prefill/decode units to try: ``P:D`` replica ratios and the KV link."""

    ratios: list[str] = Field(default_factory=lambda: ["1:1", "1:2"], min_length=1)
    kv_transfer_bandwidth_bytes_per_s: PositiveFloat = 50e9  # one 400 Gb/s RDMA NIC per GPU
    kv_transfer_latency_s: float = Field(default=1e-4, ge=0)

    @field_validator("ratios")
    @classmethod
    def _ratios(cls, value: list[str]) -> list[str]:
        for ratio in value:
            parts = str(ratio).split(":")
            if len(parts) != 2 or not all(p.strip().isdigit() and int(p) >= 1 for p in parts):
                raise ValueError(f"ratio {ratio!r}: expected P:D with counts >= 1, e.g. 1:2")
        return value

    def pairs(self) -> list[tuple[int, int]]:
        """The ratios as (prefill replicas, decode replicas)."""
        return [(int(r.split(":")[0]), int(r.split(":")[1])) for r in self.ratios]


class PlanConfig(Frozen):
    """A plan file: which configurations ``servesim plan`` searches, and how hard."""

    gpus: list[str | dict[str, Any]] | None = Field(default=None, min_length=1)
    tensor_parallel_sizes: list[int] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1)
    max_num_seqs: list[int] = Field(default_factory=lambda: [64, 256], min_length=1)
    max_num_batched_tokens: list[int] = Field(default_factory=lambda: [2048, 8192], min_length=1)
    chunked_prefill: list[bool] = Field(default_factory=lambda: [True, False], min_length=1)
    refine: bool = True
    cost_model: Literal["auto", "roofline"] = "auto"
    disaggregation: DisaggregationSpace | None = None
    seeds: int = Field(default=3, ge=1, le=30)
    num_requests: int | None = Field(default=None, ge=1)
    rel_width: float = Field(default=0.1, gt=0, lt=1)
    max_loads: int = Field(default=10, ge=2, le=60)
    prune: bool = True
    # Finite: an infinite price makes every fleet cost inf, nothing to rank or plot.
    gpu_price_per_hour: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )

    @field_validator("tensor_parallel_sizes")
    @classmethod
    def _tp_sizes(cls, value: list[int]) -> list[int]:
        if any(v not in (1, 2, 4, 8) for v in value):
            raise ValueError("tensor-parallel sizes are 1, 2, 4 or 8")
        return sorted(set(value))

    @field_validator("max_num_seqs", "max_num_batched_tokens")
    @classmethod
    def _positive_levels(cls, value: list[int]) -> list[int]:
        if any(v < 1 for v in value):
            raise ValueError("every level must be >= 1")
        return sorted(set(value))


def load_plan_config(path: str | Path | None) -> PlanConfig:
    """The plan file's search space (the defaults when ``path`` is None)."""
    if path is None:
        return PlanConfig()
    doc = read_yaml(path, "plan")
    try:
        return PlanConfig.model_validate(doc)
    except ValidationError as error:
        raise ConfigError(format_error(str(path), error, doc)) from None
