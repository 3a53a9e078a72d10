"""The handler of ``servesim measure --endpoint`` (its options: ``sim.cli.endpoint_options``).

``calibration.serve_cli`` adds the options to its parser and hands a run
with ``--endpoint`` over to ``measure_endpoint`` before it imports torch:
measuring a live server needs only ``aiohttp`` (``pip install -e '.[http]'``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.cli.endpoint_options import DEFAULT_MAX_CONCURRENCY, SWEEP_SIZE, server_settings
from sim.errors import ConfigError
from sim.metrics.report import format_summary_table
from sim.planning.profile_sweep import driven, profile_sweep, write_phases
from sim.scenario import load_scenario
from sim.workload.generate import (
    ClosedLoopSource,
    ClosedLoopWorkload,
    RequestArrays,
    generate_open_loop,
)

if TYPE_CHECKING:
    from sim.scenario import Scenario


def driven_scenario(
    scenario: Scenario, args: argparse.Namespace, profile: str | None, rate: float | None
) -> Scenario:
    """``scenario`` with ``profile`` (and ``--streams``, ``rate``) and
    ``--max-concurrency`` applied to its workload; ConfigError naming the flag.
    ``servesim run --profile`` drives a simulated run the same way."""
    if args.sweep_size is not None and args.profile != "sweep":
        raise ConfigError("--sweep-size applies only with --profile sweep")
    if profile is None:
        for flag, value in (("--streams", args.streams), ("--rate", rate)):
            if value is not None:
                raise ConfigError(f"{flag} applies only with --profile")
    else:
        load = {"profile": profile, "streams": args.streams, "rate_per_s": rate}
        scenario = driven(scenario, load, f"--profile {profile}")
    workload = scenario.workload
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

    scenario = load_scenario(args.scenario, args.set or ())
    if args.profile == "sweep":
        return _measure_sweep(args, scenario, out)
    _measure(args, driven_scenario(scenario, args, args.profile, args.rate), out)
    return out


def _measure_sweep(args: argparse.Namespace, scenario: Scenario, out: Path) -> Path:
    """GuideLLM's sweep on the server (``sim.planning.profile_sweep``, as ``run
    --profile sweep`` simulates it): synchronous, throughput, then ``--sweep-size - 2``
    constant rates evenly between their measured request rates, the later phases
    under ``--max-concurrency``; each in ``out/phase-N``, listed in ``out/phases.json``."""
    if args.streams is not None or args.rate is not None:
        raise ConfigError("--streams and --rate do not apply to --profile sweep")
    sweep_size = SWEEP_SIZE if args.sweep_size is None else args.sweep_size
    # --max-concurrency is the workload's cap, which the sweep gives all but its
    # synchronous phase (one request at a time already), as GuideLLM does.
    capped = driven_scenario(scenario, args, None, None)

    def measure(folder: str, load: dict[str, Any], driven: Scenario) -> dict[str, Any]:
        rate = load.get("rate_per_s")
        print(f"sweep {folder}: {load['profile']}" + ("" if rate is None else f" at {rate:.3g}/s"))
        return _measure(args, driven, out / folder)

    phases = profile_sweep(capped, sweep_size, "constant", run=measure)
    write_phases(out, f"servesim measure --endpoint {args.endpoint}", phases)
    print(f"sweep: {len(phases)} phases in {out}/phase-N/ (validate --measured {out}/phase-N)")
    return out


def _measure(args: argparse.Namespace, scenario: Scenario, out: Path) -> dict[str, Any]:
    """Measure ``scenario`` on ``args.endpoint``, write ``out``, print; its summary."""

    from sim.validation.endpoint import EndpointOptions, Streams, endpoint_run, run_endpoint

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
        server_settings=server_settings(args.server_setting),
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
