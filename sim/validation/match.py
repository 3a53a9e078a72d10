"""Does a measured run belong to a scenario? What differs, for ``validate`` to refuse.

``validate`` replays the measured requests with the scenario's engine and
cost model, so a run of another model or another workload would be
"predicted" without complaint (a tiny-model CPU run against a Llama-3-8B /
H100 scenario once reported +6.3 %). Checked:

- the model, where the run names one: names are compared after dropping the
  organisation (``meta-llama/``), a ``meta-`` prefix, case, and the
  simulator's aliases (``llama-3-8b`` has Llama-3.1-8B's shapes); a run's
  model may add a suffix (``-Instruct``, ``-2507``) to the scenario's;
- the number of requests against the scenario's workload: the run's
  completed requests, or those plus the ones it counted as failed (a
  scenario replaying the run's own ``trace.csv`` has only the completed);
- for an open-loop workload of as many requests, the prompt and output
  lengths, compared as multisets (arrival jitter may reorder requests).
  A run stopped early (``servesim measure`` status other than ``complete``)
  is only checked for holding no more requests than the scenario.

The hardware is not compared: runs name devices in their own words.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.cost.model_configs import MODEL_SPEC_ALIASES
from sim.scenario import Scenario
from sim.workload.generate import ClosedLoopWorkload, generate_open_loop


def _normal(name: str) -> str:
    short = name.strip().lower().rsplit("/", 1)[-1]
    short = short.removeprefix("meta-")
    for alias, preset in MODEL_SPEC_ALIASES.items():
        if short == alias or short.startswith(alias + "-"):
            return preset + short[len(alias) :]
    return short


def same_model(scenario_model: str, measured_model: str) -> bool:
    """True when ``measured_model`` names the scenario's model (or a variant of it)."""
    a, b = _normal(scenario_model), _normal(measured_model)
    return b == a or b.startswith(a + "-") or a.startswith(b + "-")


def mismatches(
    scenario: Scenario,
    requests: pd.DataFrame,
    measured_model: str | None,
    num_failed: int = 0,
    base_dir: Path | None = None,
    partial: bool = False,
) -> list[str]:
    """What differs between a measured run and ``scenario`` (empty: it matches).

    A ``partial`` run (stopped early) may hold fewer requests than the scenario.
    """
    found = []
    if measured_model and not same_model(scenario.model.name, measured_model):
        found.append(f"model {measured_model!r} measured, {scenario.model.name!r} in the scenario")
    workload = scenario.workload
    if isinstance(workload, ClosedLoopWorkload):
        expected = workload.num_requests
        prompts = outputs = None
    else:
        work = generate_open_loop(workload, np.random.default_rng(scenario.seed), base_dir)
        expected = len(work)
        prompts, outputs = work.num_prompt_tokens, work.num_output_tokens
    # A run's own trace (import-run) lists only the requests that completed.
    if partial:
        if len(requests) > expected:
            found.append(f"{len(requests)} requests measured, {expected} in the scenario")
    elif expected not in (len(requests), len(requests) + num_failed):
        failed = f" (and {num_failed} failed)" if num_failed else ""
        found.append(f"{len(requests)} requests measured{failed}, {expected} in the scenario")
    elif prompts is not None and outputs is not None and len(requests) == expected:
        for name, column, wanted in (
            ("prompt", "num_prompt_tokens", prompts),
            ("output", "num_output_tokens", outputs),
        ):
            have = np.sort(requests[column].to_numpy(dtype=np.int64))
            differ = int(np.count_nonzero(have != np.sort(wanted)))
            if differ:
                found.append(f"{name} lengths differ ({differ} of {len(have)} sorted values)")
    return found
