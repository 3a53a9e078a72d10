"""The tidy table of a sweep: one row per (point, seed).

Columns: ``point``, every override key (dotted, as in the sweep file; lists and
mappings as JSON), ``seed``, ``config`` (a short label of the varied settings
other than the load), ``config_hash``, ``hardware``, every scalar of the run
summary (vllm bench serve's keys), ``offered_rate_per_s``, the batch-size-1
service moments, and cost: ``num_gpus``, ``gpu_price_per_hour``,
``gpu_hours_per_1k_requests``, ``usd_per_1k_requests``,
``usd_per_million_output_tokens``, plus ``slo_met`` (all targets, this run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from sim.metrics.slo_targets import meets
from sim.planning.pricing import gpu_price_per_hour, gpus_per_replica, usd_per_unit
from sim.planning.sweep_exec import Record

if TYPE_CHECKING:
    from sim.planning.sweep_plan import Job, SweepPlan


def _cell(value: Any) -> Any:
    """Override values as table cells: scalars as they are, the rest as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True)


def config_label(plan: SweepPlan, overrides: dict[str, Any]) -> str:
    """Short name of a configuration: its varied keys other than the load."""
    keys = [k for k in plan.varying_keys if k != plan.load_key]
    if not keys:
        return plan.name
    tails = [k.rsplit(".", 1)[-1] for k in keys]
    names = tails if len(set(tails)) == len(tails) else keys
    return ", ".join(f"{n}={_cell(overrides.get(k))}" for n, k in zip(names, keys, strict=True))


def build_table(plan: SweepPlan, results: list[tuple[Job, Record]]) -> pd.DataFrame:
    """One row per (point, seed): overrides, seed, summary keys, cost, SLO verdict."""
    keys = plan.override_keys
    rows = []
    for job, record in results:
        scenario = job.point.scenario
        price = gpu_price_per_hour(scenario.hardware.name, plan.config.gpu_price_per_hour)
        num_gpus = gpus_per_replica(scenario)
        row: dict[str, Any] = {"point": job.point.index}
        row.update({key: _cell(job.point.overrides.get(key)) for key in keys})
        row |= {"seed": job.seed, "config": config_label(plan, job.point.overrides)}
        row |= {"config_hash": job.key, "hardware": scenario.hardware.name}
        row.update(record)
        row["seed"] = job.seed
        row["num_gpus"] = num_gpus
        row["gpu_price_per_hour"] = price
        requests_per_s = record.get("request_throughput")
        tokens_per_s = record.get("output_throughput")
        row["gpu_hours_per_1k_requests"] = 1000 * usd_per_unit(requests_per_s, num_gpus, 1.0)
        row["usd_per_1k_requests"] = (
            None if price is None else 1000 * usd_per_unit(requests_per_s, num_gpus, price)
        )
        row["usd_per_million_output_tokens"] = (
            None if price is None else 1e6 * usd_per_unit(tokens_per_s, num_gpus, price)
        )
        row["slo_met"] = meets(record, plan.targets) if plan.targets else None
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["point", "seed"], kind="stable").reset_index(drop=True)


def write_table(table: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """``results.parquet`` and ``results.csv`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.parquet", out / "results.csv"]
    table.to_parquet(paths[0], index=False)
    table.to_csv(paths[1], index=False)
    return paths
