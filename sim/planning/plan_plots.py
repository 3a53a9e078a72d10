"""The plan's figure: fleet cost against capacity per GPU, the Pareto front marked.

Fleet dollars per hour on a log scale (fleets differ by multiples). Hollow points had
an SLO's mean past its limit at the target's share per unit (the search's estimate is
noisy near capacity, so a fleet sized on it may sit just past a limit).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from sim.metrics.figure_data import caption_line
from sim.planning.plan import PlanResult
from sim.planning.sweep_plots import save_figure, top_caption
from sim.planning.sweep_report import pareto_mask

FIGURE_NAME = "cost_vs_capacity.png"


def plan_caption(result: PlanResult, scenario_name: str, model: str) -> str:
    """The figure's caption line (``caption_line``): scenario, model, the GPUs plotted
    and what priced each (``Outcome.cost_model``, ``cost_model_tag``'s words), so that a
    roofline guess cannot pass for a measurement. The sources are parted by " · ", where
    a long caption wraps."""
    ranked = result.ranked()
    gpus = list(dict.fromkeys(o.candidate.gpu for o in ranked))
    priced: dict[str, list[str]] = {}  # a cost source's words: the GPUs it priced
    for outcome in ranked:
        on = priced.setdefault(outcome.cost_model, [])
        if outcome.candidate.gpu not in on:
            on.append(outcome.candidate.gpu)
    sources = " · ".join(f"{tag}: {', '.join(sorted(on))}" for tag, on in sorted(priced.items()))
    return caption_line(
        f"scenario {scenario_name}",
        model,
        f"{len(gpus)} GPU type{'s' if len(gpus) != 1 else ''}",
        sources or "?",
    )


def plot_plan(result: PlanResult, out_dir: Path, caption: str = "") -> Path | None:
    """``cost_vs_capacity.png`` in ``out_dir``; None when no configuration has a fleet.
    ``caption`` (``plan_caption``) tops the figure."""
    ranked = result.ranked()
    if not ranked:
        return None
    records = [o.record or {} for o in ranked]
    x = np.array([float(r["capacity_per_gpu"]) for r in records])
    y = np.array([float(r["usd_per_hour"]) for r in records])
    met = np.array([bool(r.get("at_target_within_slos")) for r in records])
    gpus = [o.candidate.gpu for o in ranked]
    fig = Figure(figsize=(7.5, 5))
    ax = fig.add_subplot()
    for index, gpu in enumerate(dict.fromkeys(gpus)):
        mine = np.array([g == gpu for g in gpus])
        color = f"C{index % 10}"
        ax.scatter(x[mine & met], y[mine & met], s=30, color=color, label=gpu)
        if np.any(mine & ~met):
            ax.scatter(x[mine & ~met], y[mine & ~met], s=30, facecolors="none", edgecolors=color)
    front = pareto_mask(x, y)  # more capacity per GPU, a cheaper fleet
    order = np.argsort(x[front])
    ax.plot(x[front][order], y[front][order], "k-", lw=1, drawstyle="steps-pre")
    ax.scatter(x[front], y[front], s=90, facecolors="none", edgecolors="k", label="Pareto front")
    ax.scatter(
        [x[0]], [y[0]], marker="*", s=260, color="gold", edgecolors="k", zorder=5, label="cheapest"
    )
    if np.any(~met):
        ax.scatter(
            [],
            [],
            s=30,
            facecolors="none",
            edgecolors="grey",
            label="hollow: an SLO's mean past its limit at the target load",
        )
    no_capacity = sum(1 for o in result.searched if o.usd_per_hour is None)
    skipped = sum(1 for o in result.outcomes if o.status in ("skipped", "refused"))
    ax.set_title(
        f"fleet for {result.target_rate_per_s:g} req/s: {len(ranked)} configurations with a "
        f"fleet, {no_capacity} missing the SLOs even at low load, {skipped} skipped or refused",
        fontsize=9,
    )
    top_caption(fig, caption)
    ax.set_xlabel("capacity per GPU (req/s within the SLOs)")
    ax.set_ylabel("fleet cost ($/hour, log scale)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out_dir / FIGURE_NAME)
