"""``vllm bench serve``'s workload flags as shortcuts for scenario keys.

Each flag only writes scenario keys into the raw document, after the ``--set``
overrides and before validation (``set_dotted``), so a flag is exactly the ``--set``
it stands for and is checked like the file. Which key each writes for each workload
kind, or why it is an error (``_assignments`` with ``_KINDS``), and vLLM's meaning of
each are tabled in docs/benchmark-tools.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import Any

from sim.errors import ConfigError
from sim.scenario.overrides import Overrides, replaces, set_dotted, set_keys

GOODPUT_METRICS = ("ttft", "tpot", "e2el")
"""vLLM's goodput SLO names (``--goodput NAME:MS``)."""


@dataclass(frozen=True, slots=True)
class BenchFlags:
    """The ``vllm bench serve`` flags a user gave (None: not given)."""

    request_rate_per_s: float | None = None  # --request-rate (inf: all at once)
    burstiness: float | None = None  # --burstiness: the gamma shape
    num_prompts: int | None = None  # --num-prompts
    random_input_len_tokens: int | None = None  # --random-input-len
    random_output_len_tokens: int | None = None  # --random-output-len
    random_range_ratio: float | None = None  # --random-range-ratio, in [0, 1)
    max_concurrency: int | None = None  # --max-concurrency
    goodput_ms: tuple[str, ...] = ()  # --goodput NAME:MS ...

    @property
    def given(self) -> bool:
        """Whether any flag was given."""
        return any(value not in (None, ()) for value in astuple(self))


# flag -> the workload kinds it applies to.
_KINDS: dict[str, tuple[str, ...]] = {
    "--request-rate": ("synthetic",),
    "--burstiness": ("synthetic",),
    "--num-prompts": ("synthetic", "closed_loop", "trace"),
    "--random-input-len": ("synthetic", "closed_loop"),
    "--random-output-len": ("synthetic", "closed_loop"),
    "--random-range-ratio": ("synthetic", "closed_loop"),
    "--max-concurrency": ("synthetic", "trace"),
}
_WHY_NOT = {
    ("--max-concurrency", "closed_loop"): "its num_users is the concurrency",
    ("--request-rate", "closed_loop"): "its users send when their previous answer is back",
    ("--burstiness", "closed_loop"): "its users send when their previous answer is back",
    ("--request-rate", "trace"): "arrivals come from the trace; rescale them with "
    "--set workload.rate_per_s=R",
    ("--burstiness", "trace"): "arrivals come from the trace",
    ("--random-input-len", "trace"): "lengths come from the trace",
    ("--random-output-len", "trace"): "lengths come from the trace",
    ("--random-range-ratio", "trace"): "lengths come from the trace",
}


def parse_goodput(pairs: Sequence[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` as ``{"ttft_ms": 500.0, ...}`` (the ``slo`` section)."""
    slo: dict[str, float] = {}
    for pair in pairs:
        name, sep, text = pair.partition(":")
        if not sep or name not in GOODPUT_METRICS:
            raise ConfigError(
                f"--goodput {pair!r}: expected NAME:MS with NAME one of "
                f"{', '.join(GOODPUT_METRICS)}, e.g. --goodput ttft:500 tpot:50"
            )
        try:
            limit_ms = float(text)
        except ValueError:
            raise ConfigError(f"--goodput {pair!r}: {text!r} is not a number of ms") from None
        if not (limit_ms > 0 and math.isfinite(limit_ms)):
            raise ConfigError(f"--goodput {pair!r}: the limit must be a positive number of ms")
        if f"{name}_ms" in slo:
            raise ConfigError(f"--goodput: {name} given twice")
        slo[f"{name}_ms"] = limit_ms
    return slo


def random_length(flag: str, length_tokens: int, range_ratio: float) -> dict[str, Any]:
    """The length section vLLM's random dataset draws from: ``fixed`` at ratio 0,
    else ``uniform`` over ``floor(L (1 - r)) .. ceil(L (1 + r))``."""
    if length_tokens < 1:
        raise ConfigError(f"{flag}: expected a positive number of tokens, got {length_tokens}")
    if range_ratio == 0:
        return {"kind": "fixed", "tokens": length_tokens}
    low = math.floor(length_tokens * (1 - range_ratio))
    high = math.ceil(length_tokens * (1 + range_ratio))
    if low < 1 and flag == "--random-output-len":
        low = 1  # vLLM: an output of at least one token
    if low < 1:
        raise ConfigError(
            f"{flag} {length_tokens} with --random-range-ratio {range_ratio:g} allows prompts "
            "of 0 tokens; raise the length or lower the ratio"
        )
    return {"kind": "uniform", "min_tokens": low, "max_tokens": max(high, low)}


def _check_kind(flag: str, kind: str) -> None:
    if kind not in _KINDS[flag]:
        why = _WHY_NOT.get((flag, kind))
        if kind == "profile":
            why = "set its keys with --set workload.KEY=VALUE"
        tail = f" ({why})" if why else ""
        raise ConfigError(f"{flag} does not apply to a {kind} workload{tail}")


def _assignments(flags: BenchFlags, kind: str) -> dict[str, Any]:
    """Dotted key -> value of every flag given, its kind checked."""
    out: dict[str, Any] = {}
    if flags.request_rate_per_s is not None:
        _check_kind("--request-rate", kind)
        if not flags.request_rate_per_s > 0:  # NaN too
            raise ConfigError(
                f"--request-rate: expected > 0 (or inf), got {flags.request_rate_per_s}"
            )
        out["workload.arrival.rate_per_s"] = flags.request_rate_per_s
    if flags.burstiness is not None:
        _check_kind("--burstiness", kind)
        if not flags.burstiness > 0:
            raise ConfigError(f"--burstiness: expected > 0, got {flags.burstiness}")
        out["workload.arrival.kind"] = "gamma"
        out["workload.arrival.burstiness"] = flags.burstiness
    if flags.num_prompts is not None:
        _check_kind("--num-prompts", kind)
        if flags.num_prompts < 1:
            raise ConfigError(f"--num-prompts: expected a positive count, got {flags.num_prompts}")
        out["workload.max_requests" if kind == "trace" else "workload.num_requests"] = (
            flags.num_prompts
        )
    ratio = flags.random_range_ratio
    if ratio is not None:
        _check_kind("--random-range-ratio", kind)
        if not 0 <= ratio < 1:
            raise ConfigError(f"--random-range-ratio: expected a ratio in [0, 1), got {ratio}")
        if flags.random_input_len_tokens is None and flags.random_output_len_tokens is None:
            raise ConfigError(
                "--random-range-ratio needs --random-input-len or --random-output-len "
                "(it spreads their lengths)"
            )
    for flag, length, key in (
        ("--random-input-len", flags.random_input_len_tokens, "workload.prompt_tokens"),
        ("--random-output-len", flags.random_output_len_tokens, "workload.output_tokens"),
    ):
        if length is not None:
            _check_kind(flag, kind)
            out[key] = random_length(flag, length, ratio or 0.0)
    if flags.max_concurrency is not None:
        _check_kind("--max-concurrency", kind)
        if flags.max_concurrency < 1:
            raise ConfigError(
                f"--max-concurrency: expected a positive count, got {flags.max_concurrency}"
            )
        out["workload.max_concurrency"] = flags.max_concurrency
    if flags.goodput_ms:
        out["slo"] = parse_goodput(flags.goodput_ms)
    return out


def apply_bench_flags(
    doc: dict[str, Any], flags: BenchFlags, overrides: Overrides | None, source: str
) -> None:
    """Write ``flags``' scenario keys into ``doc`` (after the ``--set`` ``overrides``
    were applied to it); a key one of ``overrides`` also names is an error."""
    if not flags.given:
        return
    workload = doc.get("workload")
    if not isinstance(workload, dict):
        raise ConfigError(f"{source}: the vllm bench flags need a workload section")
    # A workload named by a load profile (``profile:``) expands into a kind later,
    # by keys of its own: the flags do not guess them.
    kind = "profile" if "profile" in workload else str(workload.get("kind", "synthetic"))
    assignments = _assignments(flags, kind)
    # --num-prompts counts a synthetic workload's requests instead of its duration.
    removed = ["workload.duration_s"] if "workload.num_requests" in assignments else []
    given = set_keys(overrides)
    for key in [*assignments, *removed]:
        for other in given:
            if replaces(key, other) or replaces(other, key):
                raise ConfigError(f"--set {other} and a vllm bench flag both set {key}: give one")
    if removed and kind == "synthetic":
        workload.pop("duration_s", None)
    for key, value in assignments.items():
        set_dotted(doc, key, value, f"{source}: vllm bench flags")
