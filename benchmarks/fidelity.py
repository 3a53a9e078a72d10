"""The fidelity study: measured runs of the tiny model on CPU vs the simulator's predictions.

One command reproduces ``docs/validation.md``'s numbers and plots::

    python benchmarks/fidelity.py --out docs/validation

Steps (about 10 minutes on a 2-core machine):

1. calibrate: ``servesim calibrate --model tiny --grid default --temperature 0``
   (microbenchmarks of ``forward_step``, greedy like the engine), into the
   work folder; every prediction below uses this artifact;
2. estimate saturation throughput with the simulator (overload, per chunking
   mode) and pick loads of 30 %, 60 % and 90 % of it;
3. measure one extra run (another seed and load) whose step log fits the
   engine overhead: the second, still out-of-sample, calibration source;
4. for chunked prefill on and off, at each load: measure ~45 s of Poisson
   arrivals, simulate exactly those requests, compare; the 60 % chunked run
   is measured twice, the second run giving the noise floor.

Writes ``results.json``, ``results.md`` and one CDF plot per run into
``--out``; raw measured runs go to ``--work`` (default ``runs/fidelity``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.measure import Device, measure  # noqa: E402
from calibration.validate import MeasuredDir, validate, write_validation  # noqa: E402
from sim import api  # noqa: E402
from sim.cost.calibrated import load_calibrated_cost  # noqa: E402
from sim.report import summary_to_json  # noqa: E402
from sim.scenario import Scenario, load_scenario  # noqa: E402
from sim.validation import within_targets  # noqa: E402

SCENARIO = ROOT / "scenarios" / "validate_tiny_cpu.yaml"
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


def saturation_per_s(setup: Setup, artifact: Path, chunked: bool) -> float:
    """Request throughput the calibrated simulator sustains under overload."""
    scenario = _scenario(setup, artifact, chunked, rate=1000.0, duration_s=2.0, seed=0)
    return float(api.run(scenario).summary["request_throughput"] or 0.0)


def _measure(setup: Setup, scenario: Scenario, out: Path) -> MeasuredDir:
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
    return MeasuredDir.load(out)


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
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "validation")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "fidelity")
    parser.add_argument("--duration-s", type=float, default=45.0, help="arrivals per run")
    parser.add_argument("--grid", default="default", help="calibration grid (small: faster)")
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
    sat = {chunked: saturation_per_s(setup, artifact, chunked) for chunked in (True, False)}
    print(f"2. saturation (simulated): chunked {sat[True]:.2f} req/s, unchunked {sat[False]:.2f}")
    print("3. engine-overhead run (seed 99, 50 % load)", flush=True)
    overhead = _measure(
        setup,
        _scenario(setup, artifact, True, 0.5 * sat[True], args.overhead_duration_s, 99),
        args.work / "overhead",
    )
    rows: list[dict[str, Any]] = []
    records: dict[str, Any] = {"saturation_per_s": {"chunked": sat[True], "unchunked": sat[False]}}
    base_cost = load_calibrated_cost(artifact)
    for chunked in (True, False):
        for load in LOADS:
            name = f"{'chunked' if chunked else 'unchunked'}-{int(load * 100)}pct"
            scenario = _scenario(setup, artifact, chunked, load * sat[chunked], args.duration_s, 0)
            print(f"4. {name}: {load * sat[chunked]:.2f} req/s", flush=True)
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
            record = result.to_json()
            record["measured_summary"] = first.summary
            records[name] = record
            for label, comparison in result.comparisons.items():
                short = "engine-fit" if label.startswith("microbenchmarks + engine") else "micro"
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
        f"Study took {elapsed / 60:.1f} min. Errors: (predicted − measured) / measured.\n\n"
        + table
        + "\n",
        encoding="utf-8",
    )
    print(table)
    print(f"study took {elapsed / 60:.1f} min; wrote {args.out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
