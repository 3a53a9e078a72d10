"""Reading a sweep's table: per-point means, the Pareto front, the cheapest point.

Seeds are averaged per point (every numeric column), and a point meets the
SLOs when each target holds for the mean over its seeds. Cost is GPU-hours per
request, ``1 / request_throughput * num_gpus / 3600``, times the GPU price:
at a higher load the same GPUs serve more requests, so the cheapest point is
usually the busiest one that still meets the SLOs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from sim.metrics.slo_targets import SloTarget, meets

THROUGHPUT = "request_throughput"
LATENCY = "p99_ttft_ms"


def per_point(
    table: pd.DataFrame, targets: tuple[SloTarget, ...], override_keys: list[str]
) -> pd.DataFrame:
    """One row per point: results averaged over seeds, overrides and labels taken once."""
    if table.empty:
        return table.copy()
    numeric = [
        c
        for c in table.columns
        if c not in ("point", "seed", *override_keys)
        and pd.api.types.is_numeric_dtype(table[c])
        and not pd.api.types.is_bool_dtype(table[c])
    ]
    others = [c for c in table.columns if c not in numeric and c not in ("point", "seed")]
    grouped = table.groupby("point", sort=True)
    means = grouped[numeric].mean()
    firsts = grouped[others].first()
    points = pd.concat([firsts, means], axis=1).reset_index()
    points["num_seeds"] = grouped.size().to_numpy()
    if targets:
        records = points.to_dict("records")
        points["slo_met"] = [meets({str(k): v for k, v in row.items()}, targets) for row in records]
    else:
        points["slo_met"] = None
    return points


def pareto_mask(throughput: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both axes (more throughput, less latency);
    never a point with a missing value."""
    thr = np.asarray(throughput, dtype=float)
    lat = np.asarray(latency, dtype=float)
    ok = np.isfinite(thr) & np.isfinite(lat)
    front = np.zeros(thr.size, dtype=bool)
    for i in np.flatnonzero(ok):
        better_or_equal = ok & (thr >= thr[i]) & (lat <= lat[i])
        strictly = (thr > thr[i]) | (lat < lat[i])
        front[i] = not np.any(better_or_equal & strictly)
    return front


def cheapest(points: pd.DataFrame) -> tuple[pd.Series | None, str, str]:
    """The cheapest point meeting the SLOs (every point if none are set), the column it
    was ranked by (dollars per 1k requests; GPU-hours where a price is missing, only on
    one kind of GPU: an hour of one GPU is not an hour of another), and why there is
    none when prices forbid a ranking."""
    if points.empty:
        return None, "", ""
    candidates = points if points["slo_met"].isna().all() else points[points["slo_met"] == True]  # noqa: E712
    if candidates.empty:
        return None, "", ""
    usd = pd.to_numeric(candidates["usd_per_1k_requests"], errors="coerce")
    column = "usd_per_1k_requests"
    if not usd.notna().all():
        hardware = candidates.get("hardware")
        if hardware is not None and hardware.nunique() > 1:
            unpriced = ", ".join(sorted(str(h) for h in set(hardware[usd.isna()])))
            why = (
                "no cheapest: GPU-hours of different GPUs are not comparable and no price is "
                f"known for {unpriced}; set gpu_price_per_hour: {{NAME: USD}} in the sweep file"
            )
            return None, "", why
        column = "gpu_hours_per_1k_requests"
    values = pd.to_numeric(candidates[column], errors="coerce").replace(math.inf, np.nan)
    if values.isna().all():
        return None, "", ""
    best: pd.Series = candidates.iloc[int(np.nanargmin(values.to_numpy(float)))]
    return best, column, ""


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def format_report(
    points: pd.DataFrame,
    targets: tuple[SloTarget, ...],
    override_keys: list[str],
    max_rows: int = 40,
) -> str:
    """A plain-text table of the points and the verdict on the cheapest one."""
    metrics = list(dict.fromkeys([LATENCY, "p99_tpot_ms", *(t.summary_key for t in targets)]))
    cols = [c for c in [*override_keys, THROUGHPUT, *metrics] if c in points.columns]
    shown = points[["point", *cols, "slo_met"]].head(max_rows).copy()
    if THROUGHPUT in shown:
        shown[THROUGHPUT] = [_fmt(v, 2) for v in shown[THROUGHPUT]]
    for column in metrics:
        if column in shown:
            shown[column] = [_fmt(v) for v in shown[column]]
    shown.columns = [c.rsplit(".", 1)[-1] for c in shown.columns]
    lines = [shown.to_string(index=False)]
    if len(points) > max_rows:
        lines.append(f"... {len(points) - max_rows} more points in results.csv")
    best, unit, refusal = cheapest(points)
    slo_text = ", ".join(str(t) for t in targets)
    verdict = f"cheapest meeting the SLOs ({slo_text})" if targets else "cheapest (no SLO given)"
    if refusal:
        lines.append(refusal)
        return "\n".join(lines)
    if best is None:
        lines.append(f"no configuration meets the SLOs ({slo_text})" if targets else "no result")
        return "\n".join(lines)
    settings = ", ".join(f"{k.rsplit('.', 1)[-1]}={best[k]}" for k in override_keys)
    price = (
        f"${best['usd_per_1k_requests']:.4f} per 1k requests"
        if unit == "usd_per_1k_requests"
        else f"{best['gpu_hours_per_1k_requests']:.4f} GPU-hours per 1k requests"
    )
    lines.append(
        f"{verdict}: point {int(best['point'])} ({settings}): "
        f"{price}, {_fmt(best.get(THROUGHPUT), 2)} req/s, p99 TTFT {_fmt(best.get(LATENCY))} ms"
    )
    return "\n".join(lines)
