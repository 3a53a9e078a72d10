"""``servesim measure`` and ``validate``: the command-line layer.

``measure`` serves a scenario on the real model (``calibration.measure``);
``validate`` predicts measured runs with the simulator and reports the error
(``calibration.compare_measured``), measuring first when no ``--measured`` folder is
given. Both are registered by ``add_parsers`` (see ``sim.cli.COMMANDS``);
registering them imports neither torch nor aiohttp. ``servesim serve`` is
``sim.cli.serve``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from calibration.cli import (
    add_torch_arguments,
    checked_dtype,
    refuse_torch_options,
    torch_missing,
)
from sim.api import reference_engine_problem
from sim.cli import add_scenario_arguments, options_given
from sim.cli.endpoint import measure_endpoint
from sim.cli.endpoint_options import add_endpoint_arguments, refuse_endpoint_options
from sim.errors import ConfigError
from sim.metrics.out_path import check_out_dir, out_argument
from sim.metrics.report import format_summary_table
from sim.scenario import load_scenario

if TYPE_CHECKING:
    from calibration.reference_engine import OnlineEngine
    from sim.scenario import Scenario


def _common(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, "scenario YAML file, e.g. scenarios/validate_tiny_cpu.yaml")
    add_torch_arguments(parser)
    parser.add_argument("--out", type=out_argument, required=True, help="output folder")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-duration-s", type=float, help="stop measuring after this long")
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="skip timing three step shapes before and after the run (machine drift)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_endpoint_arguments(parser)


def _refuse_sampling_options(args: argparse.Namespace, why: str) -> None:
    """ConfigError naming the first of the in-process engine's sampling and probe
    options given where no model runs here (``why`` says what happens instead)."""
    for flag in options_given(args, _common, ("--temperature", "--top-k", "--top-p", "--no-probe")):
        raise ConfigError(
            f"{flag} applies to the in-process engine: no model runs in this process "
            f"({why}); omit it"
        )


def _measure(args: argparse.Namespace, out: Path) -> Path:
    if args.endpoint:  # a live server: no torch needed
        refuse_torch_options(args, "--endpoint measures a live server, on its own device")
        # The client asks the server for greedy tokens (temperature 0, no top-k or
        # top-p) and probes no step shapes.
        _refuse_sampling_options(args, "--endpoint measures a live server, which samples greedily")
        return measure_endpoint(args, out)
    refuse_endpoint_options(args)  # --profile, --max-concurrency, ...: --endpoint only

    try:
        # Imported here: these modules import torch (the calibrate extra) at their top.
        from calibration.measure import measure
    except ImportError:
        raise torch_missing("measure") from None
    from calibration.sampling import SamplingParams

    scenario = load_scenario(args.scenario, args.set or ())
    try:
        sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    except ValidationError as error:
        problem = error.errors()[0]
        option = "--" + str(problem["loc"][0]).replace("_", "-")  # top_k: --top-k
        value = getattr(args, str(problem["loc"][0]))  # the option the error names
        raise ConfigError(f"{option} {value}: {problem['msg']}") from None
    checked_dtype(args)
    started = time.perf_counter()
    measurement = measure(
        scenario,
        args.device,
        base_dir=Path(args.scenario).parent,
        dtype=args.dtype,
        threads=args.threads,
        sampling=sampling,
        progress=not args.quiet,
        max_duration_s=args.max_duration_s,
        probe=not args.no_probe,
    )
    paths = measurement.write(out)
    print(format_summary_table(measurement.summary))
    s = measurement.summary
    print(f"measured on {s['device_name']} ({s['device']}, {s['threads']} thread(s), {s['dtype']})")
    print(
        f"{s['message']}; {time.perf_counter() - started:.1f} s; wrote {len(paths)} files to {out}/"
    )
    return out


def _check_arguments(args: argparse.Namespace) -> None:
    """Options that would waste a measurement: checked before it starts."""
    if args.max_duration_s is not None and not args.max_duration_s > 0:
        raise ConfigError(f"--max-duration-s must be > 0 seconds, got {args.max_duration_s:g}")
    check_out_dir(Path(args.out))


def _cmd_measure(args: argparse.Namespace) -> int:
    _check_arguments(args)
    _measure(args, Path(args.out))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    # Imported here: matplotlib and pandas (~1 s) load only for validate, not measure.
    from calibration.compare_measured import load_measured, validate, write_validation

    _check_arguments(args)
    out = Path(args.out)
    measured_dirs = list(args.measured or [])
    if len(measured_dirs) > 2:
        raise ConfigError("--measured: give one or two measured runs")
    if measured_dirs:
        # Runs already measured: none of the options of measuring one is read.
        why = "--measured validates runs already measured"
        if args.endpoint:
            raise ConfigError(f"--endpoint {args.endpoint}: {why}; give one of the two")
        refuse_torch_options(args, why)
        _refuse_sampling_options(args, why)
        if args.max_duration_s is not None:
            raise ConfigError(f"--max-duration-s {args.max_duration_s:g}: {why}; omit it")
        refuse_endpoint_options(args)
    else:
        print("no --measured run given: measuring first")
        measured_dirs = [str(_measure(args, out / "measured"))]
    scenario = load_scenario(args.scenario, args.set or ())
    runs = [load_measured(d, args.assume_device, args.assume_model) for d in measured_dirs]
    overhead = load_measured(args.overhead_from) if args.overhead_from else None
    result = validate(
        scenario,
        runs[0],
        second=runs[1] if len(runs) > 1 else None,
        overhead_from=overhead,
        base_dir=Path(args.scenario).parent,
    )
    paths = write_validation(result, out, f"Validation: {scenario.name}")
    print((out / "report.md").read_text())
    for caveat in result.caveats:
        print(f"servesim: warning: {caveat}", file=sys.stderr)
    print(f"wrote {len(paths)} files to {out}/")
    return 0


def reference_engine(args: argparse.Namespace, scenario: Scenario) -> OnlineEngine:
    """``servesim serve``'s reference engine: the scenario's model in PyTorch, not started.

    Called by ``sim.cli.serve`` (which registers the subcommand); refuses what the
    engine cannot run before building the model.
    """
    try:
        import torch

        from calibration.model import TORCH_DTYPES
        from calibration.reference_engine import OnlineEngine
    except ImportError as error:
        raise ConfigError(
            f"servesim serve needs PyTorch for the reference engine ({error}): "
            "pip install -e '.[calibrate,http]'"
        ) from None

    problem = reference_engine_problem(scenario)
    if problem is None and scenario.async_scheduling:
        # The online engine plans each step after the previous one (no visible_until).
        problem = (
            "engine.async_scheduling: servesim serve schedules synchronously; "
            "set engine.async_scheduling: false"
        )
    if problem is not None:
        raise ConfigError(problem)
    dtype = TORCH_DTYPES[checked_dtype(args)]
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    return OnlineEngine(scenario, dtype, torch.device(args.device), args.threads)


def add_parsers(subparsers: Any) -> None:
    """Register ``measure`` and ``validate``."""
    measure = subparsers.add_parser(
        "measure", help="serve a scenario on the real model (PyTorch) and record latencies"
    )
    _common(measure)
    measure.set_defaults(handler=_cmd_measure)
    validate = subparsers.add_parser(
        "validate", help="simulate measured runs and report the prediction error"
    )
    _common(validate)
    validate.add_argument(
        "--measured",
        action="append",
        metavar="FILE_OR_DIR",
        help="a measured run: a measure folder or any format import-run reads (twice: noise floor)",
    )
    validate.add_argument(
        "--assume-device",
        type=_a_name,
        metavar="NAME",
        help="the device an imported run ran on, when it does not say (e.g. rtx-4090)",
    )
    validate.add_argument(
        "--assume-model",
        type=_a_name,
        metavar="NAME",
        help="the model an imported run served, when it does not say",
    )
    validate.add_argument(
        "--overhead-from",
        metavar="DIR",
        help="another measured run whose step log fits the engine overhead (second prediction)",
    )
    validate.set_defaults(handler=_cmd_validate)


def _a_name(text: str) -> str:
    """argparse type: a device or model name, not empty (an empty one would be taken
    as not given, and the run's own name, or none, used instead)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a name, got {text!r}")
    return text.strip()
