"""What a plan means for a planner: the ranked table, ``plan.json`` and ``best.yaml``.

``best.yaml`` is the top configuration as a scenario of the whole fleet at the target
rate, which ``servesim run`` replays: the check that routing keeps the capacity a
perfect balancer was assumed to give.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from pathlib import Path
from typing import Any, cast

import yaml

from sim.config import anchored
from sim.hardware.specs import MODEL_PRESETS
from sim.metrics.report import jsonable
from sim.planning.capacity_report import divisor_text, figure, units_for, write_json
from sim.planning.plan import Outcome, PlanResult
from sim.planning.pricing import PRICES_AS_OF
from sim.scenario import Scenario

MAX_LISTED = 12
"""Skipped or refused configurations listed under the table; plan.json has all."""
BEST_ROUTER = "least_outstanding_requests"
"""best.yaml's router: the closest the simulator has to the balancer the fleet assumes."""


def _num(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, fmt)


def _capacity(outcome: Outcome) -> str:
    """Capacity per unit and its interval, the estimate to the digits that make the
    table's units its ceil (``divisor_text``)."""
    record = outcome.record or {}
    low, high = record.get("ci95_lower"), record.get("ci95_upper")
    rate, units = record.get("capacity_rate_per_s"), record.get("num_units")
    sized = outcome.sized_rate_per_s
    if rate is None or not math.isfinite(rate):
        est = "-"
    elif units is not None and sized is not None and units == units_for(sized, rate):
        est = divisor_text(sized, rate, units)
    else:
        est = figure(rate)
    if low is None or high is None:
        return est
    return f"{est} ({figure(low)}..{figure(high)})"


def _stats(outcome: Outcome, result: PlanResult) -> str:
    record = outcome.record or {}
    means = record.get("at_target_mean") or {}
    halves = record.get("at_target_ci95_half_width") or {}
    cells = []
    for target in result.targets:
        mean = means.get(target.name)
        if mean is None:
            continue
        half = halves.get(target.name)
        spread = f"±{half:.0f}" if half else ""
        cells.append(f"{_num(mean, '.0f')}{spread}")
    # pass / unclear / fail: where each statistic's 95% interval lies against its limit,
    # the served check's included: short of a pass, its ratio shows whether it decided.
    status = record.get("at_target_status")
    served = record.get("at_target_served_ratio")
    if status and status != "pass" and served is not None:
        half = record.get("at_target_served_ci95_half_width")
        status += f" (served {served:.2f}{f'±{half:.2f}' if half else ''})"
    return " / ".join(cells) + (f" {status}" if status else "")


def table_rows(result: PlanResult) -> list[dict[str, str]]:
    """One row per configuration with a fleet, ranked, as strings."""
    rows = []
    for rank, outcome in enumerate(result.ranked(), 1):
        c, record = outcome.candidate, outcome.record or {}
        rows.append(
            {
                "#": str(rank),
                "GPU": c.gpu,
                "TP": str(c.tensor_parallel_size),
                "P:D": "-" if c.split is None else f"{c.split[0]}:{c.split[1]}",
                "seqs": str(c.max_num_seqs),
                "tokens": str(c.max_num_batched_tokens),
                "chunk": "on" if c.chunked_prefill else "off",
                "units": str(record.get("num_units")),
                "req/s/unit (95%)": _capacity(outcome),
                "GPUs": str(record.get("num_gpus_total")),
                "$/hour": _num(record.get("usd_per_hour"), ".2f"),
                "$/Mtok": _num(record.get("usd_per_million_output_tokens"), ".3f"),
                "SLOs at target (ms)": _stats(outcome, result),
                "cost model": outcome.cost_model,
                "model error (TTFT/TPOT p50)": outcome.model_error.short
                if outcome.model_error
                else "-",
            }
        )
    return rows


def format_table(result: PlanResult, max_rows: int = 20) -> str:
    """The ranked table, then what was skipped or refused and why."""
    rows = table_rows(result)
    lines = []
    if rows:
        columns = list(rows[0])
        widths = {c: max(len(c), *(len(r[c]) for r in rows[:max_rows])) for c in columns}
        left = {"GPU", "SLOs at target (ms)", "cost model", "model error (TTFT/TPOT p50)"}

        def cell(c: str, text: str) -> str:
            return text.ljust(widths[c]) if c in left else text.rjust(widths[c])

        lines.append("  ".join(cell(c, c) for c in columns).rstrip())
        lines += ["  ".join(cell(c, r[c]) for c in columns).rstrip() for r in rows[:max_rows]]
        if len(rows) > max_rows:
            lines.append(f"... {len(rows) - max_rows} more ranked configurations in plan.json")
    slo = ", ".join(str(t) for t in result.targets)
    lines.append(
        f"SLOs at target: {' / '.join(t.name for t in result.targets)} (mean ± 95% half-width "
        "over seeds) at the target's share per unit, then pass, unclear or fail as those "
        f"intervals lie against the limits; capacity is per unit, within {slo}"
    )
    no_fit = [o for o in result.searched if o.usd_per_hour is None]
    others = [o for o in result.outcomes if o.status in ("skipped", "refused")] + no_fit

    def kind(outcome: Outcome) -> str:
        return "no capacity" if outcome.status == "searched" else outcome.status

    for outcome in others[:MAX_LISTED]:
        lines.append(f"{kind(outcome):>12}: {outcome.candidate.label}: {outcome.reason}")
    if len(others) > MAX_LISTED:
        counts = Counter(kind(o) for o in others[MAX_LISTED:])
        more = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        lines.append(f"{'...':>12}  {more} more, with reasons, in plan.json")
    return "\n".join(lines)


def format_best(result: PlanResult) -> str:
    """The verdict in a few lines."""
    best = result.best
    slo = ", ".join(str(t) for t in result.targets)
    if best is None:
        return f"no configuration meets the SLOs ({slo})"
    record = best.record or {}
    units = record.get("num_units")
    per_unit = "replica" if best.candidate.split is None else "prefill/decode unit"
    sized = best.sized_rate_per_s or result.target_rate_per_s
    headroom_pct = 100 * (sized / result.target_rate_per_s - 1)
    sized_for = (
        f" (sized for {figure(sized, 4)}: +{headroom_pct:.1f} % headroom)"
        if sized > result.target_rate_per_s
        else ""
    )
    target = figure(result.target_rate_per_s, None)
    return (
        f"cheapest for {target} req/s{sized_for} within {slo}: {units} x "
        f"{best.candidate.label} ({per_unit}s of {best.num_gpus} GPU"
        f"{'s' if best.num_gpus != 1 else ''}): {record.get('num_gpus_total')} GPUs, "
        f"${record.get('usd_per_hour'):.2f}/hour, "
        f"${_num(record.get('usd_per_million_output_tokens'), '.3f')} per million output "
        f"tokens ({best.cost_model}; prices approximate, {PRICES_AS_OF}); "
        + _binding(record)
        + (f"\n  model error: {best.model_error.text}" if best.model_error else "")
        + "".join(f"\n  caveat: {caveat}" for caveat in record.get("caveats") or [])
    )


def _binding(record: dict[str, Any]) -> str:
    """Which constraint decided the capacity, and on runs of how many requests."""
    binding = record.get("binding_constraint")
    runs = f"runs of {record.get('requests_per_run')} requests"
    if not binding:
        return f"no constraint bound its capacity ({record.get('stop_reason')}; {runs})"
    return f"capacity bound by {binding} ({runs})"


def outcome_doc(outcome: Outcome) -> dict[str, Any]:
    """One configuration in ``plan.json``."""
    c = outcome.candidate
    return {
        "gpu": c.gpu,
        "tensor_parallel_size": c.tensor_parallel_size,
        "max_num_seqs": c.max_num_seqs,
        "max_num_batched_tokens": c.max_num_batched_tokens,
        "chunked_prefill": c.chunked_prefill,
        "disaggregation": None
        if c.split is None
        else {"prefill": c.split[0], "decode": c.split[1]},
        "gpus_per_unit": outcome.num_gpus,
        "status": outcome.status,
        "reason": outcome.reason or None,
        "cost_model": outcome.cost_model or None,
        "cost_model_choice": outcome.cost_model_detail or None,
        "model_error": outcome.model_error.to_json() if outcome.model_error else None,
        "sized_rate_per_s": outcome.sized_rate_per_s,
        "gpu_price_per_hour": outcome.price_per_gpu_hour,
        "optimistic_rate_per_s": outcome.bound_rate_per_s,
        "optimistic_usd_per_hour": outcome.bound_usd_per_hour,
        "search": outcome.record,
    }


def to_json(
    result: PlanResult, scenario_label: str, plan_file: str | None, cost_model: str
) -> dict[str, Any]:
    """Everything the plan did, for ``plan.json``."""
    best = result.best
    error = best.model_error if best is not None else None  # the best one's cost source's
    counts = Counter(o.status for o in result.outcomes)
    doc = {
        "scenario": scenario_label,
        "plan_file": plan_file,
        "cost_model_choice": cost_model,
        "slo": {t.name: t.limit_ms for t in result.targets},
        "target_rate_per_s": result.target_rate_per_s,
        "requests_per_run": result.num_requests,
        "seeds_per_load": result.seeds,
        "workers": result.workers,
        "executor": result.executor,
        "num_configurations": len(result.outcomes),
        "num_searched": counts.get("searched", 0),
        "num_skipped": counts.get("skipped", 0),
        "num_refused": counts.get("refused", 0),
        "num_simulations": result.num_simulations,
        "wall_s": result.wall_s,
        "prices_as_of": PRICES_AS_OF,
        "warnings": list(result.warnings),
        "best": outcome_doc(best) if best is not None else None,
        "ranked": [outcome_doc(o) for o in result.ranked()],
        "configurations": [outcome_doc(o) for o in result.outcomes],
        "model_error": error.to_json() if error is not None else None,
        "headroom": {
            "pct": result.headroom_pct,  # null: each configuration's own, in its sized_rate_per_s
            "source": "--headroom"
            if result.headroom_pct is not None
            else "each configuration's model error",
            "target_rate_per_s_asked": result.target_rate_per_s,
        },
    }
    if error is not None and error.validated is None:
        doc["caveats"] = [f"model error: {error.text}"]
    return cast(dict[str, Any], jsonable(doc))  # non-finite floats as null


def _anchor_paths(doc: dict[str, Any], base_dir: Path | None) -> None:
    """Anchor every relative path the scenario names (a model's config folder, an engine
    CPU artifact, the cost's files, a trace, length files) at its own folder, as absolute
    ones (``anchored``), so that best.yaml runs from ``--out``."""

    def anchor(section: Any, key: str, name_or_path: bool = False) -> None:
        value = section.get(key) if isinstance(section, dict) else None
        if not isinstance(value, str):
            return
        path = anchored(value, base_dir)
        # A value that may be a name (a preset, a shipped artifact) is a path only when
        # it names something beside the scenario.
        if not name_or_path or path.exists():
            section[key] = str(path.resolve())

    if isinstance(doc.get("model"), str) and doc["model"] not in MODEL_PRESETS:
        anchor(doc, "model", name_or_path=True)
    anchor(doc.get("engine"), "cpu_artifact")
    cost = doc.get("cost")
    anchor(cost, "artifact", name_or_path=True)
    anchor(cost, "architecture", name_or_path=True)
    anchor(cost, "data_dir")
    workload = doc.get("workload", {})
    anchor(workload, "path")
    for key in ("prompt_tokens", "output_tokens"):
        anchor(workload.get(key), "path")


def best_scenario(
    result: PlanResult, scenario: Scenario, source_doc: dict[str, Any]
) -> dict[str, Any] | None:
    """The top configuration's fleet at the target rate, as a scenario document written
    over the user's own (``source_doc``: ``scenario``'s file, overrides applied), so
    best.yaml reads like their file."""
    best = result.best
    if best is None or best.scenario_doc is None or best.record is None:
        return None
    searched, c = best.scenario_doc, best.candidate
    doc = copy.deepcopy(source_doc)
    units = int(best.record["num_units"])
    doc["name"] = f"{scenario.name}-best"
    doc["description"] = (
        f"servesim plan's cheapest fleet for {result.target_rate_per_s:g} req/s within "
        + ", ".join(str(t) for t in result.targets)
        + f": {units} x {c.label}"
    )
    doc["hardware"] = searched["hardware"]
    doc["parallelism"] = c.parallelism(doc.get("parallelism"))
    # continuous: the only kind a plan searches
    doc["scheduler"] = {"kind": "continuous", **(doc.get("scheduler") or {}), **c.scheduler_fields}
    if searched["cost"].get("kind") != (doc.get("cost") or {}).get("kind", "auto"):
        doc["cost"] = searched["cost"]
    if searched.get("slo") is not None:
        doc["slo"] = searched["slo"]  # goodput counts requests within the plan's limits
    workload = doc["workload"]
    workload["arrival"] = {**workload["arrival"], "rate_per_s": result.target_rate_per_s}
    _anchor_paths(doc, scenario.base_dir)
    if c.split is None:
        if units > 1:
            doc["cluster"] = {"num_replicas": units, "router": BEST_ROUTER}
    else:
        split = dict(searched["cluster"]["disaggregation"])
        split["num_prefill_replicas"] = c.split[0] * units
        split["num_decode_replicas"] = c.split[1] * units
        total = split["num_prefill_replicas"] + split["num_decode_replicas"]
        doc["cluster"] = {"num_replicas": total, "router": BEST_ROUTER, "disaggregation": split}
    return doc


def write_outputs(doc: dict[str, Any], best: dict[str, Any] | None, out_dir: Path) -> list[Path]:
    """``plan.json`` and, when there is a best configuration, ``best.yaml``."""
    paths = [write_json(doc, out_dir, "plan.json")]
    if best is not None:
        path = out_dir / "best.yaml"
        header = f"# {best['description']}\n# Replay: servesim run {path}\n"
        path.write_text(header + yaml.safe_dump(best, sort_keys=False))
        paths.append(path)
    return paths
