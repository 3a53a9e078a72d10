"""Predict a measured run with parameters fitted to another run (another model, same GPU).

    python benchmarks/fitted_transfer.py --artifact docs/validation/blackbox/A.json \\
        --scenario scenarios/public/B.yaml --run validation/public/.../B

Replays run B's requests under scenario B with B's own base cost model
wrapped in the overhead and multipliers that artifact A fitted (to A's runs),
and prints base vs fitted errors at p50 / p90 / p99 of TTFT and TPOT: does
what the fit learnt about a GPU and engine carry over to another model?
Nothing of run B is fitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.cost.fitted import load_fitted_artifact  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402
from sim.validation.fit import Target, render_rows, target_rows  # noqa: E402
from sim.validation.fit_runs import replay_runs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True, help="fitted cost artifact (A)")
    parser.add_argument("--scenario", type=Path, required=True, help="scenario of run B")
    parser.add_argument("--run", required=True, help="measured run B")
    args = parser.parse_args(argv)
    artifact = load_fitted_artifact(args.artifact)
    scenario = load_scenario(args.scenario)
    # Run B as calibrate --from-run --scenario replays it (its load, its intake mark),
    # on the fit's GPU-only base: the fitted overhead stands for the engine's CPU work.
    (run,) = replay_runs([args.run], scenario.model, None, str(args.scenario), "multipliers").runs
    rows = target_rows([run], [Target(0)], artifact.parameters)
    print(f"{args.run} with the parameters of {args.artifact.name} on {run.base.label}:\n")
    print("\n".join(render_rows(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
