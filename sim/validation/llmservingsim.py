"""Reader for the vLLM runs LLMServingSim publishes (``bench/examples/<GPU>/<model>/vllm``).

``requests.jsonl`` (one request a line: token counts and the engine's timestamps on
one monotonic clock) and ``meta.json`` (the engine arguments; in newer runs the KV
cache size and the resolved vLLM configuration). Arrival = ``queued_ts``: the
client's ``arrival_time`` is on another clock (its offset varies by 0.1-0.4 s across
a run); docs/validation.md, "Importing measured runs".
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ConfigError
from sim.validation.formats.common import listed_once, number
from sim.validation.intake import ENGINE_INTAKE
from sim.validation.runs import ImportedRun, request_table
from sim.workload.json_lines import json_objects

FORMAT = "llmservingsim"
_FIELDS = ("input_toks", "output_toks", "queued_ts", "scheduled_ts", "first_token_ts")
_LAST = "last_token_ts"
_ORDER = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")


def _read_requests(path: Path) -> dict[str, np.ndarray]:
    columns: dict[str, list[float]] = {name: [] for name in (*_FIELDS, _LAST)}
    seen: dict[Any, str] = {}
    for where, row in json_objects(path):
        listed_once(seen, row.get("request_id"), where, "request_id")
        for field in (*_FIELDS, _LAST):
            if field not in row:
                raise ConfigError(f"{where}: missing field {field}")
            columns[field].append(number(row[field], where, field, text=False))
        times = [columns[f][-1] for f in _ORDER]
        if any(later < earlier for earlier, later in pairwise(times)):
            raise ConfigError(f"{where}: times must not decrease in the order {', '.join(_ORDER)}")
        if columns["input_toks"][-1] < 1 or columns["output_toks"][-1] < 1:
            raise ConfigError(f"{where}: input_toks and output_toks must be >= 1")
    if not columns[_LAST]:
        raise ConfigError(f"{path}: no requests")
    return {name: np.asarray(values) for name, values in columns.items()}


def _engine_settings(meta: dict[str, Any]) -> dict[str, Any]:
    """The settings a replay needs, from ``meta.json`` (``None`` where not recorded)."""
    kwargs = meta.get("engine_kwargs") or {}
    kv = meta.get("kv_cache") or {}
    resolved = meta.get("resolved_config") or {}
    scheduler = resolved.get("scheduler_config") or {}
    cache = resolved.get("cache_config") or {}
    model_config = resolved.get("model_config") or {}
    activations = model_config.get("dtype") or kwargs.get("dtype")  # torch.bfloat16, auto
    kv_dtype = kwargs.get("kv_cache_dtype") or cache.get("cache_dtype")
    return {
        "model": meta.get("model") or kwargs.get("model"),
        "vllm_version": meta.get("vllm_version"),
        # Unrecorded is not 1: validate compares a recorded layout with the scenario's.
        "tensor_parallel_size": kwargs.get("tensor_parallel_size"),
        "data_parallel_size": kwargs.get("data_parallel_size"),
        "pipeline_parallel_size": kwargs.get(
            "pipeline_parallel_size",
            (resolved.get("parallel_config") or {}).get("pipeline_parallel_size"),
        ),
        "enable_expert_parallel": kwargs.get("enable_expert_parallel"),
        "max_num_seqs": kwargs.get("max_num_seqs"),
        "max_num_batched_tokens": kwargs.get("max_num_batched_tokens"),
        "max_model_len": kwargs.get("max_model_len"),
        "dtype": kwargs.get("dtype"),
        # Storage dtypes in vLLM's names: the weights' only where the resolved config
        # says how vLLM quantized them (a checkpoint may be quantized whatever --dtype
        # says); a KV cache of "auto" is in the activations' dtype.
        "weights_dtype": (model_config.get("quantization") or activations)
        if model_config
        else None,
        "kv_cache_dtype": activations if kv_dtype == "auto" else kv_dtype,
        "num_gpu_blocks": kv.get("num_gpu_blocks"),
        "block_size": kv.get("block_size", cache.get("block_size")),
        "enable_prefix_caching": kv.get(
            "enable_prefix_caching", cache.get("enable_prefix_caching")
        ),
        "async_scheduling": scheduler.get("async_scheduling"),
        "device_name": (meta.get("hardware") or {}).get("device_name"),
    }


def read_llmservingsim(path: str | Path) -> ImportedRun:
    """A run folder holding ``requests.jsonl`` and ``meta.json`` (the ``vllm/`` folder)."""
    folder = Path(path)
    if not (folder / "requests.jsonl").exists() and (folder / "vllm").is_dir():
        folder = folder / "vllm"  # the example's folder was given
    requests_path, meta_path = folder / "requests.jsonl", folder / "meta.json"
    if not requests_path.exists():
        raise ConfigError(f"{folder}: no requests.jsonl (not an LLMServingSim vLLM run)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        meta = {}
    except (OSError, ValueError) as error:
        raise ConfigError(f"{meta_path}: cannot read ({error})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{meta_path}: expected a JSON object")
    c = _read_requests(requests_path)
    requests = request_table(
        c["queued_ts"],
        c["scheduled_ts"],
        c["first_token_ts"],
        c[_LAST],
        c["input_toks"],
        c["output_toks"],
    )
    engine = _engine_settings(meta)
    if engine["device_name"] is None:
        engine["device_name"] = _example_gpu(folder.parent / "config.json")
    info = {
        "format": FORMAT,
        "source": str(folder),
        "num_requests": len(requests),
        "arrival": "queued_ts (engine clock, after tokenization)",
        "latency_from": ENGINE_INTAKE,  # queued_ts: a replay counts from its own intake
        "started_at": meta.get("started_at"),
        "engine": engine,
    }
    return ImportedRun(requests, info)


def _example_gpu(path: Path) -> str | None:
    """The GPU an example's run was on, as its ``config.json`` (LLMServingSim's
    configuration replaying that run) names it: ``nodes[0].instances[0].hardware``,
    e.g. ``RTXPRO6000``. None when there is no such file or field: meta.json
    records no device."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        name = config["nodes"][0]["instances"][0]["hardware"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return name if isinstance(name, str) and name else None
