"""Import an LLMServingSim per-layer profile directory as a kernel artifact.

LLMServingSim (casys-kaist/LLMServingSim, MIT) profiles one model on one GPU
with vLLM's own kernels, one decoder layer at a time::

    <hw>/<org>/<model>/<dtype>/meta.yaml           GPU, vLLM / CUDA versions, date
    <hw>/<org>/<model>/<dtype>/tp<N>/dense.csv     layer,tokens,time_us
    <hw>/<org>/<model>/<dtype>/tp<N>/attention.csv
        prefill_chunk,kv_prefill,n_decode,kv_decode,time_us
    <hw>/<org>/<model>/<dtype>/tp<N>/per_sequence.csv  layer,sequences,time_us
    <hw>/<org>/<model>/<dtype>/tp<N>/moe.csv       tokens,activated_experts,time_us (MoE)
    <hw>/<org>/<model>/<dtype>/tp<N>/skew_fit.csv
        pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha,n_samples

``import_profile`` takes a ``tp<N>`` folder (or the ``<dtype>`` folder above
it, for tp1) and writes its tables as ``layer_ops``, ``mixed_attention``,
``per_sequence``, ``moe_layer`` (MoE models) and ``attention_skew``, in seconds;
``main`` is the body of ``servesim import-profile DIR --out FILE``.

The skew fit (the rule: ``docs/kernels.md``): each bucket label (``n<=128``,
``sr<=5%``, ``kvB<=4k``, ``kp=0``) becomes its upper edge (``sr>70%``: 1, the
rate's ceiling). Neither the raw ``skew.csv`` shots nor the pooled
``alpha_default`` are imported (a bucket with no fit applies no correction), and
the fit only where ``meta.yaml`` enables it (``skew_fit: {enabled: true}``), as
LLMServingSim applies it; a disabled one (the RTX 4090 bundle's: the sweep came
after its validation) is named in ``provenance.notes``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sim.cost.kernels.artifact import KernelArtifact, KernelProvenance, save_artifact
from sim.errors import ConfigError

PROFILE_LICENCE = "MIT (LLMServingSim, Copyright (c) 2024 CASYS Lab at KAIST)"
_US = 1e-6  # seconds per microsecond


def _read(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    """The table at ``path``; ConfigError if absent, unreadable or without ``columns``."""
    if not path.is_file():
        raise ConfigError(f"{path}: missing profile table")
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ConfigError(f"{path}: missing column {missing[0]!r}")
    return table


def _read_csv(path: Path, columns: dict[str, str]) -> pd.DataFrame:
    """``path`` with its columns renamed by ``columns``, latencies in seconds."""
    table = _read(path, list(columns))[list(columns)].rename(columns=columns)
    table["latency_s"] = pd.to_numeric(table["latency_s"], errors="coerce") * _US
    return table


# A skew-fit bucket label: axis, comparison, number, unit (k: x1024, %: /100).
_LABEL = re.compile(r"^(n|sr|kvB|kp)(<=|=|>)([0-9.]+)(k|%)?$")
_SKEW_AXES = {
    "n_label": ("n", "max_num_decode_seqs"),
    "skew_rate_label": ("sr", "max_skew_rate"),
    "kv_big_label": ("kvB", "max_kv_decode_tokens"),
    "kp_label": ("kp", "max_kv_prefill_tokens"),
}


def _upper_edge(path: Path, column: str, label: str) -> float:
    """The upper edge of a skew-fit bucket label (``n<=128`` -> 128, ``kvB<=4k`` -> 4096)."""
    match = _LABEL.match(label)
    axis = _SKEW_AXES[column][0]
    if match is None or match.group(1) != axis:
        raise ConfigError(f"{path}: {column}: cannot read bucket label {label!r}")
    _, comparison, number, unit = match.groups()
    value = float(number) * (1024.0 if unit == "k" else 0.01 if unit == "%" else 1.0)
    if comparison == ">":
        if axis != "sr":  # only the skew rate has a ceiling (1) to close its top bucket
            raise ConfigError(f"{path}: {column}: open-ended bucket {label!r} is not supported")
        return 1.0
    return value


def _skew_fit(path: Path) -> pd.DataFrame:
    """``skew_fit.csv`` as the ``attention_skew`` table (bucket upper edges, alpha)."""
    fit = _read(path, ["pc", *_SKEW_AXES, "alpha", "n_samples"])
    table = pd.DataFrame({"prefill_chunk_tokens": pd.to_numeric(fit["pc"], errors="coerce")})
    for column, (axis, name) in _SKEW_AXES.items():
        edges = [_upper_edge(path, column, str(label)) for label in fit[column]]
        table[name] = edges if axis == "sr" else [int(edge) for edge in edges]
    table["num_samples"] = pd.to_numeric(fit["n_samples"], errors="coerce")
    table["alpha"] = pd.to_numeric(fit["alpha"], errors="coerce")
    if bool(table.isna().any().any()):
        raise ConfigError(f"{path}: pc, alpha and n_samples must be numbers")
    return table


_SKEW_DISABLED = "; skew_fit.csv not imported: meta.yaml skew_fit.enabled is not true"


def _find_meta(tp_dir: Path) -> dict[str, Any]:
    for folder in (tp_dir, tp_dir.parent):
        path = folder / "meta.yaml"
        if path.is_file():
            try:
                meta = yaml.safe_load(path.read_text())
            except yaml.YAMLError as error:
                raise ConfigError(f"{path}: not YAML: {str(error).splitlines()[0]}") from None
            if not isinstance(meta, dict):
                raise ConfigError(f"{path}: expected a mapping")
            return meta
    raise ConfigError(f"{tp_dir}: no meta.yaml here or in the folder above")


def _tp_dir(src_dir: Path) -> Path:
    if (src_dir / "dense.csv").is_file():
        return src_dir
    if (src_dir / "tp1" / "dense.csv").is_file():
        return src_dir / "tp1"
    raise ConfigError(f"{src_dir}: not a profile folder (no dense.csv nor tp1/dense.csv)")


def _per_head_norm_at_tp(layer_ops: pd.DataFrame, tp: int) -> pd.DataFrame:
    """``qk_norm``'s rows as the tp-``tp`` shard runs it.

    LLMServingSim times its ``tp_stable`` ops once, at tp 1, and copies the rows
    into every ``tp<N>`` folder (``profiler/models/qwen3.yaml``). That holds for
    the layer norms, not for ``qk_norm``, a norm per head: at tp ``N`` each GPU
    norms ``1 / N`` of the heads, tp 1's row at ``tokens / N`` (RTX PRO 6000:
    Qwen3-32B's tp-1 row at 1,024 tokens is 22.5 us, Qwen3-30B-A3B's at 2,048, the
    32B's tp-2 shard, 22.7 us). Below the smallest timed count the first stands.
    """
    rows = layer_ops["op"] == "qk_norm"
    if not rows.any():
        return layer_ops
    norm = layer_ops[rows].sort_values("num_tokens")
    tokens = norm["num_tokens"].to_numpy(dtype=float)
    at_tp = np.interp(tokens / tp, tokens, norm["latency_s"].to_numpy(dtype=float))
    out = layer_ops.copy()
    out.loc[norm.index, "latency_s"] = at_tp
    return out


def profile_artifact(src_dir: Path) -> KernelArtifact:
    """The tables of an LLMServingSim profile folder, as a kernel artifact."""
    tp_dir = _tp_dir(src_dir)
    meta = _find_meta(tp_dir)
    tp_name = tp_dir.name
    tp = int(tp_name[2:]) if tp_name.startswith("tp") and tp_name[2:].isdigit() else 1
    for field in ("gpu", "vllm_version", "model"):
        if not meta.get(field):
            raise ConfigError(f"{tp_dir}: meta.yaml: missing field {field!r}")
    layer_ops = _read_csv(
        tp_dir / "dense.csv", {"layer": "op", "tokens": "num_tokens", "time_us": "latency_s"}
    )
    if tp > 1:
        layer_ops = _per_head_norm_at_tp(layer_ops, tp)
    mixed = _read_csv(
        tp_dir / "attention.csv",
        {
            "prefill_chunk": "prefill_chunk_tokens",
            "kv_prefill": "kv_prefill_tokens",
            "n_decode": "num_decode_seqs",
            "kv_decode": "kv_decode_tokens",
            "time_us": "latency_s",
        },
    )
    per_seq = _read_csv(
        tp_dir / "per_sequence.csv",
        {"layer": "op", "sequences": "num_seqs", "time_us": "latency_s"},
    )
    tables = {"layer_ops": layer_ops, "per_sequence": per_seq}
    if (tp_dir / "moe.csv").is_file():
        tables["moe_layer"] = _read_csv(
            tp_dir / "moe.csv",
            {
                "tokens": "num_tokens",
                "activated_experts": "num_active_experts",
                "time_us": "latency_s",
            },
        )
    # The empty batch (all zeros) is timed as a launch only; no step has it.
    mixed = mixed[(mixed["prefill_chunk_tokens"] > 0) | (mixed["num_decode_seqs"] > 0)]
    # LLMServingSim applies a skew fit only where the profile's meta enables it.
    has_skew = (tp_dir / "skew_fit.csv").is_file()
    skew_meta = meta.get("skew_fit")
    skew_enabled = isinstance(skew_meta, dict) and skew_meta.get("enabled") is True
    dtype = str(meta.get("variant", "bf16"))
    engine = meta.get("engine_effective")
    eager = isinstance(engine, dict) and bool(engine.get("enforce_eager"))
    provenance = KernelProvenance(
        source=f"LLMServingSim profiler {meta.get('profiler_version', '')}".strip(),
        licence=PROFILE_LICENCE,
        gpu=str(meta.get("hardware", meta["gpu"])),
        device_name=str(meta["gpu"]),
        framework="vllm",
        framework_version=str(meta["vllm_version"]),
        dtype="bfloat16" if dtype == "bf16" else dtype,
        kv_dtype="bfloat16" if dtype == "bf16" else dtype,
        date=str(meta.get("profiled_at", "")),
        tool="servesim import-profile",
        tool_version="1",
        model=str(meta["model"]),
        tensor_parallel_size=tp,
        kernels={"engine": "enforce_eager" if eager else "cuda_graphs"},
        notes=f"CUDA {meta.get('cuda_version', '?')}; imported from {tp_dir.name}"
        + ("" if skew_enabled or not has_skew else _SKEW_DISABLED),
    )
    tables["mixed_attention"] = mixed
    if has_skew and skew_enabled:
        tables["attention_skew"] = _skew_fit(tp_dir / "skew_fit.csv")
    return KernelArtifact(
        provenance, {name: table.reset_index(drop=True) for name, table in tables.items()}
    )


def import_profile(src_dir: Path | str, out_path: Path | str) -> Path:
    """Write the profile folder ``src_dir`` as a kernel artifact at ``out_path``."""
    return save_artifact(profile_artifact(Path(src_dir)), Path(out_path))


def main(argv: Sequence[str] | None = None) -> int:
    """``servesim import-profile DIR --out FILE`` (``sim.cli.main`` reports a ConfigError)."""
    parser = argparse.ArgumentParser(
        prog="servesim import-profile",
        description="Turn an LLMServingSim profile folder into a servesim kernel artifact.",
    )
    parser.add_argument("src_dir", type=Path, help="profile folder (.../bf16/tp1)")
    parser.add_argument("--out", type=Path, required=True, help="artifact file (.json[.gz])")
    args = parser.parse_args(argv)
    print(f"wrote {import_profile(args.src_dir, args.out)}")
    return 0
