"""Leave one run out: the engine-CPU fit on three public vLLM runs, the fourth predicted.

    python benchmarks/engine_cpu_loro.py --out docs/validation/engine-cpu-loro [--max-evals 25]

The four public runs (``benchmarks/public_runs.py``: LLMServingSim's vLLM
0.19 runs, RTX 4090 Llama-3.1-8B, RTX PRO 6000 Llama-3.1-8B, Qwen3-32B TP 2
and Qwen3-30B-A3B DP 2 x EP 2) each replayed by its shipped scenario, its
kernel tables as the GPU-only base: the engine's CPU work is the same vLLM
on (two) hosts of the same kind, so its coefficients should carry from one
model to another where the GPU's part is priced by each run's own tables.

Each run is built as ``calibrate --from-run --scenario`` builds it
(``sim.validation.fit_runs.replay_runs``): TTFT counted from the engine's intake,
as vLLM counts it from ``queued_ts`` (``sim.validation.intake``), and the DP 2 run
replayed on its scenario's two engines in lockstep behind its router. That run
is never fitted to, only predicted. So:

1. Which of the default free set (``sim.validation.fit.DEFAULT_CPU_FREE``) the three
   one-engine runs identify (``sim.validation.identify``, at the vLLM 0.19
   estimate); the rest stay at the estimate.
2. Per one-engine run: ``fit_engine_cpu`` on the other two, then the held-out
   run's p50/p90/p99 TTFT and TPOT errors with the estimate (base) and with
   the fold's coefficients.
3. The fit on all three one-engine runs, each coefficient with its interval,
   predicting the fourth run, the DP 2 one (fit on three, predict the fourth).

Writes ``loro.json`` and ``loro.md`` under ``--out``. Minutes on 2 cores
(``--max-evals`` simulations of three runs per fold).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.scenario import load_scenario  # noqa: E402
from sim.validation import identify  # noqa: E402
from sim.validation.fit import (  # noqa: E402
    DEFAULT_CPU_FREE,
    FitRun,
    Target,
    engine_cpu_start,
    fit_engine_cpu,
    target_rows,
)
from sim.validation.fit_runs import replay_runs  # noqa: E402

EXAMPLES = ROOT / "validation" / "public" / "llmservingsim" / "bench" / "examples"
# The three one-engine runs the fit replays, then the DP 2 run it only predicts.
RUNS = (
    ("rtx4090-llama-3.1-8b", "RTX4090/Llama-3.1-8B", "rtx4090_llama31_8b.yaml"),
    ("rtxpro6000-llama-3.1-8b", "RTXPRO6000/Llama-3.1-8B", "rtxpro6000_llama31_8b.yaml"),
    ("rtxpro6000-qwen3-32b-tp2", "RTXPRO6000/Qwen3-32B", "rtxpro6000_qwen3_32b_tp2.yaml"),
    (
        "rtxpro6000-qwen3-30b-a3b-dp2-ep2",
        "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507",
        "rtxpro6000_qwen3_30b_a3b_dp2_ep2.yaml",
    ),
)


def fit_run(name: str, folder: str, scenario_file: str) -> FitRun:
    """One public run ready to replay, as ``servesim calibrate --from-run --scenario``
    builds it (``replay_runs``: the GPU-only base, the engine CPU, the run's marks)."""
    path = ROOT / "scenarios" / "public" / scenario_file
    model = load_scenario(path).model
    source = str(EXAMPLES / folder)
    (run,) = replay_runs([source], model, None, str(path), "engine-cpu").runs
    return dataclasses.replace(run, name=name)


def coefficients_text(values: dict[str, float], free: tuple[str, ...]) -> str:
    return ", ".join(f"{name} {values[name] * 1e6:.1f} us" for name in free)


def cells(errors: dict[str, float | None]) -> str:
    return " / ".join("n/a" if e is None else f"{e:+.1f} %" for e in errors.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-evals", type=int, default=25)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    *runs, cluster = [fit_run(*spec) for spec in RUNS]
    everything = [Target(i) for i in range(len(runs))]
    problems = identify.identification_problems(runs, everything, DEFAULT_CPU_FREE)
    free = identify.identified(DEFAULT_CPU_FREE, problems)
    for _, why in problems:
        print(f"not fitted: {why}", flush=True)
    print(f"free: {', '.join(free)} ({time.monotonic() - started:.0f} s)", flush=True)
    base = engine_cpu_start(runs)
    folds: list[dict[str, Any]] = []

    def report(held_out: str, fitted: dict[str, float], rows: list[Any], on: str) -> None:
        folds.append({"held_out": held_out, "fitted_on": on, "coefficients": fitted, "rows": rows})
        print(
            f"leave out {held_out} (fitted on {on}): {coefficients_text(fitted, free)} "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        for row in rows:
            print(
                f"  {row['metric']}: base {cells(row['base_err_pct'])}, "
                f"fitted {cells(row['fitted_err_pct'])}",
                flush=True,
            )

    for k, run in enumerate(runs):
        train = [Target(i) for i in range(len(runs)) if i != k]
        outcome = fit_engine_cpu(runs, train, free, args.max_evals)
        rows = target_rows(runs, [Target(k)], outcome.params, base)
        on = ", ".join(runs[t.run].name for t in train)
        report(run.name, outcome.params.cpu.model_dump(), rows, on)
    final = fit_engine_cpu(runs, everything, free, args.max_evals)
    fitted = final.params.cpu.model_dump()
    rows = target_rows([cluster], [Target(0)], final.params, base)
    report(cluster.name, fitted, rows, ", ".join(run.name for run in runs))
    spans = identify.intervals(runs, everything, free, final.params)
    result = {
        "free": list(free),
        "not_identified": [why for _, why in problems],
        "start": base.cpu.model_dump(),
        "folds": folds,
        "three_runs": {
            "coefficients": fitted,
            "intervals": [s.model_dump() for s in spans],
            "interval_method": identify.INTERVAL_METHOD,
        },
        "max_evals": args.max_evals,
    }
    (args.out / "loro.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "| held-out run | fitted on | coefficients | metric | base p50 / p90 / p99 "
        "| fitted p50 / p90 / p99 |",
        "|---|---|---|---|---|---|",
    ]
    for fold in folds:
        for i, row in enumerate(fold["rows"]):
            head = (
                f"{fold['held_out']} | {fold['fitted_on']} | "
                f"{coefficients_text(fold['coefficients'], free)}"
                if i == 0
                else " | | "
            )
            lines.append(
                f"| {head} | {row['metric']} | {cells(row['base_err_pct'])} | "
                f"{cells(row['fitted_err_pct'])} |"
            )
    lines += ["", "The three one-engine runs (" + identify.INTERVAL_METHOD + "):", ""]
    lines += ["| coefficient | value | std error | 95 % interval |", "|---|---|---|---|"]
    for s in spans:
        error = "n/a" if s.std_error_s is None else f"{s.std_error_s * 1e6:.1f} us"
        span = (
            "n/a"
            if s.low_s is None or s.high_s is None
            else f"{s.low_s * 1e6:.1f} .. {s.high_s * 1e6:.1f} us"
        )
        lines.append(f"| {s.name} | {s.value_s * 1e6:.1f} us | {error} | {span} |")
    (args.out / "loro.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}/loro.json and loro.md in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
