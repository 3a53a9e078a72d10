"""The ``--from-run`` options of ``servesim calibrate`` (argparse only: ``--help`` stays fast).

The command itself is ``sim.validation.fit_cli.calibrate_from_runs``.
"""

from __future__ import annotations

import argparse

# The free parameters of sim.cost.fitted.FitParameters, in the order fits report them.
PARAMETERS = ("step_overhead_s", "prefill_multiplier", "decode_multiplier")
DEFAULT_MAX_EVALUATIONS = 120


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``--from-run`` options to ``servesim calibrate``'s parser."""
    parser.add_argument(
        "--from-run",
        nargs="+",
        metavar="RUN",
        help=(
            "black-box calibration: fit an overhead and prefill / decode multipliers of a "
            "base cost model to these measured runs (any import-run format, measure "
            "folders); no torch needed"
        ),
    )
    parser.add_argument("--hardware", help="with --from-run: the hardware preset the runs ran on")
    parser.add_argument(
        "--scenario",
        help="with --from-run: replay with this scenario's engine settings and cost model "
        "(default: the runs' recorded settings and cost kind auto)",
    )
    parser.add_argument(
        "--free",
        default=",".join(PARAMETERS),
        help="with --from-run: parameters to fit, comma-separated (default: all three)",
    )
    parser.add_argument(
        "--max-evals",
        type=int,
        default=DEFAULT_MAX_EVALUATIONS,
        help=f"with --from-run: simulations per fit after 13 that pick a start (default "
        f"{DEFAULT_MAX_EVALUATIONS})",
    )
    parser.add_argument(
        "--no-cross-validation", action="store_true", help="with --from-run: fit on all runs only"
    )
