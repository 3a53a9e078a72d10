"""ShareGPT-style length lists: one (prompt, output) token-count pair per request.

ShareGPT conversations, as ``vllm bench serve --dataset-name sharegpt`` and
LLMServingSim use them, are reduced to token counts: a JSON list (or JSON
lines) whose entries are objects with a prompt length (``prompt_tokens``,
``input_len``, ``prompt_len`` or ``input_length``) and an output length
(``output_tokens``, ``output_len``, ``completion_len`` or
``output_length``), or ``[prompt, output]`` pairs. The list keeps request
order and the pairing of the two lengths; it has no times, so a workload
gives an arrival process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import IntArray
from sim.errors import ConfigError
from sim.workload.json_lines import json_lines, read_text, whole_number

PROMPT_KEYS = ("prompt_tokens", "input_len", "prompt_len", "input_length")
OUTPUT_KEYS = ("output_tokens", "output_len", "completion_len", "output_length")


def _entries(path: Path) -> list[tuple[str, Any]]:
    text = read_text(path)
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return list(json_lines(path, text))
    if not isinstance(document, list):
        raise ConfigError(f"{path}: expected a JSON list of length pairs")
    return [(f"{path}, entry {i}", entry) for i, entry in enumerate(document)]


def _length(entry: dict[str, Any], keys: tuple[str, ...], where: str) -> Any:
    for key in keys:
        if key in entry:
            return entry[key]
    raise ConfigError(f"{where}: missing field {keys[0]} (or {', '.join(keys[1:])})")


def read_sharegpt(path: Path) -> tuple[IntArray, IntArray]:
    """Prompt and output token counts, in list order."""
    prompts: list[int] = []
    outputs: list[int] = []
    for where, entry in _entries(path):
        if isinstance(entry, dict):
            pair = (_length(entry, PROMPT_KEYS, where), _length(entry, OUTPUT_KEYS, where))
        elif isinstance(entry, list) and len(entry) == 2:
            pair = (entry[0], entry[1])
        else:
            raise ConfigError(f"{where}: expected an object or a [prompt, output] pair")
        prompts.append(whole_number(pair[0], where, "prompt length", 1))
        outputs.append(whole_number(pair[1], where, "output length", 1))
    if not prompts:
        raise ConfigError(f"{path}: no requests")
    return np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
