"""Measured runs from other tools, as one table: what ``servesim import-run`` writes.

An imported run is a folder of ``requests.parquet`` (the simulator's request
columns, ``request_id`` 0..n-1 in arrival order, seconds from the first arrival),
``trace.csv`` (the same requests as a replayable trace, with a ``hash_ids``
column for a declared shared prefix: ``replay_workload``), ``run.json`` (the
format, the source and the engine settings the run recorded) and, where the source
keeps per-chunk times, ``tokens.parquet`` (``request_id``, ``token_index``,
``time_s``); docs/validation.md, "Importing measured runs". A format's reader
raises ``ConfigError`` naming the file and the line or field at fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ConfigError
from sim.metrics.request_trace import replay_workload
from sim.metrics.stats import REQUEST_COLUMNS, text_dtype
from sim.workload.json_lines import whole_number


@dataclass(frozen=True)
class ImportedRun:
    """A measured run: its per-request table and what it recorded about itself."""

    requests: pd.DataFrame
    meta: dict[str, Any]
    tokens: pd.DataFrame | None = None  # per-chunk times, where the source keeps them

    @property
    def shared_prefix_tokens(self) -> int | None:
        """The shared prompt prefix declared, in tokens (None: none)."""
        shared = self.meta.get("shared_prefix")
        if not shared or "prefix_group" not in self.requests:
            return None
        return int(shared["tokens"])

    def replay_workload(self, trace_path: str | Path) -> dict[str, Any]:
        """The ``workload:`` replaying ``trace_path`` (this run's ``trace.csv``), its
        shared prefix included."""
        if self.shared_prefix_tokens is not None:
            return replay_workload(trace_path, self.shared_prefix_tokens)
        return {"kind": "trace", "format": "csv", "path": str(trace_path)}

    def write(self, out_dir: str | Path) -> list[Path]:
        """``requests.parquet``, ``trace.csv`` and ``run.json`` in ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "requests.parquet", out / "trace.csv", out / "run.json"]
        self.requests.to_parquet(paths[0], index=False)
        trace = self.requests[["arrival_s", "num_prompt_tokens", "num_output_tokens"]]
        trace = trace.set_axis(["timestamp", "prompt_tokens", "output_tokens"], axis=1)
        if self.shared_prefix_tokens is not None:
            # The prefix travels with the trace: a request's first N tokens are its
            # group's (sim.engine.kv_blocks keys them as the prefix group would).
            trace = trace.assign(hash_ids=self.requests["prefix_group"].astype("int64"))
        # repr-exact floats: a replay must see the very arrival times measured.
        trace.to_csv(paths[1], index=False, float_format="%.9f")
        paths[2].write_text(json.dumps(self.meta, indent=2, sort_keys=True) + "\n")
        if self.tokens is not None:
            paths.append(out / "tokens.parquet")
            self.tokens.to_parquet(paths[-1], index=False)
        return paths


# run.json's counts that sim.validation.match.RunFacts reads as numbers.
_META_COUNTS = ("num_failed", "num_incomplete", "num_cached_tokens")


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
    for field in _META_COUNTS:  # a true is not 1 (bool is an int in Python)
        if isinstance(meta, dict) and meta.get(field) is not None:
            whole_number(meta[field], str(folder / "run.json"), field, 0)
    tokens_path = folder / "tokens.parquet"
    tokens = pd.read_parquet(tokens_path) if tokens_path.exists() else None
    return ImportedRun(requests, meta, tokens)


def request_table(
    arrival_s: np.ndarray,
    first_scheduled_s: np.ndarray,
    first_token_s: np.ndarray,
    finish_s: np.ndarray,
    num_prompt_tokens: np.ndarray,
    num_output_tokens: np.ndarray,
    ready_s: np.ndarray | None = None,
) -> pd.DataFrame:
    """The per-request table, sorted by arrival, ids 0..n-1, times from the first arrival.

    ``ready_s`` (tokenized, queued at the engine) defaults to the arrival time;
    a time a source does not record is NaN.
    """
    order = np.argsort(arrival_s, kind="stable")
    origin = float(arrival_s[order[0]]) if len(order) else 0.0
    ready = arrival_s if ready_s is None else ready_s
    frame = pd.DataFrame(
        {
            "request_id": np.arange(len(order), dtype=np.int64),
            "arrival_s": arrival_s[order] - origin,
            "ready_s": ready[order] - origin,
            "first_scheduled_s": first_scheduled_s[order] - origin,
            "first_token_s": first_token_s[order] - origin,
            "finish_s": finish_s[order] - origin,
            "num_prompt_tokens": num_prompt_tokens[order].astype(np.int64),
            "num_output_tokens": num_output_tokens[order].astype(np.int64),
            "num_generated_tokens": num_output_tokens[order].astype(np.int64),
        }
    )
    frame["rejection_reason"] = pd.Series(index=frame.index, dtype=text_dtype())  # none rejected
    return frame


def chunk_table(
    chunk_request: np.ndarray, chunk_time_s: np.ndarray, arrival_s: np.ndarray
) -> pd.DataFrame:
    """Per-chunk times renumbered as ``request_table`` numbers the requests.

    ``chunk_request[k]`` is the source index of chunk ``k``'s request and
    ``arrival_s`` the source's arrival times (same clock as ``chunk_time_s``);
    chunks must be listed in stream order within each request.
    """
    order = np.argsort(arrival_s, kind="stable")
    new_id = np.empty(len(order), dtype=np.int64)
    new_id[order] = np.arange(len(order), dtype=np.int64)
    origin = float(arrival_s[order[0]]) if len(order) else 0.0
    frame = pd.DataFrame(
        {
            "request_id": new_id[chunk_request.astype(np.int64)],
            "time_s": chunk_time_s - origin,
        }
    )
    frame = frame.sort_values(["request_id", "time_s"], kind="stable", ignore_index=True)
    frame.insert(1, "token_index", frame.groupby("request_id").cumcount().astype(np.int64))
    return frame
