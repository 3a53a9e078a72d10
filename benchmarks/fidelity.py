"""The fidelity study: measured runs of a small real model on CPU vs the simulator.

One command reproduces ``docs/validation.md``'s numbers and plots::

    python benchmarks/fidelity.py --out docs/validation/smollm2

Steps (15-17 minutes on a 2-core machine, SmolLM2-135M by default):

1. calibrate: ``servesim calibrate --model smollm2-135m --grid compact
   --temperature 0`` (microbenchmarks of ``forward_step``, greedy like the
   engine), into the work folder; every prediction below uses this artifact;
2. measure the saturation throughput (per chunking mode): arrivals at three
   times the simulated capacity, requests finished per second after a warm-up;
   the simulation of the same requests, counted the same way, beside it;
3. measure one extra run (another seed, 50 % load) whose step log fits the
   engine overhead: the second, still out-of-sample, calibration source;
4. for chunked prefill on and off, at 30 %, 60 % and 90 % of the measured
   saturation: measure Poisson arrivals (about ``--num-requests`` per run),
   simulate exactly those requests, compare; the 60 % chunked run is measured
   twice, the second run giving the noise floor.

``--scenario scenarios/validate_tiny_cpu.yaml --grid default`` runs the same
study on the 12.9M-parameter ``tiny`` model. Writes ``results.json``,
``results.md`` and one CDF plot per run into ``--out``; raw measured runs go to
``--work`` (default ``runs/fidelity``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.compare_measured import DRIFT_FACT, load_measured, validate, write_validation  # noqa: E402
from calibration.measure import Device, measure  # noqa: E402
from sim import api  # noqa: E402
from sim.cost.calibrated import CalibratedCost, load_artifact  # noqa: E402
from sim.metrics.report import summary_to_json  # noqa: E402
from sim.scenario import Scenario, load_scenario  # noqa: E402
from sim.validation.formats.measure_dir import MeasureFolder  # noqa: E402
from sim.validation.predict import within_targets  # noqa: E402

SCENARIO = ROOT / "scenarios" / "validate_smollm2_cpu.yaml"
LOADS = (0.3, 0.6, 0.9)


@dataclass(frozen=True)
class Setup:
    """What the study measures: scenario file, device, and calibration settings."""

    scenario: Path
    device: str
    dtype: str | None
    grid: str
    extra: tuple[str, ...]  # --set overrides applied to every run

    def base(self) -> Scenario:
        return load_scenario(self.scenario, list(self.extra))


def _scenario(
    setup: Setup, artifact: Path, chunked: bool, rate: float, duration_s: float, seed: int
) -> Scenario:
    base = setup.base()
    chunk_budget = getattr(base.scheduler, "max_num_batched_tokens", 256)
    budget = chunk_budget if chunked else base.engine.max_model_len_tokens
    return load_scenario(
        setup.scenario,
        [
            *setup.extra,
            f"cost.artifact={artifact.resolve()}",
            f"scheduler.chunked_prefill={str(chunked).lower()}",
            f"scheduler.max_num_batched_tokens={budget}",
            f"workload.arrival.rate_per_s={rate:.4f}",
            f"workload.duration_s={duration_s}",
            f"seed={seed}",
        ],
    )


def _capacity_guess_per_s(setup: Setup, artifact: Path, chunked: bool) -> float:
    """Request throughput the calibrated simulator sustains when everything arrives at once."""
    scenario = _scenario(setup, artifact, chunked, rate=1000.0, duration_s=2.0, seed=0)
    return float(api.run(scenario).summary["request_throughput"] or 0.0)


def _window_rate_per_s(finish_s: np.ndarray, duration_s: float) -> float:
    """Finishes per second in the window [duration_s / 3, duration_s]."""
    start_s = duration_s / 3.0
    inside = (finish_s >= start_s) & (finish_s <= duration_s)
    return float(inside.sum() / (duration_s - start_s))


def saturation_per_s(
    setup: Setup, artifact: Path, chunked: bool, duration_s: float
) -> tuple[float, float]:
    """Requests finished per second under overload: (measured, simulated).

    Arrivals come at 3x the simulator's capacity guess for ``duration_s``; the
    real engine stops at ``duration_s``. Finishes are counted after the first
    third (while the batch fills up) until ``duration_s``, on the real engine
    and on the simulation of the same requests alike, so the two capacities
    are measured the same way.
    """
    rate = 3.0 * _capacity_guess_per_s(setup, artifact, chunked)
    scenario = _scenario(setup, artifact, chunked, rate, duration_s, seed=7)
    device: Device = "cuda" if setup.device == "cuda" else "cpu"
    measurement = measure(
        scenario,
        device,
        dtype=setup.dtype,
        base_dir=setup.scenario.parent,
        progress=False,
        max_duration_s=duration_s,
        probe=False,
    )
    measured = measurement.requests["finish_s"].dropna().to_numpy()
    simulated = api.run(scenario).requests["finish_s"].dropna().to_numpy()
    return _window_rate_per_s(measured, duration_s), _window_rate_per_s(simulated, duration_s)


def _measure(setup: Setup, scenario: Scenario, out: Path) -> MeasureFolder:
    started = time.perf_counter()
    device: Device = "cuda" if setup.device == "cuda" else "cpu"
    measurement = measure(
        scenario, device, dtype=setup.dtype, base_dir=setup.scenario.parent, progress=False
    )
    measurement.write(out)
    s = measurement.summary
    print(
        f"  measured {out.name}: {s['completed']} requests"
        f" in {time.perf_counter() - started:.0f} s,"
        f" forward CPU share {s['forward_cpu_share']}, load avg {s['load_average_after']}",
        flush=True,
    )
    return load_measured(out)


def _short_label(label: str) -> str:
    """Table name of a prediction (``calibration.compare_measured`` labels)."""
    if label.startswith("microbenchmarks + engine"):
        return "engine-fit"
    if label.startswith("microbenchmarks x machine drift"):
        return "micro x drift"
    return "micro"


def _row(name: str, comparison: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"run": name}
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("p50", "p90", "p99"):
            row[f"{metric}_{stat}_err_pct"] = comparison[metric]["error_pct"][stat]
        row[f"{metric}_ks"] = comparison[metric]["ks"]
    return row


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1f}"


def results_markdown(rows: list[dict[str, Any]]) -> str:
    """One table: per run and prediction, TTFT/TPOT/ITL/E2E p50/p90/p99 errors (%)."""
    head = (
        "| run | prediction | "
        + " | ".join(f"{m} p50 / p90 / p99 (%)" for m in ("TTFT", "TPOT", "ITL", "E2E"))
        + " | within target (TTFT, TPOT) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [
            " / ".join(_fmt(r[f"{m}_{s}_err_pct"]) for s in ("p50", "p90", "p99"))
            for m in ("ttft", "tpot", "itl", "e2el")
        ]
        lines.append(f"| {r['run']} | {r['prediction']} | " + " | ".join(cells) + f" | {r['ok']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "validation" / "smollm2")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "fidelity")
    parser.add_argument(
        "--num-requests",
        type=int,
        default=120,
        help="requests per run: a run's arrivals last num_requests / rate seconds",
    )
    parser.add_argument("--min-duration-s", type=float, default=30.0, help="shortest run")
    parser.add_argument("--saturation-duration-s", type=float, default=30.0)
    parser.add_argument("--grid", default="compact", help="calibration grid")
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", help="default: fp32 on cpu, bf16 on cuda")
    parser.add_argument("--overhead-duration-s", type=float, default=20.0)
    parser.add_argument("--set", action="append", default=[], help="override for every run")
    args = parser.parse_args(argv)
    setup = Setup(args.scenario, args.device, args.dtype, args.grid, tuple(args.set))
    base = setup.base()
    dtype = args.dtype or ("fp32" if args.device == "cpu" else "bf16")
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    artifact = args.work / f"{args.device}-{base.model.name}-{dtype}-greedy.json"
    print(f"1. calibrating (grid {args.grid}) -> {artifact}", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "calibration.cli",
            "--model",
            base.model.name,
            "--device",
            args.device,
            "--dtype",
            dtype,
            "--grid",
            args.grid,
            "--temperature",
            "0",
            "--threads",
            "1",
            "--out",
            str(artifact),
            "--no-progress",
        ],
        check=True,
        cwd=ROOT,
    )
    both = {
        chunked: saturation_per_s(setup, artifact, chunked, args.saturation_duration_s)
        for chunked in (True, False)
    }
    sat = {chunked: measured for chunked, (measured, _) in both.items()}
    simulated = {chunked: predicted for chunked, (_, predicted) in both.items()}
    for chunked in (True, False):
        print(
            f"2. saturation, {'chunked' if chunked else 'unchunked'}: measured"
            f" {sat[chunked]:.2f} req/s, simulated {simulated[chunked]:.2f} req/s",
            flush=True,
        )
    print("3. engine-overhead run (seed 99, 50 % load)", flush=True)
    overhead = _measure(
        setup,
        _scenario(setup, artifact, True, 0.5 * sat[True], args.overhead_duration_s, 99),
        args.work / "overhead",
    )
    rows: list[dict[str, Any]] = []
    drift: dict[str, str] = {}
    records: dict[str, Any] = {
        "saturation_per_s": {"chunked": sat[True], "unchunked": sat[False]},
        "simulated_saturation_per_s": {"chunked": simulated[True], "unchunked": simulated[False]},
    }
    base_cost = CalibratedCost.from_artifact(load_artifact(artifact))
    for chunked in (True, False):
        for load in LOADS:
            name = f"{'chunked' if chunked else 'unchunked'}-{int(load * 100)}pct"
            rate = load * sat[chunked]
            duration_s = max(args.min_duration_s, args.num_requests / rate)
            scenario = _scenario(setup, artifact, chunked, rate, duration_s, 0)
            print(f"4. {name}: {rate:.2f} req/s for {duration_s:.0f} s", flush=True)
            first = _measure(setup, scenario, args.work / name)
            second = None
            if chunked and load == 0.6:
                second = _measure(setup, scenario, args.work / f"{name}-repeat")
            result = validate(
                scenario,
                first,
                second=second,
                overhead_from=overhead,
                cost=base_cost,
                base_dir=setup.scenario.parent,
            )
            write_validation(result, args.work / name / "validation", f"{name}")
            (args.out / f"cdf-{name}.png").write_bytes(
                (args.work / name / "validation" / "cdf.png").read_bytes()
            )
            drift[name] = str(result.facts.get(DRIFT_FACT, "no probe"))
            print(f"  {name}: {DRIFT_FACT}: {drift[name]}", flush=True)
            record = result.to_json()
            record["measured_summary"] = first.summary
            records[name] = record
            for label, comparison in result.comparisons.items():
                short = _short_label(label)
                ok = within_targets(comparison)
                rows.append(
                    {
                        **_row(name, comparison),
                        "prediction": short,
                        "ok": f"{'yes' if ok['ttft'] else 'no'}, {'yes' if ok['tpot'] else 'no'}",
                    }
                )
            if result.noise is not None:
                rows.append(
                    {**_row(name, result.noise), "prediction": "noise floor (run 2)", "ok": "–"}
                )
    elapsed = time.perf_counter() - started
    records["elapsed_s"] = elapsed
    (args.out / "results.json").write_text(summary_to_json(records) + "\n", encoding="utf-8")
    table = results_markdown(rows)
    (args.out / "results.md").write_text(
        f"Study took {elapsed / 60:.1f} min. Saturation (req/s), measured vs simulated:"
        f" chunked {sat[True]:.2f} vs {simulated[True]:.2f},"
        f" unchunked {sat[False]:.2f} vs {simulated[False]:.2f}."
        " Errors: (predicted − measured) / measured.\n\n"
        + table
        + f"\n\n{DRIFT_FACT}, per run:\n\n"
        + "\n".join(f"- {name}: {text}" for name, text in drift.items())
        + "\n",
        encoding="utf-8",
    )
    print(table)
    print(f"study took {elapsed / 60:.1f} min; wrote {args.out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
