"""Readers for servesim's own folders: ``servesim measure`` output and imported runs.

A ``servesim measure`` folder records every request's arrival, ready, first
scheduled, first-token and finish times on the reference engine's clock
(``requests.parquet``), every emitted token's time (``tokens.parquet``),
the step log and ``summary.json`` (``mode: measured``, device, threads).
Nothing is reconstructed: the request table is taken as it is (requests
that did not finish keep a NaN finish time), with its token times.

An imported run (``servesim import-run --out DIR``: ``run.json`` and
``requests.parquet``) is read back as written (``sim.validation.runs.load_run``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.errors import ConfigError
from sim.metrics.report import summary_to_json, write_outputs
from sim.metrics.stats import Slo
from sim.validation.runs import REQUEST_COLUMNS, ImportedRun

FORMAT = "measure"


def not_measure_folder(folder: Path) -> str | None:
    """Why ``folder`` is not a measure folder, in the words of a refusal that names it
    (``not a servesim measure folder (...)``); ``None`` when it is one."""
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except OSError as error:
        return f"not a servesim measure folder (cannot read summary.json: {error.strerror})"
    except ValueError as error:
        return f"not a servesim measure folder (summary.json is not JSON: {error})"
    mode = summary.get("mode") if isinstance(summary, dict) else None
    if mode == "measured":
        return None
    return f"not a servesim measure folder (summary.json has mode {mode!r}, not measured)"


@dataclass(frozen=True, eq=False)
class MeasureFolder:
    """A ``servesim measure`` folder as written: ``summary.json`` and its tables.

    The one reader of these folders, every column as written and ``summary.json``
    as the metadata: ``sim.validation.fit_runs`` (``calibrate --from-run``) and
    ``calibration.compare_measured`` (``servesim validate``) read it as it is;
    ``read_measure`` selects what ``servesim import-run`` writes. ``tokens`` /
    ``steps``: None when the folder has no such file.
    """

    path: Path
    summary: dict[str, Any]
    requests: pd.DataFrame
    tokens: pd.DataFrame | None
    steps: pd.DataFrame | None


def read_measure_folder(path: str | Path) -> MeasureFolder:
    """The folder at ``path``; ConfigError when it is not a readable measure folder."""
    folder = Path(path)
    problem = not_measure_folder(folder)
    if problem:
        raise ConfigError(f"{folder}: {problem}")
    summary: dict[str, Any] = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    try:
        requests = pd.read_parquet(folder / "requests.parquet")
        tokens, steps = (
            pd.read_parquet(folder / name) if (folder / name).exists() else None
            for name in ("tokens.parquet", "steps.parquet")
        )
    except (OSError, ValueError) as error:
        raise ConfigError(f"{folder}: cannot read the measured tables ({error})") from None
    missing = [c for c in REQUEST_COLUMNS if c not in requests.columns]
    if missing:
        raise ConfigError(f"{folder / 'requests.parquet'}: missing columns {missing}")
    return MeasureFolder(folder, summary, requests, tokens, steps)


def write_measure_folder(
    out: Path,
    requests: pd.DataFrame,
    core_steps: pd.DataFrame,
    timeseries: pd.DataFrame,
    summary: dict[str, Any],
    slo: Slo | None,
    steps: pd.DataFrame,
    tokens: pd.DataFrame,
    samples: Mapping[str, str],
) -> list[Path]:
    """A measure folder: the files a simulated run writes, ``steps.parquet`` (the
    engine's step log), ``tokens.parquet`` and a few outputs (``sample_outputs.json``)."""
    paths = write_outputs(out, requests, core_steps, timeseries, summary, slo=slo)
    for name, frame in (("steps", steps), ("tokens", tokens)):
        paths.append(out / f"{name}.parquet")
        frame.to_parquet(paths[-1], index=False)
    paths.append(out / "sample_outputs.json")
    paths[-1].write_text(summary_to_json(samples) + "\n", encoding="utf-8")
    return paths


def read_measure(path: str | Path) -> ImportedRun:
    """What ``servesim import-run`` writes of a measure folder: its columns, its run.json."""
    measured = read_measure_folder(path)
    requests, summary = measured.requests, measured.summary
    keep = [*REQUEST_COLUMNS, "rejection_reason"]
    table = requests.sort_values("request_id", ignore_index=True)[
        [c for c in keep if c in requests.columns]
    ]
    tokens = measured.tokens
    if tokens is not None:
        tokens = tokens[["request_id", "token_index", "time_s"]]
    meta = {
        "format": FORMAT,
        "source": str(measured.path),
        "num_requests": len(table),
        "arrival": "the reference engine's arrival time (wall clock)",
        "engine": {
            "model": summary.get("model"),
            "device_name": summary.get("device_name"),
            "threads": summary.get("threads"),
        },
        "settings": {k: summary.get(k) for k in ("scenario", "status") if k in summary},
    }
    return ImportedRun(table, meta, tokens)
