"""The ``--endpoint`` options of ``servesim measure`` (and ``validate``), and their handler.

``calibration.serve_cli`` adds these options to its parser and hands a run
with ``--endpoint`` over to ``measure_endpoint`` before it imports torch:
measuring a live server needs only ``aiohttp`` (``pip install -e '.[http]'``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.scenario import Scenario

SWEEP_SIZE = 10
"""Benchmarks in a ``--profile sweep`` by default, as GuideLLM's ``--rate`` for a sweep."""

MAX_SWEEP_SIZE = 1_000
"""Most benchmarks a ``--profile sweep`` may ask for: each is a whole run, one after
another, in its own OUT/phase-N; a thousand rates already split the range between
the synchronous and throughput rates into 0.1 % steps. ``--sweep-size 99999999``
ran for hours with nothing written."""

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
        "--timeout-s", type=float, default=300.0, help="per request, send to last chunk (300)"
    )
    group.add_argument(
        "--retries", type=int, default=0, help="retries of a request that could not connect (0)"
    )
    group.add_argument(
        "--no-ignore-eos", action="store_true", help="do not send ignore_eos (vLLM's extension)"
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


def refuse_endpoint_options(args: argparse.Namespace) -> None:
    """ConfigError naming the first ``--endpoint``-only option given without ``--endpoint``
    (the in-process measure would not apply it)."""
    given = (
        ("--max-concurrency", args.max_concurrency),
        ("--profile", args.profile),
        ("--streams", args.streams),
        ("--rate", args.rate),
        ("--sweep-size", args.sweep_size),
    )  # add_endpoint_arguments's options
    for name, value in given:
        if value is not None:
            raise ConfigError(f"{name} applies with --endpoint (a live server) only")


def driven_scenario(
    scenario: Scenario, args: argparse.Namespace, profile: str | None, rate: float | None
) -> Scenario:
    """``scenario`` with ``profile`` (and ``--streams``, ``rate``) and
    ``--max-concurrency`` applied to its workload; ConfigError naming the flag.
    ``servesim run --profile`` drives a simulated run the same way."""
    from pydantic import TypeAdapter, ValidationError

    from sim.workload.generate import ClosedLoopWorkload, WorkloadConfig
    from sim.workload.profiles import with_profile

    workload = scenario.workload
    if profile is None:
        for flag, value in (("--streams", args.streams), ("--rate", rate)):
            if value is not None:
                raise ConfigError(f"{flag} applies only with --profile")
    else:
        try:
            settings = {"streams": args.streams, "rate_per_s": rate}
            mapping = with_profile(workload.model_dump(), profile, **settings)
            workload = TypeAdapter(WorkloadConfig).validate_python(mapping)
        except ValueError as error:  # pydantic's ValidationError is one
            first = error.errors()[0]["msg"] if isinstance(error, ValidationError) else error
            # pydantic words a validator's ValueError "Value error, ...": the reason alone.
            reason = str(first).removeprefix("Value error, ")
            raise ConfigError(f"--profile {profile}: {reason}") from None
    if args.max_concurrency is not None:
        if isinstance(workload, ClosedLoopWorkload):
            raise ConfigError(
                "--max-concurrency applies to open-loop workloads; a closed loop's "
                f"{workload.num_users} stream(s) bound it"
            )
        workload = workload.model_copy(update={"max_concurrency": args.max_concurrency})
    return scenario.model_copy(update={"workload": workload})


def measure_endpoint(args: argparse.Namespace, out: Path) -> Path:
    """Measure ``args.scenario`` on ``args.endpoint``; write the folder; print the summary
    (``--profile sweep``: one folder per benchmark, ``out/phase-N``, and ``phases.json``)."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise ConfigError("--endpoint needs aiohttp: pip install -e '.[http]'") from None
    from sim.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.set or ())
    if args.profile == "sweep":
        return _measure_sweep(args, scenario, out)
    if args.sweep_size is not None:
        raise ConfigError("--sweep-size applies only with --profile sweep")
    _measure(args, driven_scenario(scenario, args, args.profile, args.rate), out)
    return out


def _measure_sweep(args: argparse.Namespace, scenario: Scenario, out: Path) -> Path:
    """GuideLLM's sweep on the server: synchronous, throughput, then ``--sweep-size - 2``
    constant rates evenly between their measured request rates (the last the
    throughput's), each in ``out/phase-N``; ``out/phases.json`` lists them."""
    import json

    from sim.workload.profiles import sweep_rates_per_s

    if args.streams is not None or args.rate is not None:
        raise ConfigError("--streams and --rate do not apply to --profile sweep")
    sweep_size = SWEEP_SIZE if args.sweep_size is None else args.sweep_size
    if sweep_size < 2:
        raise ConfigError(f"--sweep-size must be >= 2, got {sweep_size}")
    rows: list[dict[str, object]] = []

    def phase(profile: str, rate: float | None) -> float:
        folder = f"phase-{len(rows)}"
        print(f"sweep {folder}: {profile}" + ("" if rate is None else f" at {rate:.3g}/s"))
        summary = _measure(args, driven_scenario(scenario, args, profile, rate), out / folder)
        done_per_s = float(summary.get("request_throughput") or 0.0)
        load = {"profile": profile} | ({} if rate is None else {"rate_per_s": rate})
        rows.append({"folder": folder, "load": summary.get("load") or load,
                     "request_throughput": done_per_s})  # fmt: skip
        return done_per_s

    synchronous = phase("synchronous", None)
    throughput = phase("throughput", None)
    if throughput > synchronous:  # else nothing lies between (GuideLLM stops too)
        for rate in sweep_rates_per_s(synchronous, throughput, sweep_size):
            phase("constant", rate)
    listing = {"source": f"servesim measure --endpoint {args.endpoint}", "phases": rows}
    (out / "phases.json").write_text(json.dumps(listing, indent=2) + "\n")
    print(f"sweep: {len(rows)} phases in {out}/phase-N/ (validate --measured {out}/phase-N)")
    return out


def _measure(args: argparse.Namespace, scenario: Scenario, out: Path) -> dict[str, Any]:
    """Measure ``scenario`` on ``args.endpoint``, write ``out``, print; its summary."""
    import numpy as np

    from sim.metrics.report import format_summary_table
    from sim.validation.endpoint import EndpointOptions, Streams, endpoint_run, run_endpoint
    from sim.workload.generate import (
        ClosedLoopSource,
        ClosedLoopWorkload,
        RequestArrays,
        generate_open_loop,
    )

    if scenario.workload.kind != "trace" and scenario.workload.prefix_groups is not None:
        raise ConfigError(
            "workload.prefix_groups: --endpoint sends prompts that share no prefix "
            "(sim.validation.endpoint_prompts); measure without prefix groups"
        )
    base_dir = Path(args.scenario).parent
    rng = np.random.default_rng(scenario.seed)
    streams = None
    workload = scenario.workload
    if isinstance(workload, ClosedLoopWorkload):
        # The i-th request gets the i-th lengths, whichever stream sends it (as simulated).
        source = ClosedLoopSource(workload, rng, base_dir)
        lengths = np.asarray([source.next_lengths() for _ in range(workload.num_requests)])
        work = RequestArrays(
            np.zeros(len(lengths)), lengths[:, 0].astype(np.int64), lengths[:, 1].astype(np.int64)
        )
        streams = Streams(workload.num_users, source.next_think_s)
        limit = workload.num_users
    else:
        work = generate_open_loop(workload, rng, base_dir)
        limit = work.max_concurrency or DEFAULT_MAX_CONCURRENCY
    opts = EndpointOptions(
        url=args.endpoint,
        model=args.model,
        api=args.api,
        max_concurrency=limit,
        timeout_s=args.timeout_s,
        retries=args.retries,
        ignore_eos=not args.no_ignore_eos,
        max_duration_s=args.max_duration_s,
        progress=not args.quiet,
    )
    started = time.perf_counter()
    state = run_endpoint(work, opts, seed=scenario.seed, streams=streams)
    run = endpoint_run(scenario, work, state, opts)
    paths = run.write(out)
    s = run.summary
    print(format_summary_table(s))
    print(f"measured {s['model']} at {s['endpoint']} (prompt tokens: {s['prompt_tokens']})")
    print(
        f"{s['message']}; {time.perf_counter() - started:.1f} s; wrote {len(paths)} files to {out}/"
    )
    if s["completed"] == 0 and len(work.arrival_s):
        first = next(iter(s["failures"]), "no request completed")
        raise ConfigError(f"--endpoint {s['endpoint']}: no request completed ({first})")
    num_failed = int(s.get("num_failed") or 0)
    # A run stopped on purpose (Ctrl-C, --max-duration-s) is partial by the user's
    # choice and says so; one that ran to its end with failures is not the scenario's.
    if num_failed and s.get("status") == "complete" and not args.allow_failures:
        # A partial measurement is not the scenario's: exit non-zero, the data kept.
        first = next(iter(s["failures"]), "")
        raise ConfigError(
            f"--endpoint {s['endpoint']}: {num_failed} of {len(work.arrival_s)} requests failed "
            f"({first}); what completed is in {out}/ with the failures recorded "
            "(--allow-failures exits 0)"
        )
    return s
