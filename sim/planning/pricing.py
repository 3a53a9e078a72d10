"""Approximate GPU prices, for turning capacity into money.

``GPU_PRICE_PER_HOUR``: each preset's ``price_per_hour_usd`` in
``sim/hardware/gpus.toml``, rough on-demand list prices in US dollars per GPU-hour
(docs/capacity.md, "Reading the numbers"); only a default for readable reports, which
``--gpu-price-per-hour``, a sweep file's ``gpu_price_per_hour`` or ``--gpu-price
NAME=USD`` replace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from sim.errors import ConfigError
from sim.hardware.specs import GPU_PRESETS

GPU_PRICE_PER_HOUR: Mapping[str, float] = MappingProxyType(
    {
        name: gpu.price_per_hour_usd
        for name, gpu in GPU_PRESETS.items()
        if gpu.price_per_hour_usd is not None
    }
)
PRICES_AS_OF = "mid-2025"

SECONDS_PER_HOUR = 3600.0


def gpu_price_per_hour(
    hardware_name: str, override: float | Mapping[str, float] | None = None
) -> float | None:
    """Price of one GPU-hour: ``override`` if given (one price, or a price per
    hardware name), else the table, else ``None`` (an inline GPU: no price)."""
    if isinstance(override, Mapping):
        if hardware_name in override:
            return override[hardware_name]
    elif override is not None:
        return override
    return GPU_PRICE_PER_HOUR.get(hardware_name)


def usd_per_unit(rate_per_s: float | None, num_gpus: int, price_per_gpu_hour: float) -> float:
    """Dollars per request (or token) served at ``rate_per_s`` on ``num_gpus`` GPUs
    (``inf`` for a zero rate)."""
    if rate_per_s is None or not rate_per_s > 0 or not math.isfinite(rate_per_s):
        return math.inf
    return num_gpus * price_per_gpu_hour / (rate_per_s * SECONDS_PER_HOUR)


def parse_gpu_prices(pairs: Iterable[str], where: str = "--gpu-price") -> dict[str, float]:
    """``NAME=USD`` pairs (``h100=2.5``) as prices per GPU-hour by hardware name."""
    prices: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not sep or not name.strip() or not (price > 0 and math.isfinite(price)):
            raise ConfigError(
                f"{where}: {pair!r}: expected NAME=USD with a price > 0, e.g. h100=2.5"
            )
        prices[name.strip()] = price
    return prices
