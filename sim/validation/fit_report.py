"""Cross-validated error of a black-box fit, and its tables (base model vs fitted).

``cross_validate`` runs every fold of ``sim.validation.fit.cv_folds``: fit
on the training targets, then score the held-out ones with the base model
and with the fold's fitted parameters. ``in_sample`` scores the final fit
(on every run) the same way. Errors are signed percentages,
``(predicted - measured) / measured * 100``, of p50/p90/p99 TTFT and TPOT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sim.cost.fitted import FitParameters
from sim.validation.fit import (
    METRICS,
    PARAMETERS,
    QUANTILES,
    FitRun,
    Target,
    cv_folds,
    fit,
    score,
)

_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT"}


def percent(log_error: float) -> float | None:
    """A log error as a signed percentage (None when undefined)."""
    return None if not math.isfinite(log_error) else round(100.0 * math.expm1(log_error), 2)


def params_json(params: FitParameters) -> dict[str, float]:
    return {name: float(getattr(params, name)) for name in PARAMETERS}


def target_rows(
    runs: Sequence[FitRun], targets: Sequence[Target], fitted: FitParameters
) -> list[dict[str, Any]]:
    """Per target and metric: base and fitted % errors at p50/p90/p99."""
    base_errors = score(runs, targets, FitParameters())
    fitted_errors = score(runs, targets, fitted)
    rows = []
    for target, base, new in zip(targets, base_errors, fitted_errors, strict=True):
        for metric in METRICS:
            rows.append(
                {
                    "run": runs[target.run].name,
                    "requests": target.label,
                    "metric": _NAMES[metric],
                    "base_err_pct": {s: percent(base[metric][s]) for s in QUANTILES},
                    "fitted_err_pct": {s: percent(new[metric][s]) for s in QUANTILES},
                }
            )
    return rows


def cross_validate(
    runs: Sequence[FitRun], free: Sequence[str], max_evaluations: int
) -> list[dict[str, Any]]:
    """Every fold: its fitted parameters and the held-out rows (module docstring)."""
    out = []
    for fold in cv_folds(runs):
        outcome = fit(runs, fold.train, free, max_evaluations)
        out.append(
            {
                "fold": fold.name,
                "parameters": params_json(outcome.params),
                "train_objective": outcome.value,
                "num_evaluations": outcome.num_evaluations,
                "held_out": target_rows(runs, fold.test, outcome.params),
            }
        )
    return out


def _cells(errors: dict[str, float | None]) -> str:
    return " / ".join("n/a" if e is None else f"{e:+.1f} %" for e in errors.values())


def render_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A markdown table: run, requests, metric, base and fitted errors."""
    lines = [
        "| run | requests | metric | base err p50 / p90 / p99 | fitted err p50 / p90 / p99 |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['run']} | {row['requests']} | {row['metric']} | "
            f"{_cells(row['base_err_pct'])} | {_cells(row['fitted_err_pct'])} |"
        )
    return lines


def _params_text(params: dict[str, float]) -> str:
    return (
        f"overhead {params['step_overhead_s'] * 1e3:.3f} ms/step, prefill "
        f"x{params['prefill_multiplier']:.3f}, decode x{params['decode_multiplier']:.3f}"
    )


def render(errors: dict[str, Any]) -> str:
    """Markdown: the held-out errors of every fold, then the final fit in sample."""
    lines: list[str] = []
    for fold in errors.get("cross_validation", []):
        lines += [f"Held out ({fold['fold']}; fitted {_params_text(fold['parameters'])}):", ""]
        lines += [*render_rows(fold["held_out"]), ""]
    final = errors["in_sample"]
    lines += [f"In sample (all runs; fitted {_params_text(final['parameters'])}):", ""]
    lines += [*render_rows(final["rows"]), ""]
    return "\n".join(lines)
