"""Measured runs from other tools, as one table: what ``servesim import-run`` writes.

An imported run is a folder with

- ``requests.parquet``: one row per request, with the columns the simulator
  writes (``request_id`` 0..n-1 in arrival order, ``arrival_s`` from the
  first arrival, ``ready_s``, ``first_scheduled_s``, ``first_token_s``, ``finish_s``,
  ``num_prompt_tokens``, ``num_output_tokens``, ``num_generated_tokens``, an
  empty ``rejection_reason``), times in seconds;
- ``trace.csv``: the same requests as a workload trace (``timestamp``,
  ``prompt_tokens``, ``output_tokens``), so a scenario replays exactly them
  with ``workload: {kind: trace, format: csv, path: .../trace.csv}``;
- ``run.json``: the source format, where it came from, and the engine
  settings the run recorded (model, parallelism, batch limits, KV blocks).

Each format's reader says what its source records and what is
reconstructed. Readers raise ``ConfigError`` naming the file and the line or
field at fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ConfigError

REQUEST_COLUMNS = (
    "request_id",
    "arrival_s",
    "ready_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "num_prompt_tokens",
    "num_output_tokens",
    "num_generated_tokens",
)


@dataclass(frozen=True)
class ImportedRun:
    """A measured run: its per-request table and what it recorded about itself."""

    requests: pd.DataFrame
    meta: dict[str, Any]

    def trace(self) -> pd.DataFrame:
        """The requests as a workload trace, in arrival order."""
        return pd.DataFrame(
            {
                "timestamp": self.requests["arrival_s"].to_numpy(),
                "prompt_tokens": self.requests["num_prompt_tokens"].to_numpy(),
                "output_tokens": self.requests["num_output_tokens"].to_numpy(),
            }
        )

    def write(self, out_dir: str | Path) -> list[Path]:
        """``requests.parquet``, ``trace.csv`` and ``run.json`` in ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "requests.parquet", out / "trace.csv", out / "run.json"]
        self.requests.to_parquet(paths[0], index=False)
        # repr-exact floats: a replay must see the very arrival times measured.
        self.trace().to_csv(paths[1], index=False, float_format="%.9f")
        paths[2].write_text(json.dumps(self.meta, indent=2, sort_keys=True) + "\n")
        return paths


def load_run(path: str | Path) -> ImportedRun:
    """An imported-run folder written by ``ImportedRun.write``."""
    folder = Path(path)
    try:
        meta = json.loads((folder / "run.json").read_text())
        requests = pd.read_parquet(folder / "requests.parquet")
    except (OSError, ValueError) as error:
        raise ConfigError(f"{folder}: not an imported run ({error})") from None
    missing = [c for c in REQUEST_COLUMNS if c not in requests.columns]
    if missing:
        raise ConfigError(f"{folder / 'requests.parquet'}: missing columns {missing}")
    return ImportedRun(requests, meta)


def request_table(
    arrival_s: np.ndarray,
    first_scheduled_s: np.ndarray,
    first_token_s: np.ndarray,
    finish_s: np.ndarray,
    num_prompt_tokens: np.ndarray,
    num_output_tokens: np.ndarray,
) -> pd.DataFrame:
    """The per-request table, sorted by arrival, ids 0..n-1, times from the first arrival."""
    order = np.argsort(arrival_s, kind="stable")
    origin = float(arrival_s[order[0]]) if len(order) else 0.0
    frame = pd.DataFrame(
        {
            "request_id": np.arange(len(order), dtype=np.int64),
            "arrival_s": arrival_s[order] - origin,
            # ready (tokenized, queued at the engine): arrival, unless a reader knows better.
            "ready_s": arrival_s[order] - origin,
            "first_scheduled_s": first_scheduled_s[order] - origin,
            "first_token_s": first_token_s[order] - origin,
            "finish_s": finish_s[order] - origin,
            "num_prompt_tokens": num_prompt_tokens[order].astype(np.int64),
            "num_output_tokens": num_output_tokens[order].astype(np.int64),
            "num_generated_tokens": num_output_tokens[order].astype(np.int64),
        }
    )
    frame["rejection_reason"] = pd.Series([None] * len(frame), dtype="object")
    return frame
