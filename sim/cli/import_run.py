"""``servesim import-run``: a measured run from another tool into servesim's table.

Only argparse is imported at start-up; pandas and the readers load when the
command runs, so ``servesim --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

FORMATS = ("auto", "vllm-bench", "guidellm", "otlp", "llmservingsim", "measure", "imported")


def _cmd_import_run(args: argparse.Namespace) -> int:
    from sim.metrics.out_path import check_out_dir
    from sim.validation.importers import import_run

    out = Path(args.out)
    check_out_dir(out)  # before reading: a folder that cannot be written is one line
    run = import_run(args.source, args.format, args.benchmark)
    paths = run.write(out)
    requests = run.requests
    ttft_ms = (requests["first_token_s"] - requests["arrival_s"]).median() * 1e3
    print(
        f"imported {len(requests)} requests ({run.meta['format']}) over "
        f"{requests['arrival_s'].max():.1f} s of arrivals, median TTFT {ttft_ms:.1f} ms; "
        f"wrote {len(paths)} files to {out}/"
    )
    return 0


def add_parsers(subparsers: Subparsers) -> None:
    """Register ``import-run``."""
    command = subparsers.add_parser(
        "import-run",
        help="convert a measured run (vllm bench serve, GuideLLM, vLLM OTLP spans, ...)",
        description=(
            "Convert a measured run into servesim's per-request table (requests.parquet), "
            "a replayable trace (trace.csv) and its recorded settings (run.json)."
        ),
    )
    command.add_argument("source", help="the run's file or folder")
    command.add_argument("--format", choices=FORMATS, default="auto", help="(default: auto)")
    command.add_argument("--out", required=True, help="output folder")
    command.add_argument(
        "--benchmark", type=int, metavar="N", help="GuideLLM report: which benchmark (0-based)"
    )
    command.set_defaults(handler=_cmd_import_run)
