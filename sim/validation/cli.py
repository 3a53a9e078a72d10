"""``servesim import-run``: a measured run from another tool into servesim's table.

Only argparse is imported at start-up; pandas and the readers load when the
command runs, so ``servesim --help`` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.validation.runs import ImportedRun

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

FORMATS = ("auto", "llmservingsim")


def detect_format(source: Path) -> str:
    """The format of ``source`` from the files it holds; ConfigError if none fits."""
    for folder in (source, source / "vllm"):
        if (folder / "requests.jsonl").is_file():
            return "llmservingsim"
    raise ConfigError(
        f"{source}: cannot tell its format (known: {', '.join(FORMATS[1:])}); pass --format"
    )


def reader(name: str) -> Callable[[Path], ImportedRun]:
    """The reader of format ``name``."""
    if name == "llmservingsim":
        from sim.validation.llmservingsim import read_llmservingsim

        return read_llmservingsim
    raise ConfigError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")


def import_run(source: str | Path, fmt: str = "auto") -> ImportedRun:
    """Read a measured run in format ``fmt`` (``auto``: detected from its files)."""
    path = Path(source)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    name = detect_format(path) if fmt == "auto" else fmt
    return reader(name)(path)


def _cmd_import_run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    run = import_run(args.source, args.format)
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
        help="convert a measured run from another tool (LLMServingSim's vLLM runs, ...)",
        description=(
            "Convert a measured run into servesim's per-request table (requests.parquet), "
            "a replayable trace (trace.csv) and its recorded settings (run.json)."
        ),
    )
    command.add_argument("source", help="the run's file or folder")
    command.add_argument("--format", choices=FORMATS, default="auto", help="(default: auto)")
    command.add_argument("--out", required=True, help="output folder")
    command.set_defaults(handler=_cmd_import_run)
