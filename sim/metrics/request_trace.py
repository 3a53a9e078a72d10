"""A run's requests as a workload trace file: GuideLLM's JSON lines or servesim's CSV.

``servesim run --save-trace FILE`` writes every request sent (rejected ones
too), in arrival order: its arrival (s, the shortest text that reads back to the
same float), prompt length and requested output length,

- ``FILE.jsonl``: GuideLLM's trace format (``--data kind=trace_synthetic,...``),
  ``{"timestamp": s, "input_length": n, "output_length": n}`` a line;
- ``FILE.csv``: servesim's (``timestamp,prompt_tokens,output_tokens``, as
  ``servesim import-run``'s ``trace.csv``), replayed by ``workload: {kind: trace}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sim.engine.records import RequestTable, floats
from sim.errors import ConfigError
from sim.metrics.table_files import write_csv

TRACE_SUFFIXES = (".jsonl", ".csv")
"""What ``--save-trace`` writes, by the file's suffix: GuideLLM's format, servesim's."""


def check_trace_path(
    path: str | Path, option: str = "--save-trace", shared_prefixes: str | None = None
) -> Path:
    """``path``, if its suffix names a format and the requests share no prompt prefix
    (``shared_prefixes``: what makes them share one); a one-line error otherwise."""
    target = Path(path)
    if target.suffix.lower() not in TRACE_SUFFIXES:
        raise ConfigError(
            f"{option} {target}: name a .jsonl file (GuideLLM's trace format) "
            "or a .csv file (servesim's)"
        )
    if shared_prefixes is not None:
        # Neither format written here has the ids: a replay would share no prefix.
        raise ConfigError(
            f"{option} {target}: the requests share prompt prefixes ({shared_prefixes}), "
            "which neither GuideLLM's format nor servesim's csv keeps (a replay would share "
            "none); a trace with prefix ids keeps them (Mooncake's hash_ids, a csv "
            "hash_ids_column), which servesim does not write"
        )
    return target


def write_request_trace(path: str | Path, requests: RequestTable) -> Path:
    """Write ``requests`` as a trace in the format ``path``'s suffix names."""
    target = check_trace_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)  # as --out: a missing folder is made
    arrival_s = floats(requests["arrival_s"])
    order = np.lexsort((np.asarray(requests["request_id"]), arrival_s))
    times_s = arrival_s[order]
    prompts = np.asarray(requests["num_prompt_tokens"], dtype=np.int64)[order]
    outputs = np.asarray(requests["num_output_tokens"], dtype=np.int64)[order]
    if target.suffix.lower() == ".csv":
        columns = {"timestamp": times_s, "prompt_tokens": prompts, "output_tokens": outputs}
        return write_csv(columns, target)
    rows = zip(times_s.tolist(), prompts.tolist(), outputs.tolist(), strict=True)
    with target.open("w", encoding="utf-8") as out:
        for time_s, prompt, output in rows:
            row = {"timestamp": time_s, "input_length": prompt, "output_length": output}
            out.write(json.dumps(row) + "\n")
    return target
