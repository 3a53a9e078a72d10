"""The search space of ``servesim plan``: the plan file's fields and their defaults.

A plan file (YAML, ``--plan FILE``) narrows or widens the search; without one
the defaults below apply (docs/capacity.md, "servesim plan")::

    gpus: [h100, l40s, {name: my-asic, peak_flops_per_s: 5e14, ...}]  # default: every preset
    tensor_parallel_sizes: [1, 2, 4, 8]   # kept where the model's heads split and it fits
    max_num_seqs: [64, 256]               # the coarse levels; refined around the best
    max_num_batched_tokens: [2048, 8192]
    chunked_prefill: [true, false]        # off only where a prompt fits one step's budget
    refine: true                          # one round of halfway values around each good group
    cost_model: auto                      # or roofline (every GPU, fast, a guess)
    disaggregation: {ratios: ["1:1", "1:2"]}   # optional prefill:decode units
    seeds: 3                              # per load: 2 or more give a confidence interval
    num_requests: null                    # per run to start; null: the fewest the SLO
                                          # percentiles need; longer where the served check needs
    rel_width: 0.1                        # capacity search precision
    max_loads: 10                         # loads per capacity search, each under every seed
    prune: true                           # false: every configuration searched (exhaustive)
    gpu_price_per_hour: {h100: 2.5}       # USD per GPU-hour; --gpu-price overrides
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, field_validator

from sim.errors import ConfigError
from sim.scenario.overrides import format_error
from sim.scenario.strict_yaml import read_yaml

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class DisaggregationSpace(BaseModel):
    """Disaggregated prefill/decode units to try: ``P:D`` replica ratios and the KV link."""

    model_config = _FROZEN

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


class PlanConfig(BaseModel):
    """A plan file: which configurations ``servesim plan`` searches, and how hard."""

    model_config = _FROZEN

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
