"""Samplers of token counts (prompt and output lengths) and of think times.

A length config becomes a sampler through :func:`make_length_sampler`, which reads
any file once (``empirical``); ``sample(rng, size)`` then returns ``size`` int64
draws, each at least 1. Continuous draws are rounded to the nearest integer, then
clipped to ``[min_tokens, max_tokens]`` (no ``max_tokens``: no upper bound). Their
parameters are finite: an infinite one would put every length at a bound.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Protocol

import numpy as np
from pydantic import Field, model_validator

from sim.config import FloatArray, Frozen, IntArray, anchored
from sim.errors import ConfigError
from sim.workload.trace import parse_token_counts, read_csv_columns

# Upper clip for continuous draws when no max_tokens is set: keeps a heavy
# lognormal tail (or an overflow to inf) castable to int64 exactly.
_CAP_TOKENS = 2.0**53


class _Bounded(Frozen):
    """Shared ``min_tokens``/``max_tokens`` fields and their check."""

    min_tokens: int = Field(default=1, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check_bounds(self) -> _Bounded:
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) > max_tokens ({self.max_tokens})")
        return self


class FixedLength(Frozen):
    """Always ``tokens`` tokens."""

    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=1)


class UniformLength(Frozen):
    """Uniform over the integers ``min_tokens..max_tokens`` inclusive."""

    kind: Literal["uniform"] = "uniform"
    min_tokens: int = Field(ge=1)
    max_tokens: int = Field(ge=1)

    @model_validator(mode="after")
    def _check_bounds(self) -> UniformLength:
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) > max_tokens ({self.max_tokens})")
        return self


class NormalLength(_Bounded):
    """Normal(mean_tokens, std_tokens), rounded, then clipped to the bounds."""

    kind: Literal["normal"] = "normal"
    mean_tokens: float = Field(gt=0, allow_inf_nan=False)
    std_tokens: float = Field(ge=0, allow_inf_nan=False)


class LognormalLength(_Bounded):
    """``median_tokens * exp(sigma * Z)``, Z standard normal; rounded, clipped."""

    kind: Literal["lognormal"] = "lognormal"
    median_tokens: float = Field(gt=0, allow_inf_nan=False)
    sigma: float = Field(ge=0, allow_inf_nan=False)


class ExponentialLength(_Bounded):
    """Exponential with mean ``mean_tokens``, rounded *up*, then clipped.

    Rounding up makes this the geometric distribution on 1, 2, ... with
    ``p = 1 - exp(-1 / mean_tokens)``, the discrete memoryless law: its mean
    is ``1 / p``, about ``mean_tokens + 0.5`` for large means.
    """

    kind: Literal["exponential"] = "exponential"
    mean_tokens: float = Field(gt=0, allow_inf_nan=False)


class EmpiricalLength(Frozen):
    """Draws with replacement from column ``column`` of the CSV at ``path`` (relative:
    to the scenario file's folder); every value must be a positive whole number."""

    kind: Literal["empirical"] = "empirical"
    path: str = Field(min_length=1)
    column: str = Field(min_length=1)


_Parametric = FixedLength | UniformLength | NormalLength | LognormalLength | ExponentialLength
LengthConfig = Annotated[_Parametric | EmpiricalLength, Field(discriminator="kind")]
"""Any length distribution, chosen by its ``kind``."""


class LengthSampler(Protocol):
    """Draws token counts; built by :func:`make_length_sampler`."""

    def sample(self, rng: np.random.Generator, size: int) -> IntArray:
        """``size`` int64 draws, each at least 1."""
        ...


class _ParametricSampler:
    """Sampler for every kind but ``empirical``: no state besides its config."""

    def __init__(self, config: _Parametric) -> None:
        self.config = config

    def sample(self, rng: np.random.Generator, size: int) -> IntArray:
        c = self.config
        if isinstance(c, FixedLength):
            return np.full(size, c.tokens, dtype=np.int64)
        if isinstance(c, UniformLength):
            return rng.integers(
                c.min_tokens, c.max_tokens, size=size, endpoint=True, dtype=np.int64
            )
        if isinstance(c, NormalLength):
            raw = np.rint(rng.normal(c.mean_tokens, c.std_tokens, size=size))
        elif isinstance(c, LognormalLength):
            raw = np.rint(rng.lognormal(math.log(c.median_tokens), c.sigma, size=size))
        else:
            raw = np.ceil(rng.exponential(c.mean_tokens, size=size))
        upper = _CAP_TOKENS if c.max_tokens is None else float(c.max_tokens)
        return np.clip(raw, float(c.min_tokens), upper).astype(np.int64)


class _EmpiricalSampler:
    """Uniform choice among the values of one loaded column."""

    def __init__(self, values: IntArray) -> None:
        self.values = values

    def sample(self, rng: np.random.Generator, size: int) -> IntArray:
        return self.values[rng.integers(0, self.values.size, size=size)]


def make_length_sampler(config: LengthConfig, base_dir: Path | str | None = None) -> LengthSampler:
    """A sampler for ``config``; reads the CSV now for the ``empirical`` kind (a
    ``ConfigError`` names what is wrong with it)."""
    if isinstance(config, EmpiricalLength):
        path = anchored(config.path, base_dir)
        data = read_csv_columns(path, [config.column])
        values = parse_token_counts(data, config.column)
        if values.size == 0:
            raise ConfigError(f"{path}: column {config.column!r} has no values")
        return _EmpiricalSampler(values)
    return _ParametricSampler(config)


class FixedThinkTime(Frozen):
    """A think time of exactly ``value_s`` seconds (0 allowed: no pause)."""

    kind: Literal["fixed"] = "fixed"
    value_s: float = Field(ge=0, allow_inf_nan=False)  # .inf: no user ever returns


class ExponentialThinkTime(Frozen):
    """Exponential think time with mean ``mean_s`` seconds."""

    kind: Literal["exponential"] = "exponential"
    mean_s: float = Field(gt=0, allow_inf_nan=False)


ThinkTimeConfig = Annotated[FixedThinkTime | ExponentialThinkTime, Field(discriminator="kind")]
"""A closed-loop user's pause between a response and its next request."""


def sample_think_times_s(
    config: ThinkTimeConfig, rng: np.random.Generator, size: int
) -> FloatArray:
    """``size`` think times in seconds, float64, each >= 0."""
    if isinstance(config, FixedThinkTime):
        return np.full(size, config.value_s, dtype=np.float64)
    return rng.exponential(config.mean_s, size=size)
