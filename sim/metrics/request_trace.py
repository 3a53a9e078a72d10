"""A run's requests as a workload trace file: GuideLLM's JSON lines or servesim's CSV.

``servesim run --save-trace FILE`` writes every request sent (rejected ones
too), in arrival order: its arrival (s, the shortest text that reads back to the
same float), prompt length and requested output length,

- ``FILE.jsonl``: GuideLLM's trace format (``--data kind=trace_synthetic,...``),
  ``{"timestamp": s, "input_length": n, "output_length": n}`` a line;
- ``FILE.csv``: servesim's (``timestamp,prompt_tokens,output_tokens``, as
  ``servesim import-run``'s ``trace.csv``), replayed by ``workload: {kind: trace}``;
  requests sharing prompt prefixes add a ``hash_ids`` column (ids separated by
  spaces, ``[]`` for none: ``replay_workload`` names it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.engine.records import RequestTable, floats
from sim.errors import ConfigError
from sim.metrics.table_files import write_csv
from sim.workload.trace import HashIds

TRACE_SUFFIXES = (".jsonl", ".csv")
"""What ``--save-trace`` writes, by the file's suffix: GuideLLM's format, servesim's."""


def check_trace_path(path: str | Path, option: str = "--save-trace") -> Path:
    """``path``, if its suffix names a format; a one-line error otherwise."""
    target = Path(path)
    if target.suffix.lower() not in TRACE_SUFFIXES:
        raise ConfigError(
            f"{option} {target}: name a .jsonl file (GuideLLM's trace format) "
            "or a .csv file (servesim's)"
        )
    return target


def keeps_hash_ids(path: str | Path) -> bool:
    """Whether the format ``path``'s suffix names keeps prefix hash ids (servesim's csv)."""
    return Path(path).suffix.lower() == ".csv"


def replay_workload(path: str | Path, hash_block_tokens: int | None) -> dict[str, Any]:
    """The ``workload:`` replaying a csv trace (this module's, ``import-run``'s) with its
    ``hash_ids`` column (``hash_block_tokens``: tokens an id covers, None: the engine's
    block)."""
    workload: dict[str, Any] = {"kind": "trace", "format": "csv", "path": str(path)}
    workload["hash_ids_column"] = "hash_ids"
    if hash_block_tokens is not None:
        workload["hash_block_tokens"] = hash_block_tokens
    return workload


def write_request_trace(
    path: str | Path, requests: RequestTable, hash_ids: HashIds | None = None
) -> Path:
    """Write ``requests`` as a trace in the format ``path``'s suffix names, with each
    request's prefix ``hash_ids`` (by request id) where given (csv only)."""
    target = check_trace_path(path)
    if hash_ids is not None and not keeps_hash_ids(target):
        raise ConfigError(f"--save-trace {target}: the format keeps no prefix hash ids")
    target.parent.mkdir(parents=True, exist_ok=True)  # as --out: a missing folder is made
    arrival_s = floats(requests["arrival_s"])
    ids = np.asarray(requests["request_id"])
    order = np.lexsort((ids, arrival_s))
    times_s = arrival_s[order]
    prompts = np.asarray(requests["num_prompt_tokens"], dtype=np.int64)[order]
    outputs = np.asarray(requests["num_output_tokens"], dtype=np.int64)[order]
    if target.suffix.lower() == ".csv":
        columns = {"timestamp": times_s, "prompt_tokens": prompts, "output_tokens": outputs}
        if hash_ids is not None:
            cells = [" ".join(map(str, hash_ids[i])) or "[]" for i in ids[order].tolist()]
            columns["hash_ids"] = np.asarray(cells, dtype=object)
        return write_csv(columns, target)
    rows = zip(times_s.tolist(), prompts.tolist(), outputs.tolist(), strict=True)
    with target.open("w", encoding="utf-8") as out:
        for time_s, prompt, output in rows:
            row = {"timestamp": time_s, "input_length": prompt, "output_length": output}
            out.write(json.dumps(row) + "\n")
    return target
