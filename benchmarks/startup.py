"""Start-up and small-run speed: wall time of ``servesim --help`` and of a small run.

Each command runs in a fresh subprocess (``python -m sim.cli ...`` from this
checkout), best of ``--repeats`` (3); ``python -c pass`` is timed the same way on
the same machine and printed beside each figure, as a ratio: on a shared or
slow machine the ratio is the number to compare. For the run, the time until
the summary table is on stdout is printed too (the user waits for it; plots
and tables are written after it, before the command exits), and the CPU
seconds the command and the processes it started used (user + system): on a
busy machine, where a second core is not to be had, that is what the wall
time follows. The run is timed as ``servesim run`` runs by default (on Linux
the figures are drawn in forked processes while the tables are written when
a core is free: ``--figure-process auto``), and with each choice forced
(``--figure-process yes`` / ``no``) where the tree has the option.

Targets (issue 16): ``servesim --help`` under 0.3 s, ``servesim run
scenarios/chat.yaml`` under 1 s end to end.

    python benchmarks/startup.py
    python benchmarks/startup.py --repeats 5
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = "scenarios/chat.yaml"
HELP_TARGET_S = 0.3
RUN_TARGET_S = 1.0
# The line that ends the summary table (format_summary_table's closing rule).
SUMMARY_END = "=" * 50
FIGURE_PROCESS = "--figure-process"


@dataclass(frozen=True)
class Timing:
    """One subprocess: wall seconds to exit, and to the summary's last line (if it printed
    one); CPU seconds (user + system) of it and the processes it started and waited for."""

    total_s: float
    summary_s: float | None
    cpu_s: float = 0.0


def children_cpu_s() -> float:
    """CPU seconds used so far by this process's waited-for descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(args: Sequence[str]) -> Timing:
    """Run ``args`` in ROOT; wall time to exit and to the line ``SUMMARY_END`` on stdout."""
    cpu_before_s = children_cpu_s()
    started = time.perf_counter()
    process = subprocess.Popen(
        list(args), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    summary_s = None
    for line in process.stdout:
        if summary_s is None and line.rstrip("\n") == SUMMARY_END:
            summary_s = time.perf_counter() - started
    code = process.wait()
    total_s = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"startup.py: {' '.join(args)} exited with status {code}")
    return Timing(total_s, summary_s, children_cpu_s() - cpu_before_s)


def best_of(args: Sequence[str], repeats: int) -> Timing:
    """The fastest of ``repeats`` runs (by time to exit)."""
    return min((time_command(args) for _ in range(repeats)), key=lambda t: t.total_s)


def has_option(python: str, option: str) -> bool:
    """Whether ``servesim run`` in ROOT takes ``option`` (its --help lists it)."""
    done = subprocess.run(
        [python, "-m", "sim.cli", "run", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    return option in done.stdout


def verdict(seconds: float, target_s: float) -> str:
    return "meets" if seconds < target_s else "misses"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each; best is kept")
    parser.add_argument("--scenario", default=SCENARIO, help="scenario for the run")
    args = parser.parse_args(argv)
    python = sys.executable
    baseline_s = best_of([python, "-c", "pass"], args.repeats).total_s
    help_s = best_of([python, "-m", "sim.cli", "--help"], args.repeats).total_s
    runs = {}
    variants: list[tuple[str, list[str]]] = [("", [])]
    if has_option(python, FIGURE_PROCESS):  # a tree from before the option: the default only
        variants += [(f" {FIGURE_PROCESS} {c}", [FIGURE_PROCESS, c]) for c in ("yes", "no")]
    for label, extra in variants:
        with tempfile.TemporaryDirectory(prefix="servesim-startup-") as out:
            runs[label] = best_of(
                [python, "-m", "sim.cli", "run", args.scenario, "--out", out, "--quiet", *extra],
                args.repeats,
            )
    print(f"best of {args.repeats} fresh subprocesses each; python -c pass: {baseline_s:.3f} s")
    print(
        f"{'servesim --help':<64} {help_s:6.3f} s  target < {HELP_TARGET_S:.1f} s "
        f"({verdict(help_s, HELP_TARGET_S)})  = {help_s / baseline_s:5.1f} x python -c pass"
    )
    for label, run in runs.items():
        name = f"servesim run {args.scenario}{label} (to exit)"
        print(
            f"{name:<64} {run.total_s:6.3f} s  target < {RUN_TARGET_S:.1f} s "
            f"({verdict(run.total_s, RUN_TARGET_S)})  = {run.total_s / baseline_s:5.1f} x "
            f"python -c pass; {run.cpu_s:.2f} CPU s"
        )
        if run.summary_s is not None:
            print(
                f"{'  of which until the summary is printed':<64} {run.summary_s:6.3f} s"
                f"                        = {run.summary_s / baseline_s:5.1f} x python -c pass"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
