"""What ``servesim run`` does once its figure process has forked: simulate the scenario,
print its summary, write its files (a module of its own, imported only after the
fork: the figure process must not start with the simulator loaded).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sim import api
from sim.api.build import model_for
from sim.cli import out_folder
from sim.cli.endpoint import driven_scenario
from sim.cli.endpoint_options import SWEEP_SIZE
from sim.cli.figures import FigureError, FigureWorker
from sim.config import named_files
from sim.cost.config import auto_choice
from sim.cost.label import cost_model_tag
from sim.errors import ConfigError
from sim.metrics.out_path import check_out_file, staged, unstaged
from sim.metrics.report import all_rejected_error, format_summary_table, rejection_warning
from sim.metrics.request_trace import (
    check_trace_path,
    keeps_hash_ids,
    replay_workload,
    write_request_trace,
)
from sim.metrics.vllm_result import (
    PERCENTILE_METRICS,
    parse_metric_percentiles,
    parse_percentile_metrics,
    restate_percentiles,
    result_document,
    write_result,
)
from sim.planning.profile_sweep import profile_sweep, write_phases
from sim.scenario import BenchFlags, load_scenario
from sim.workload.generate import unsaved_by_trace

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sim.api import Result
    from sim.scenario import Scenario


def run_and_write(args: argparse.Namespace, worker: FigureWorker | None) -> int:
    """Check the scenario and --out, simulate, print the summary, write the files
    (the figures by ``worker`` when given)."""
    metrics = parse_percentile_metrics(args.percentile_metrics)
    percentiles = parse_metric_percentiles(args.metric_percentiles)
    scenario = load_scenario(args.scenario, args.set or (), _bench_flags(args))
    out = out_folder(args.out, scenario.name)
    if args.profile == "sweep":
        return _run_sweep(args, scenario, out)
    scenario = _profiled(args, scenario)
    _check_save_files(args, scenario, out)
    started = time.perf_counter()
    traced = (args.trace_requests or api.DEFAULT_TRACE_REQUESTS) if args.trace else None
    result = api.run(
        scenario,  # loaded once, above; relative paths in it from its folder (base_dir)
        progress=not args.quiet,
        trace_requests=traced,
        source=str(Path(args.scenario)),
    )
    elapsed_s = time.perf_counter() - started
    nothing = all_rejected_error(result.raw.records)
    if nothing is not None and not args.allow_all_rejected:
        raise ConfigError(nothing)
    rejected = rejection_warning(result.raw.records)  # before any frame is built
    if rejected is not None:
        print(f"servesim: warning: {rejected}", file=sys.stderr)
    caveat = result.summary.get("model_caveat")
    if caveat is not None:
        print(f"servesim: warning: {caveat}", file=sys.stderr)
    if percentiles is not None:  # summary.json's too
        raw = result.raw
        result.summary = restate_percentiles(
            result.summary, raw.records, raw.step_table, raw.extra_itl_s, percentiles
        )
    print(format_summary_table(result.summary, metrics))
    why, ran = "", result.scenario
    if ran.cost.kind == "auto":  # what it priced the run from, or why not kernel tables
        why = f" (cost: auto: {auto_choice(model_for(ran), ran.hardware, ran.parallelism)})"
    # Flushed before the files are written (plots take longest): the user reads
    # the summary while they are drawn, even when stdout is a pipe.
    print(f"cost model: {result.summary['cost_model']}{why}")
    print(f"cost source: {cost_model_tag(result.summary['cost_model'])}", flush=True)
    if worker is None:
        paths = result.write(out, write_steps=args.write_steps, trace=args.trace)
    else:
        failed: FigureError | None = None
        with staged(out) as stage:  # the figures too: all files or none
            # Drawn there while the tables are written here.
            worker.submit(result.figure_job(stage))
            paths = result.write(stage, write_steps=args.write_steps, trace=args.trace, plots=False)
            try:
                paths += worker.finish()
            except FigureError as error:
                # A bug in the figures, not in the run: its complete tables still land.
                failed = error
        paths = unstaged(paths, stage, out)
        if failed is not None:
            raise failed
    accelerator = f" ({result.raw.accelerator})" if result.raw.accelerator else ""
    print(
        f"simulated {len(result.raw.records)} requests in {elapsed_s:.2f} s{accelerator};"
        f" wrote {len(paths)} files to {out}/"
    )
    _write_save_files(args, result, metrics, percentiles)
    return 0


def _profiled(args: argparse.Namespace, scenario: Scenario) -> Scenario:
    """``scenario`` driven by ``--profile`` (GuideLLM's load profiles, as ``measure
    --endpoint`` drives a server): the workload's lengths and count, the profile's
    arrivals; ConfigError naming a flag that does not go with it."""
    if args.profile is not None:
        arrivals = (("--request-rate", args.request_rate), ("--burstiness", args.burstiness))
        for flag, value in arrivals:
            if value is not None:
                raise ConfigError(
                    f"{flag} sets the arrivals, which --profile {args.profile} sets: give one"
                )
    return driven_scenario(scenario, args, args.profile, args.rate)


def _run_sweep(args: argparse.Namespace, scenario: Scenario, out: Path) -> int:
    """GuideLLM's sweep, simulated (``sim.planning.profile_sweep``): synchronous,
    throughput, then ``--sweep-size - 2`` constant rates evenly between their request
    rates, each run written to ``out/phase-N``, listed in ``out/phases.json``, and
    a table of the phases printed, as GuideLLM prints its benchmarks."""
    for flag, value in (
        ("--streams", args.streams),
        ("--rate", args.rate),
        ("--request-rate", args.request_rate),
        ("--burstiness", args.burstiness),
        ("--save-result", args.save_result),
        ("--save-detailed", args.save_detailed),
        ("--save-trace", args.save_trace),
    ):
        if value is not None:
            raise ConfigError(f"{flag} does not apply to --profile sweep (several runs)")
    sweep_size = SWEEP_SIZE if args.sweep_size is None else args.sweep_size
    started = time.perf_counter()

    def simulate(folder: str, load: dict[str, object], driven: Scenario) -> dict[str, object]:
        result = api.run(driven, progress=not args.quiet)
        result.write(out / folder)
        return result.summary

    phases = profile_sweep(scenario, sweep_size, "constant", run=simulate)
    header = (
        f"{'phase':<8} {'profile':<12} {'rate/s':>8} {'done/s':>8} "
        f"{'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9}  (ms)"
    )
    lines = [header]
    for phase in phases:
        s = phase.summary
        rate = phase.load.get("rate_per_s")

        def ms(key: str, s: Mapping[str, object] = s) -> str:
            value = s.get(key)
            return f"{float(value):9.1f}" if isinstance(value, int | float) else f"{'-':>9}"

        lines.append(
            f"{phase.folder:<8} {phase.load['profile']:<12} "
            f"{('-' if rate is None else f'{float(rate):.3g}'):>8} {phase.rate_per_s:8.3g} "
            f"{ms('median_ttft_ms')} {ms('p99_ttft_ms')} {ms('median_tpot_ms')} {ms('p99_tpot_ms')}"
        )
    write_phases(out, f"servesim run {args.scenario} --profile sweep", phases)
    print("\n".join(lines))
    # Each phase's own caveats (too few samples beyond a percentile, ...), as a single
    # run's printout gives them: a table row must not look surer than its run.
    for phase in phases:
        for text in phase.summary.get("caveats") or []:
            print(f"CAVEAT: {phase.folder}: {text}")
    print(f"cost model: {phases[0].summary['cost_model']}")
    print(f"cost source: {cost_model_tag(phases[0].summary['cost_model'])}")
    print(
        f"sweep: {len(phases)} phases simulated in {time.perf_counter() - started:.2f} s; "
        f"wrote {out}/phase-N/ and {out}/phases.json"
    )
    return 0


def _bench_flags(args: argparse.Namespace) -> BenchFlags:
    """``vllm bench serve``'s workload flags given on the line (``sim.scenario.bench_flags``)."""
    return BenchFlags(
        request_rate_per_s=args.request_rate,
        burstiness=args.burstiness,
        num_prompts=args.num_prompts,
        random_input_len_tokens=args.random_input_len,
        random_output_len_tokens=args.random_output_len,
        random_range_ratio=args.random_range_ratio,
        max_concurrency=args.max_concurrency,
        goodput_ms=tuple(args.goodput or ()),
    )


def _check_save_files(args: argparse.Namespace, scenario: Scenario, out: Path) -> None:
    """Refuse a ``--save-*`` file that cannot be written, before the run (``out``: the
    run's folder, which may not exist yet but will be a folder by then)."""
    named = [
        (option, path)
        for option, path in (
            ("--save-result", args.save_result),
            ("--save-detailed", args.save_detailed),
            ("--save-trace", args.save_trace),
        )
        if path is not None
    ]
    folders = (out.resolve(), *out.resolve().parents)
    base_dir = Path(args.scenario).parent
    inputs = {file.resolve() for file in named_files(scenario.model_dump(mode="json"), base_dir)}
    for option, path in named:
        if Path(path).resolve() in folders:
            raise ConfigError(
                f"{option} {path}: is the run's folder (--out {out}) or holds it; give a file name"
            )
        if Path(path).resolve() == Path(args.scenario).resolve():
            # Writing there would replace the scenario with the run's result.
            raise ConfigError(f"{option} {path}: is the scenario being run; give another file")
        if Path(path).resolve() in inputs:  # its trace, say: replaced, lost
            raise ConfigError(f"{option} {path}: is a file the scenario reads; give another file")
        check_out_file(path, option)
    if args.save_trace is not None:
        check_trace_path(args.save_trace)
        dropped = unsaved_by_trace(scenario.workload, keeps_hash_ids(args.save_trace))
        if dropped is not None:  # a replay of the trace would run other requests
            raise ConfigError(f"--save-trace {args.save_trace}: the trace would drop {dropped}")
    paths = [Path(path).absolute() for _, path in named]
    if len(set(paths)) < len(paths):
        raise ConfigError(f"{' and '.join(o for o, _ in named)}: give each its own file")
    if args.save_detailed is not None and scenario.speculative is not None:
        raise ConfigError(
            "--save-detailed: per-chunk times (itls) are not available with speculative "
            "decoding (several tokens a step); --save-result writes the rest"
        )


def _write_save_files(
    args: argparse.Namespace,
    result: Result,
    metrics: Sequence[str] | None,
    percentiles: Sequence[float] | None,
) -> None:
    """Write the ``--save-result``, ``--save-detailed`` and ``--save-trace`` files,
    each named in a line."""
    for path, detailed in ((args.save_result, False), (args.save_detailed, True)):
        if path is not None:
            document = result_document(
                result.summary,
                result.raw.records,
                result.token_times_s,
                metrics=metrics or PERCENTILE_METRICS,
                percentiles=percentiles or (90, 99),
                detailed=detailed,
            )
            print(f"wrote {write_result(path, document)}")
    if args.save_trace is not None:
        prefixes = result.prefix_hash_ids
        hash_ids = None if prefixes is None else prefixes[0]
        print(f"wrote {write_request_trace(args.save_trace, result.raw.records, hash_ids)}")
        if prefixes is not None:  # the column is read only where the scenario names it
            workload = json.dumps(replay_workload(args.save_trace, prefixes[1]))
            print(f"  replay it with its shared prefixes: workload: {workload}")
