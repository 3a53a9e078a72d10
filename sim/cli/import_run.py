"""``servesim import-run``: a measured run from another tool into servesim's table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sim.cli import HELP, Subparsers
from sim.cli.endpoint_options import positive_int
from sim.metrics.out_path import check_out_dir, out_argument
from sim.validation.importers import FORMATS, import_phases, write_phases


def _benchmarks(text: str) -> list[int]:
    """``--benchmark``: one index or a comma-separated list (0-based)."""
    try:
        indices = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N,M,... (0-based), got {text!r}") from None
    if any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"expected distinct indices >= 0, got {text!r}")
    return indices


def _load_words(load: dict[str, object] | None) -> str:
    if not load:
        return "replayed at its send times"
    return " ".join(
        f"{key} {value}" if key != "profile" else str(value) for key, value in load.items()
    )


def _cmd_import_run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    check_out_dir(out)  # before reading: a folder that cannot be written is one line
    runs = import_phases(args.source, args.format, args.benchmark, args.prefix_tokens)
    paths = write_phases(runs, out)
    traces = [path for path in paths if path.name == "trace.csv"]  # one a run, in order
    for index, run in enumerate(runs):
        requests = run.requests
        ttft_ms = (requests["first_token_s"] - requests["arrival_s"]).median() * 1e3
        phase = f"benchmark {run.meta['benchmark']}: " if len(runs) > 1 else ""
        load = f", load: {_load_words(run.meta.get('load'))}" if "load" in run.meta else ""
        print(
            f"{phase}imported {len(requests)} requests ({run.meta['format']}) over "
            f"{requests['arrival_s'].max():.1f} s of arrivals, median TTFT {ttft_ms:.1f} ms{load}"
        )
        prefix = run.meta.get("shared_prefix")
        if prefix:
            print(
                f"  shared prefix: {prefix['tokens']} tokens in {prefix['groups']} group(s) "
                f"(declared by {prefix['declared_by']})"
            )
            # trace.csv carries it, replayed only when the scenario names its column.
            workload = json.dumps(run.replay_workload(traces[index]))
            print(f"  replay with the prefix: workload: {workload}")
    where = f"{len(runs)} phases in {out}/phase-N/" if len(runs) > 1 else f"{out}/"
    print(f"wrote {len(paths)} files: {where}")
    return 0


def add_parsers(subparsers: Subparsers) -> None:
    command = subparsers.add_parser(
        "import-run",
        help=HELP["import-run"],
        description=(
            "Convert a measured run into servesim's per-request table (requests.parquet), "
            "a replayable trace (trace.csv) and its recorded settings and load (run.json). "
            "A GuideLLM report of several benchmarks becomes one folder per benchmark "
            "(OUT/phase-N/, listed in OUT/phases.json). JSON may be gzipped (.json.gz)."
        ),
    )
    command.add_argument("source", help="the run's file or folder")
    command.add_argument(
        "--format", choices=("auto", *FORMATS), default="auto", help="(default: auto)"
    )
    command.add_argument("--out", type=out_argument, required=True, help="output folder")
    command.add_argument(
        "--benchmark",
        type=_benchmarks,
        metavar="N[,M...]",
        help="GuideLLM report: which benchmarks (0-based; default: all, one phase each)",
    )
    command.add_argument(
        "--prefix-tokens",
        type=positive_int,
        metavar="N",
        help="every prompt began with the same N tokens (a shared system prompt): "
        "declared so a replay gets the prefix-cache hits (default: the report's prefix_tokens)",
    )
    command.set_defaults(handler=_cmd_import_run)
