"""The options of a load profile and of ``--endpoint`` (``servesim run``, ``measure``
and ``validate``), and their checks: light, since ``servesim run`` builds its parser
with them before its figure process forks (no numpy, no simulator here).
"""

from __future__ import annotations

import argparse

from sim.cli import options_given
from sim.errors import ConfigError

SWEEP_SIZE = 10
"""Benchmarks in a ``--profile sweep`` by default, as GuideLLM's ``--rate`` for a sweep."""

MAX_SWEEP_SIZE = 1_000
"""Most benchmarks a ``--profile sweep`` may ask for (each a whole run): a thousand
rates already split the range between synchronous and throughput into 0.1 % steps."""

DEFAULT_TIMEOUT_S = 300.0
"""``--timeout-s``: seconds a request may take, send to last chunk."""

DEFAULT_MAX_CONCURRENCY = 256
"""Requests in flight at most when the workload sets no bound (a client's sanity cap)."""


def add_profile_arguments(group: argparse._ArgumentGroup) -> None:
    """GuideLLM's load profiles as options: ``--profile``, ``--sweep-size``,
    ``--streams``, ``--rate`` (``measure --endpoint`` and ``servesim run`` alike;
    ``driven_scenario`` applies them)."""
    group.add_argument(
        "--profile",
        choices=("synchronous", "concurrent", "throughput", "constant", "poisson", "sweep"),
        help="drive the scenario's requests (lengths, count) as GuideLLM's profile of that "
        "name instead of its workload's arrivals; sweep: synchronous, throughput, then "
        "--sweep-size - 2 constant rates between their rates, OUT/phase-N each "
        "(docs/benchmark-tools.md)",
    )
    group.add_argument(
        "--sweep-size",
        type=sweep_size,
        metavar="N",
        help=f"--profile sweep: benchmarks in all ({SWEEP_SIZE}, as GuideLLM)",
    )
    group.add_argument(
        "--streams",
        type=positive_int,
        metavar="N",
        help="--profile concurrent: requests in flight",
    )
    group.add_argument(
        "--rate", type=float, metavar="R", help="--profile constant|poisson: requests per second"
    )


def add_endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """``--endpoint URL`` and the options that only apply with it."""
    group = parser.add_argument_group("measuring a live OpenAI-compatible server")
    group.add_argument(
        "--endpoint",
        metavar="URL",
        help="send the requests to this server instead of the in-process engine, e.g. "
        "http://localhost:8000 (or .../v1/completions, .../v1/chat/completions)",
    )
    group.add_argument("--model", help="model name to ask for (default: the first /v1/models)")
    group.add_argument(
        "--api", choices=("completions", "chat"), help="default: from the URL, else completions"
    )
    group.add_argument(
        "--max-concurrency",
        type=positive_int,
        metavar="N",
        help="open loop: requests in flight at most, a later arrival waiting for a slot "
        "(sets workload.max_concurrency; default: the workload's, else 256)",
    )
    add_profile_arguments(group)
    group.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"per request, send to last chunk ({DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--retries", type=int, default=0, help="retries of a request that could not connect (0)"
    )
    group.add_argument(
        "--no-ignore-eos", action="store_true", help="do not send ignore_eos (vLLM's extension)"
    )
    group.add_argument(
        "--server-setting",
        type=server_setting,
        action="append",
        metavar="NAME=VALUE",
        help="what the server runs, in vLLM's engine-argument names, recorded for validate "
        "and calibrate to check against the scenario (repeat it): tensor_parallel_size=2, "
        "pipeline_parallel_size, data_parallel_size, enable_expert_parallel=true, "
        "max_num_seqs, max_num_batched_tokens, ...; a parallel size not given is recorded "
        "unknown",
    )
    group.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 although some requests failed (the folder records them either way)",
    )


def sweep_size(text: str) -> int:
    """argparse type: a ``--profile sweep``'s benchmarks, 2 to ``MAX_SWEEP_SIZE``
    (synchronous and throughput, then the rates between)."""
    value = positive_int(text)
    if not 2 <= value <= MAX_SWEEP_SIZE:
        raise argparse.ArgumentTypeError(
            f"expected 2 to {MAX_SWEEP_SIZE:,} benchmarks (synchronous, throughput and the "
            f"rates between), got {text!r}"
        )
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (a count of requests, streams, prefix tokens)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def server_setting(text: str) -> tuple[str, int | bool | str]:
    """argparse type: ``NAME=VALUE`` (dashes in NAME read as underscores), VALUE a whole
    number, true or false, else text (``vllm_version=0.19``)."""
    name, equals, value = text.partition("=")
    name = name.strip().removeprefix("--").replace("-", "_")
    if not equals or not name or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    value = value.strip()
    if value.lower() in ("true", "false"):
        return name, value.lower() == "true"
    try:
        return name, int(value)
    except ValueError:
        return name, value


def server_settings(
    told: list[tuple[str, int | bool | str]] | None,
) -> dict[str, int | bool | str]:
    """The ``--server-setting`` pairs as one mapping; ConfigError for a NAME given twice
    with two values (which the server runs cannot be both)."""
    settings: dict[str, int | bool | str] = {}
    for name, value in told or ():
        before = settings.get(name, value)
        if (type(before), before) != (type(value), value):  # true is not 1 here
            raise ConfigError(f"--server-setting {name}: given twice, {before!r} and {value!r}")
        settings[name] = value
    return settings


def refuse_endpoint_options(args: argparse.Namespace) -> None:
    """ConfigError naming the first ``--endpoint``-only option given without ``--endpoint``
    (the in-process measure would not apply it)."""
    # add_endpoint_arguments's options are each read by the client only (the in-process
    # engine records its own --server-setting: one process, TP 1).
    for name in options_given(args, add_endpoint_arguments):
        raise ConfigError(f"{name} applies with --endpoint (a live server) only")
