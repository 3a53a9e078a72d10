"""Mooncake traces: JSON lines of ``timestamp`` (ms), token counts and block ``hash_ids``.

The Mooncake traces (Qin et al., "Mooncake: A KVCache-centric Disaggregated
Architecture for LLM Serving", FAST 2025; github.com/kvcache-ai/Mooncake,
Apache-2.0) record one request a line: ``timestamp`` in milliseconds from
the start of the trace, ``input_length`` and ``output_length`` in tokens,
and ``hash_ids``, one id per block of 512 prompt tokens: two requests
whose ids agree up to block ``j`` share their first ``j + 1`` blocks of
prompt (the ids stand for vLLM's chained block hashes). The block size is a
parameter (``hash_block_tokens``), 512 as published.

The ids reach the prefix cache as each request's ``block_hash_ids``
(``sim.engine.kv_blocks``): a replay with ``engine.enable_prefix_caching``
hits exactly the prefixes the trace shares. A line with more ids than its
prompt has blocks is an error, as is a malformed line or one with a field of
another name (a misspelt ``hash_ids`` would share nothing), each named by number.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sim.errors import ConfigError
from sim.workload.json_lines import json_objects, whole_number
from sim.workload.trace import TraceRequests

MOONCAKE_BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length")


def read_mooncake(path: Path, hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> TraceRequests:
    """Every line of a Mooncake JSON lines trace."""
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    hash_ids: list[tuple[int, ...]] = []
    for where, row in json_objects(path):
        for field in FIELDS:
            if field not in row:
                raise ConfigError(f"{where}: missing field {field}")
        for field in row:
            if field not in (*FIELDS, "hash_ids"):
                # A misspelt 'hash_ids' would replay the line sharing no prefix.
                raise ConfigError(
                    f"{where}: unknown field {field!r} (a line holds {', '.join(FIELDS)}"
                    " and hash_ids)"
                )
        times.append(whole_number(row["timestamp"], where, "timestamp", 0) / 1e3)
        prompts.append(whole_number(row["input_length"], where, "input_length", 1))
        outputs.append(whole_number(row["output_length"], where, "output_length", 1))
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list):
            raise ConfigError(f"{where}: hash_ids must be a list of integers")
        hash_ids.append(tuple(whole_number(i, where, "hash_ids", 0) for i in ids))
        if len(ids) > math.ceil(prompts[-1] / hash_block_tokens):
            raise ConfigError(
                f"{where}: {len(ids)} hash_ids for {prompts[-1]} prompt tokens "
                f"(blocks of {hash_block_tokens})"
            )
    if not times:
        raise ConfigError(f"{path}: no requests")
    times_s = np.asarray(times, dtype=np.float64)
    return TraceRequests(
        times_s - float(times_s.min()),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        tuple(hash_ids),
        hash_block_tokens,
    )
