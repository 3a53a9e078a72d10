"""Which reader reads a measured run: the format registry and detection by content.

``import_run(path)`` detects the format from what the file or folder holds
(never from its name alone), so ``servesim import-run FILE --format auto``
and ``servesim validate --measured FILE_OR_DIR`` take any known format.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.validation.runs import ImportedRun, load_run

FORMATS = ("vllm-bench", "guidellm", "otlp", "llmservingsim", "measure", "imported")
"""Known formats, in the order detection tries them."""

_SNIFF_BYTES = 1 << 16  # a JSON lines file is told by its first line


def _document(path: Path) -> Any:
    """The parsed JSON/YAML document, or its first JSON line, or None."""
    from sim.validation.formats.common import load_document

    try:
        return load_document(path)
    except ConfigError:
        pass
    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline(_SNIFF_BYTES)
        return json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def detect_format(source: Path) -> str:
    """The format of ``source`` from its content; ConfigError listing the formats if none fits."""
    from sim.validation.formats import guidellm, measure_dir, otlp, vllm_bench

    if source.is_dir():
        for folder in (source, source / "vllm"):
            if (folder / "requests.jsonl").is_file():
                return "llmservingsim"
        if measure_dir.is_measure_folder(source):
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


def reader(name: str, benchmark: int | None = None) -> Callable[[Path], ImportedRun]:
    """The reader of format ``name`` (``benchmark``: which one of a GuideLLM report)."""
    from sim.validation.formats import guidellm, measure_dir, otlp, vllm_bench
    from sim.validation.llmservingsim import read_llmservingsim

    if name == "guidellm":
        return lambda path: guidellm.read_guidellm(path, benchmark)
    readers: dict[str, Callable[[Path], ImportedRun]] = {
        "vllm-bench": vllm_bench.read_vllm_bench,
        "otlp": otlp.read_otlp,
        "llmservingsim": read_llmservingsim,
        "measure": measure_dir.read_measure,
        "imported": load_run,
    }
    if name not in readers:
        raise ConfigError(f"unknown format {name!r}; known: auto, {', '.join(FORMATS)}")
    return readers[name]


def import_run(source: str | Path, fmt: str = "auto", benchmark: int | None = None) -> ImportedRun:
    """Read a measured run in format ``fmt`` (``auto``: detected from its content)."""
    path = Path(source)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    name = detect_format(path) if fmt == "auto" else fmt
    if benchmark is not None and name != "guidellm":
        raise ConfigError(f"--benchmark applies only to GuideLLM reports, not {name}")
    return reader(name, benchmark)(path)
