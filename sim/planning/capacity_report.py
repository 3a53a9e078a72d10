"""What a capacity search means for a fleet, as text and as ``capacity.json``.

A fleet for a target rate R is ``ceil(R / capacity)`` replicas behind a perfect load
balancer, not simulated (docs/capacity.md, "Reading the numbers").
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from sim.cost.label import cost_model_tag
from sim.cost.model_error import ModelError
from sim.metrics.report import jsonable
from sim.metrics.slo_targets import per_request_slo
from sim.planning.capacity import CapacitySearch, LoadPoint, capacity_rate_per_s
from sim.planning.pricing import usd_per_unit


@dataclass(frozen=True)
class Fleet:
    """Replicas, GPUs and cost to serve ``target_rate_per_s``."""

    target_rate_per_s: float
    capacity_rate_per_s: float
    num_replicas: int
    num_replicas_at_lower_bound: int | None
    num_gpus: int
    gpu_price_per_hour: float | None
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None


def units_for(target_rate_per_s: float, rate_per_s: float) -> int:
    """Replicas (or units) of ``rate_per_s`` each that serve ``target_rate_per_s``: the
    1e-9 forgives float noise just above a whole number, and a positive target still
    needs one however small it is."""
    return max(1, math.ceil(target_rate_per_s / rate_per_s - 1e-9))


def figure(x: float, digits: int | None = 3) -> str:
    """``x`` for a printout, to ``digits`` significant digits (None: exactly, as given)
    with no exponent from 1e-3 to 1e15 and no trailing zeros: 1234 clients, not .3g's
    1.23e+03, so a reader's arithmetic on the printed figures checks out."""
    if digits is None or not math.isfinite(x) or not 1e-3 <= abs(x) < 1e15:
        text = repr(float(x)) if digits is None else f"{x:.{digits}g}"
    else:
        text = f"{x:.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"
    return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text


def divisor_text(target_rate_per_s: float, rate_per_s: float, num_units: int) -> str:
    """``rate_per_s`` to the fewest digits (3 up) whose quotient a reader's ceil takes to
    ``num_units``: 19.996 req/s for 2 units of 20, not a "20" that reads as 1."""
    for digits in range(3, 18):
        text = figure(rate_per_s, digits)
        if max(1, math.ceil(target_rate_per_s / float(text))) == num_units:
            break
    return text


def output_tokens_per_request(point: LoadPoint | None) -> float | None:
    """Mean generated tokens per completed request at ``point``."""
    if point is None:
        return None
    total, done = point.mean_of("total_output_tokens"), point.mean_of("completed")
    return total / done if total is not None and done else None


def fleet_for(
    search: CapacitySearch,
    target_rate_per_s: float,
    gpus_per_replica: int,
    gpu_price_per_hour: float | None,
    sized_rate_per_s: float | None = None,
) -> Fleet | None:
    """Fleet for a target rate; ``None`` when the search found no usable capacity.
    ``sized_rate_per_s``: the rate its replicas are counted for (plan's target plus its
    headroom; default the target); its output and cost per token are the target's."""
    rate = capacity_rate_per_s(search, search.at_estimate)
    if rate is None or rate <= 0:
        return None
    lower_point = next((p for p in search.points if p.load == search.interval[0]), None)
    # One seed gives no confidence interval, so no fleet "at the interval's low end".
    lower_rate = capacity_rate_per_s(search, lower_point) if has_interval(search) else None
    sized = target_rate_per_s if sized_rate_per_s is None else sized_rate_per_s
    num_replicas = units_for(sized, rate)
    at_lower = units_for(sized, lower_rate) if lower_rate else None
    num_gpus = num_replicas * gpus_per_replica
    usd_hour = usd_mtok = None
    if gpu_price_per_hour is not None:
        usd_hour = num_gpus * gpu_price_per_hour
        tokens = output_tokens_per_request(search.at_estimate)
        if tokens:  # the fleet's whole output at the target rate, on its GPUs
            usd_mtok = 1e6 * usd_per_unit(target_rate_per_s * tokens, num_gpus, gpu_price_per_hour)
    return Fleet(
        target_rate_per_s,
        rate,
        num_replicas,
        at_lower,
        num_gpus,
        gpu_price_per_hour,
        usd_hour,
        usd_mtok,
    )


def full_load_usd_per_million_tokens(
    search: CapacitySearch, gpus_per_replica: int, price: float | None
) -> float | None:
    """Dollars per million output tokens of one replica running exactly at capacity
    (None: no price, or no capacity or tokens to divide by)."""
    rate = capacity_rate_per_s(search, search.at_estimate)
    tokens = output_tokens_per_request(search.at_estimate)
    if price is None or not rate or not tokens:
        return None
    return 1e6 * usd_per_unit(rate * tokens, gpus_per_replica, price)


def has_interval(search: CapacitySearch) -> bool:
    """Whether the search has a confidence interval: two seeds or more (with one, or a
    trace replay, the bracket is only where the search stopped bisecting)."""
    return len(search.seeds) >= 2


def _ms(point: LoadPoint, name: str) -> str:
    mean, half = point.means[name], point.half_widths[name]
    if not math.isfinite(mean):
        return "inf"
    return f"{mean:.1f} ± {half:.1f}" if len(point.records) >= 2 else f"{mean:.1f}"


def format_points(search: CapacitySearch) -> str:
    """Every evaluated load, sorted, with its verdict and target statistics."""
    names = [t.name for t in search.targets]
    header = f"{'load (' + search.knob.unit + ')':>16}  {'verdict':8}" + "".join(
        f"{n:>22}" for n in names
    )
    served = any(p.served is not None for p in search.points)
    lines = [header + (f"{'served ratio':>16}" if served else "")]
    for point in sorted(search.points, key=lambda p: p.load):
        cells = "".join(f"{_ms(point, n):>22}" for n in names)
        if point.served is not None:
            spread = f" ± {point.served[1]:.2f}" if len(point.records) >= 2 else ""
            cells += f"{point.served[0]:>9.2f}{spread}"
        lines.append(f"{point.load:16.3f}  {point.status:8}{cells}")
    return "\n".join(lines)


def _interval_text(search: CapacitySearch, low: float, high: float) -> str:
    """The 95% interval, or why there is none (one seed) and the search's bracket."""
    if has_interval(search):
        return f"95% interval {figure(low)} .. {figure(high)}"
    why = "a trace replay: one run per load" if search.knob.kind == "time_scale" else "one seed"
    return (
        f"no confidence interval from {why}; the search bracketed it in "
        f"{figure(low)} .. {figure(high)}"
        + ("" if search.knob.kind == "time_scale" else "; use --seeds 2 or more for one")
    )


def cost_models(search: CapacitySearch) -> list[str]:
    """The cost models that priced the search's simulations, in the order first met."""
    names = (r.get("cost_model") for p in search.points for r in p.records)
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


def cost_sources(search: CapacitySearch) -> list[str]:
    """Those cost models in the words every face uses (measured or a guess), each once."""
    return list(dict.fromkeys(cost_model_tag(name) for name in cost_models(search)))


def binding_text(search: CapacitySearch) -> str:
    """Which constraint bound the answer: the one failing at the bracket's upper end."""
    upper = search.cell[1]
    if search.binding is None or upper is None:
        return "no constraint failed at the loads searched"
    where = f"{figure(upper)} {search.knob.unit}"
    return f"{search.binding}, the first past its limit on average, at {where}"


def format_capacity(
    search: CapacitySearch,
    scenario_label: str,
    fleet: Fleet | None,
    gpus_per_replica: int,
    price: float | None,
    model_error: ModelError | None = None,
    *,
    price_given: bool = False,
) -> str:
    """The human-readable report; ``model_error``: the cost source's validated error,
    printed beside the interval (a caveat where it has none); ``price_given``: the user
    set ``price`` (``--gpu-price-per-hour``), so it is not the table's approximation."""
    knob, unit = search.knob, search.knob.unit
    row = "{:<24}{}".format
    lines = ["=" * 20 + " Capacity " + "=" * 20, row("scenario:", scenario_label)]
    names = cost_models(search)
    lines.append(row("cost model:", "; ".join(names) or "none ran"))
    lines.append(row("cost source:", "; ".join(cost_sources(search)) or "none ran"))
    lines.append(row("load knob:", knob.key))
    lines.append(row("SLOs:", ", ".join(str(t) for t in search.targets)))
    lines.append(row("seeds per load:", f"{len(search.seeds)} {list(search.seeds)}"))
    est, (lo, hi) = search.estimate, search.interval
    if not est:  # no load held on average
        lines.append(row("capacity:", f"0 {unit}: {search.stop_reason}"))
    elif lo is not None and hi is not None:
        lines.append(row("capacity:", f"{figure(est)} {unit}  ({_interval_text(search, lo, hi)})"))
    else:
        # An end of the interval missing: the answer is still the estimate (capacity.json's,
        # the fleet's); with no load past a limit even on average it is a lower bound only.
        failed = search.cell[1] is not None
        sure = " with 95% confidence" if has_interval(search) else ""
        low = f"{figure(lo)} passed{sure}" if lo is not None else f"no load passed{sure}"
        high = f"{figure(hi)} failed{sure}" if hi is not None else f"no load failed{sure}"
        high = high if failed else "no SLO failure found"
        answer = f"{'' if failed else '>= '}{figure(est)} {unit}  ({low}; {high})"
        lines.append(row("capacity:", answer))
    if model_error is not None:
        lines.append(row("model error:", model_error.text))
    rate = capacity_rate_per_s(search, search.at_estimate)
    if knob.kind == "concurrency" and est and rate is not None:
        served = f"{search.estimate:.0f} concurrent clients are served within the SLOs at"
        lines.append(row("", f"{served} {figure(rate)} req/s (sent while all are busy)"))
    searched = f"{len(search.points)} loads, {search.num_sims} simulations"
    lines.append(row("search:", f"{search.stop_reason}; {searched}"))
    lines.append(row("bound by:", binding_text(search)))
    for caveat in caveats(search, model_error):
        lines.append(row("CAVEAT:", caveat))
    point = search.at_estimate
    if point is not None:
        stats = ", ".join(f"{n} {_ms(point, n)}" for n in point.means)
        lines.append(row(f"at {figure(point.load)} {unit}:", stats))
        slo = per_request_slo(search.targets)
        good, thr = point.mean_of("request_goodput"), point.mean_of("request_throughput")
        if good is not None and slo is not None:
            within = ", ".join(
                f"{k.removesuffix('_ms')} <= {v:g} ms"
                for k, v in slo.model_dump(exclude_none=True).items()
            )
            share = f", {good / thr:.1%} of completed requests" if thr else ""
            lines.append(row("goodput:", f"{figure(good)} req/s{share} with {within}"))
    if fleet is not None:
        target, rate = fleet.target_rate_per_s, fleet.capacity_rate_per_s
        lines.append("-" * 16 + f" Fleet for {figure(target, None)} req/s " + "-" * 16)
        at_lower = fleet.num_replicas_at_lower_bound
        low_end = f"; {at_lower} at the interval's low end" if at_lower else ""
        ceil = f"ceil({figure(target, None)} / {divisor_text(target, rate, fleet.num_replicas)})"
        lines.append(row("replicas:", f"{fleet.num_replicas} = {ceil}{low_end}"))
        balancer = (
            "an estimate assuming a perfect load balancer; simulate the fleet "
            "behind a router with a cluster: block (scenarios/replicas.yaml)"
        )
        lines.append(row("", balancer))
        lines.append(row("GPUs:", f"{fleet.num_gpus} ({fleet.num_replicas} x {gpus_per_replica})"))
    if price is not None:
        source = "as given" if price_given else "approximate; set --gpu-price-per-hour"
        lines.append(row("GPU price:", f"${price:.2f}/GPU-hour ({source})"))
        if fleet is not None and fleet.usd_per_hour is not None:
            mtok = fleet.usd_per_million_output_tokens
            per_token = f", ${mtok:.3f} per million output tokens" if mtok else ""
            lines.append(row("cost:", f"${fleet.usd_per_hour:.2f}/hour" + per_token))
        one = full_load_usd_per_million_tokens(search, gpus_per_replica, price)
        if one is not None:
            lines.append(row("at full load:", f"${one:.3f} per million output tokens"))
    lines.append("=" * 50)
    return "\n".join(lines)


def caveats(search: CapacitySearch, model_error: ModelError | None) -> list[str]:
    """The search's caveats, and the cost source's lack of a validated error."""
    if model_error is None or model_error.validated is not None:
        return list(search.caveats)
    return [*search.caveats, f"model error: {model_error.text}"]


def to_json(
    search: CapacitySearch,
    fleet: Fleet | None,
    scenario_label: str,
    model_error: ModelError | None = None,
    run_length: str | None = None,
    gpus_per_replica: int = 1,
    price: float | None = None,
) -> dict[str, Any]:
    """Everything the search did, for ``capacity.json`` (non-finite numbers as null);
    ``run_length``: the line saying the runs were lengthened (``RunLength.raised``);
    ``price``: per GPU-hour, as the printout's (its "at full load" figure too)."""

    def point_doc(p: LoadPoint) -> dict[str, Any]:
        return {
            "load": p.load,
            "status": p.status,
            "worst_ratio_to_limit": p.ratio,
            "mean": p.means,
            "ci95_half_width": {
                k: v if len(p.records) >= 2 else None for k, v in p.half_widths.items()
            },
            "request_throughput": p.mean_of("request_throughput"),
            "request_goodput": p.mean_of("request_goodput"),
            "served_ratio": p.served[0] if p.served is not None else None,
            "binding": p.binding or None,
        }

    doc = {
        "scenario": scenario_label,
        "cost_models": cost_models(search),
        "cost_sources": cost_sources(search),
        "load_key": search.knob.key,
        "load_unit": search.knob.unit,
        "slo": {t.name: t.limit_ms for t in search.targets},
        "seeds": list(search.seeds),
        "run_length": run_length,
        "capacity": search.estimate,
        "ci95_lower": search.interval[0] if has_interval(search) else None,
        "ci95_upper": search.interval[1] if has_interval(search) else None,
        "bracket_lower": search.interval[0],
        "bracket_upper": search.interval[1],
        "capacity_rate_per_s": capacity_rate_per_s(search, search.at_estimate),
        "at_capacity": point_doc(search.at_estimate) if search.at_estimate else None,
        "stop_reason": search.stop_reason,
        "binding_constraint": search.binding,
        "model_error": model_error.to_json() if model_error is not None else None,
        "caveats": caveats(search, model_error),
        "num_simulations": search.num_sims,
        "points": [point_doc(p) for p in sorted(search.points, key=lambda p: p.load)],
        "fleet": asdict(fleet) if fleet is not None else None,
        "gpu_price_per_hour": price,
        "usd_per_million_output_tokens_at_capacity": full_load_usd_per_million_tokens(
            search, gpus_per_replica, price
        ),
    }
    return cast(dict[str, Any], jsonable(doc))  # strict JSON: NaN and inf as null


def write_json(doc: dict[str, Any], out_dir: str | Path, name: str = "capacity.json") -> Path:
    """``doc`` as ``name`` in ``out_dir`` (made if need be): ``capacity.json``, ``plan.json``;
    ValueError for a NaN or infinity, which strict JSON has no spelling for."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return path
