"""Which reader reads a measured run: the format registry and detection by content.

``import_run(path)`` detects the format from what the file or folder holds
(never from its name alone, gzipped or not), so ``servesim import-run FILE
--format auto`` and ``servesim validate --measured FILE_OR_DIR`` take any
known format. A report of several benchmarks (GuideLLM) imports as phases
(``import_phases``, ``write_phases``): one imported-run folder each,
``phase-N`` for benchmark ``N``, listed in ``phases.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.validation.formats import guidellm, measure_dir, otlp, vllm_bench
from sim.validation.formats.common import load_document, with_shared_prefix
from sim.validation.formats.guidellm import read_guidellm_phases
from sim.validation.llmservingsim import read_llmservingsim
from sim.validation.runs import ImportedRun, load_run
from sim.workload.json_lines import read_text

FORMATS = ("vllm-bench", "guidellm", "otlp", "llmservingsim", "measure", "imported")
"""Known formats, in the order detection tries them."""

_SNIFF_BYTES = 1 << 16  # a JSON lines file is told by its first line


def _document(path: Path) -> Any:
    """The parsed JSON/YAML document, or its first JSON line, or None."""
    try:
        return load_document(path)
    except ConfigError:
        pass
    try:
        first = read_text(path)[:_SNIFF_BYTES].split("\n", 1)[0]
        return json.loads(first)
    except (ConfigError, ValueError):
        return None


def detect_format(source: Path) -> str:
    """The format of ``source`` from its content; ConfigError listing the formats if none fits."""
    if source.is_dir():
        phases = source / PHASES_FILE
        if phases.is_file():
            names = [row.get("folder") for row in json.loads(read_text(phases)).get("phases", [])]
            raise ConfigError(
                f"{source}: a run of {len(names)} phases ({', '.join(map(str, names))}); "
                f"give one phase's folder, e.g. {source / str(names[0] if names else 'phase-0')}"
            )
        for folder in (source, source / "vllm"):
            if (folder / "requests.jsonl").is_file():
                return "llmservingsim"
        if measure_dir.not_measure_folder(source) is None:
            return "measure"
        if (source / "run.json").is_file() and (source / "requests.parquet").is_file():
            return "imported"  # written by servesim import-run
    elif source.is_file():
        document = _document(source)
        for name, module in (("vllm-bench", vllm_bench), ("guidellm", guidellm), ("otlp", otlp)):
            if module.looks_like(document):
                return name
    raise ConfigError(
        f"{source}: cannot tell its format (known: {', '.join(FORMATS)}); "
        "see docs/validation.md, 'Importing measured runs'"
    )


def run_kind(source: Path, flag: str) -> str:
    """Which kind of measured run ``source`` is, one answer for ``validate --measured`` and
    ``calibrate --from-run`` (``flag``, which every refusal names): ``measure`` (a
    ``servesim measure`` folder, its ``summary.json``; an endpoint folder's ``run.json``
    beside it says less), ``imported`` (a ``run.json``: ``servesim import-run``'s, or
    written by hand) or the format ``import_run`` detects from the content."""
    if not source.exists():
        raise ConfigError(
            f"{flag} {source}: not a servesim measure folder nor a run in a known format "
            "(no such file or folder)"
        )
    if (source / "summary.json").is_file():
        problem = measure_dir.not_measure_folder(source)
        if problem:
            raise ConfigError(f"{flag} {source}: {problem}")
        return "measure"
    if (source / "run.json").is_file():
        return "imported"
    try:
        return detect_format(source)
    except ConfigError as error:
        if (source / PHASES_FILE).is_file():  # an import of several phases: name them
            raise ConfigError(f"{flag} {error}") from None
        raise ConfigError(
            f"{flag} {source}: not a servesim measure folder nor a run in a known "
            "format (servesim import-run --help)"
        ) from None


def reader(
    name: str, benchmark: int | None = None, prefix_tokens: int | None = None
) -> Callable[[Path], ImportedRun]:
    """The reader of format ``name`` (``benchmark``: which one of a GuideLLM report;
    ``prefix_tokens``: a shared prompt prefix declared, where the report names none)."""
    if name == "guidellm":
        return lambda path: guidellm.read_guidellm(path, benchmark, prefix_tokens)
    readers: dict[str, Callable[[Path], ImportedRun]] = {
        "vllm-bench": vllm_bench.read_vllm_bench,
        "otlp": otlp.read_otlp,
        "llmservingsim": read_llmservingsim,
        "measure": measure_dir.read_measure,
        "imported": load_run,
    }
    if name not in readers:
        raise ConfigError(f"unknown format {name!r}; known: auto, {', '.join(FORMATS)}")
    read = readers[name]
    if prefix_tokens is None:
        return read
    return lambda path: with_shared_prefix(read(path), prefix_tokens, 1, "--prefix-tokens")


def _format_of(path: Path, fmt: str, benchmarks: Sequence[int] | None) -> str:
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    name = detect_format(path) if fmt == "auto" else fmt
    if benchmarks is not None and name != "guidellm":
        raise ConfigError(f"--benchmark applies only to GuideLLM reports, not {name}")
    return name


def import_run(
    source: str | Path,
    fmt: str = "auto",
    benchmark: int | None = None,
    prefix_tokens: int | None = None,
) -> ImportedRun:
    """Read a measured run in format ``fmt`` (``auto``: detected from its content);
    ``prefix_tokens``: every request shares its first N prompt tokens (declared)."""
    path = Path(source)
    name = _format_of(path, fmt, None if benchmark is None else [benchmark])
    return reader(name, benchmark, prefix_tokens)(path)


def import_phases(
    source: str | Path,
    fmt: str = "auto",
    benchmarks: Sequence[int] | None = None,
    prefix_tokens: int | None = None,
) -> list[ImportedRun]:
    """Every benchmark of a GuideLLM report as its own run (or those in
    ``benchmarks``); any other format as one run."""
    path = Path(source)
    name = _format_of(path, fmt, benchmarks)
    if name == "guidellm":
        return read_guidellm_phases(path, benchmarks, prefix_tokens)
    return [reader(name, None, prefix_tokens)(path)]


PHASES_FILE = "phases.json"
"""The list of a phased import's folders (``write_phases``)."""


def write_phases(runs: Sequence[ImportedRun], out_dir: str | Path) -> list[Path]:
    """One run: its folder is ``out_dir`` (``ImportedRun.write``). Several (the
    phases of one report): ``out_dir/phase-N`` for benchmark ``N``, each an
    imported run ``validate --measured`` takes, and ``out_dir/phases.json``
    listing them with their load profiles. Returns every file written."""
    out = Path(out_dir)
    if len(runs) == 1:
        return runs[0].write(out)
    paths: list[Path] = []
    rows: list[dict[str, object]] = []
    for run in runs:
        folder = f"phase-{run.meta.get('benchmark', len(rows))}"
        paths += run.write(out / folder)
        rows.append(
            {
                "folder": folder,
                "benchmark": run.meta.get("benchmark"),
                "load": run.meta.get("load"),
                "num_requests": len(run.requests),
            }
        )
    listing = {"source": runs[0].meta.get("source"), "phases": rows}
    paths.append(out / PHASES_FILE)
    paths[-1].write_text(json.dumps(listing, indent=2) + "\n")
    return paths
