"""The ``--endpoint`` options of ``servesim measure`` (and ``validate``), and their handler.

``calibration.serve_cli`` adds these options to its parser and hands a run
with ``--endpoint`` over to ``measure_endpoint`` before it imports torch:
measuring a live server needs only ``aiohttp`` (``pip install -e '.[http]'``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sim.errors import ConfigError


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
        "--max-concurrency", type=int, default=256, help="requests in flight at most (256)"
    )
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


def measure_endpoint(args: argparse.Namespace, out: Path) -> Path:
    """Measure ``args.scenario`` on ``args.endpoint``; write the folder; print the summary."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise ConfigError("--endpoint needs aiohttp: pip install -e '.[http]'") from None
    import numpy as np

    from sim.metrics.report import format_summary_table
    from sim.scenario import load_scenario
    from sim.validation.endpoint import EndpointOptions, endpoint_run, run_endpoint
    from sim.workload.generate import ClosedLoopWorkload, generate_open_loop

    scenario = load_scenario(args.scenario, args.set or ())
    if isinstance(scenario.workload, ClosedLoopWorkload):
        raise ConfigError("workload: servesim measure replays open-loop workloads only")
    base_dir = Path(args.scenario).parent
    work = generate_open_loop(scenario.workload, np.random.default_rng(scenario.seed), base_dir)
    opts = EndpointOptions(
        url=args.endpoint,
        model=args.model,
        api=args.api,
        max_concurrency=args.max_concurrency,
        timeout_s=args.timeout_s,
        retries=args.retries,
        ignore_eos=not args.no_ignore_eos,
        max_duration_s=args.max_duration_s,
        progress=not args.quiet,
    )
    started = time.perf_counter()
    state = run_endpoint(work, opts, seed=scenario.seed)
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
    return out
