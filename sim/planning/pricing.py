"""Approximate GPU prices, for turning capacity into money.

``GPU_PRICE_PER_HOUR`` holds rough public on-demand list prices in US dollars
per GPU-hour (mid-2025, specialist GPU clouds such as Lambda or RunPod; the
large clouds list 2-4x more, reserved and spot capacity much less). They are
only a default to make reports readable: pass your own price with
``--gpu-price-per-hour`` (or ``gpu_price_per_hour:`` in a sweep file, or
``--gpu-price NAME=USD`` per GPU to ``servesim plan``). Every hardware
preset has a price (tests/test_plan.py checks it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from sim.errors import ConfigError

GPU_PRICE_PER_HOUR: Mapping[str, float] = MappingProxyType(
    {
        # Approximate on-demand list prices, mid-2025, one GPU (RunPod and Lambda
        # pricing pages; hourly VM prices where the GPU only comes in a VM).
        "h100": 3.00,  # H100 80GB SXM
        "h100-sxm": 3.00,  # the same GPU under its explicit name
        "h100-pcie": 2.40,  # H100 80GB PCIe
        "h200": 3.80,  # H200 141GB SXM
        "b200": 6.00,  # B200 180GB SXM
        "a100-80gb": 1.80,  # A100 80GB SXM
        "a100-40gb": 1.30,  # A100 40GB SXM
        "l40s": 0.90,  # L40S 48GB
        "l4": 0.80,  # L4 24GB (a small cloud VM with one L4)
        "a10g": 1.00,  # A10G 24GB (AWS g5.xlarge, on-demand)
        "rtx-4090": 0.70,  # RTX 4090 24GB (secure-cloud pods)
        "rtx-pro-6000": 1.80,  # RTX PRO 6000 Blackwell 96GB
        "cpu-2core": 0.10,  # a 2-vCPU VM, for the calibration machine
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
    """Dollars per request (or token) served at ``rate_per_s`` on ``num_gpus`` GPUs.

    GPU-hours per unit = 1 / (rate * 3600) per GPU; ``inf`` for a zero rate.
    """
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
