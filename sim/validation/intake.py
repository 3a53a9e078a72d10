"""When an engine took each request in: where a vLLM run's latencies count from.

vLLM's engine core drains its input queue at the top of each turn of its busy
loop, right before it schedules (vLLM 0.19 ``EngineCoreProc.run_busy_loop`` ->
``_process_input_queue`` -> ``Scheduler.add_request``, event ``QUEUED``, which
stamps ``queued_ts``): while busy once a step, as the step before the one it
plans starts (the one before has returned its output); while idle at once. A
run whose arrivals are those stamps (LLMServingSim's, ``ENGINE_INTAKE``) counts
its TTFT and E2EL from them. A replay puts each request at its engine at the
stamp, but the simulated loop turns at its own step starts: the request is
taken in at the first one at or after it reaches the engine (the plan made
then is the first that sees it, ``EngineCore.schedule``'s ``visible_until_s``),
or at once by an idle engine. Counted from the stamp instead, a replay's TTFT
carries half a step on average that the measurement does not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.api import Result

ENGINE_INTAKE = "engine_intake"
"""An imported run's ``latency_from`` (``run.json``) when its arrivals are the
engine's intake stamps, so its replay counts from the simulated intake too."""


def engine_intake_s(requests: pd.DataFrame, steps: pd.DataFrame, lockstep: bool) -> np.ndarray:
    """When a replay's engine took each request (``ready_s``: at the engine) in, in
    seconds: the first step start of its ``replica`` at or after it, or its
    ``ready_s`` where no step starts later (an idle engine takes it at once).
    ``lockstep``: the replicas turn together, an idle rank with its dummy batch
    (``cluster.lockstep``), so any rank's step start is each one's."""
    ready = requests["ready_s"].to_numpy(dtype=np.float64)
    replicas = requests["replica"].to_numpy()
    intake = ready.copy()
    for replica in [None] if lockstep else np.unique(replicas):
        mine = np.ones(ready.size, bool) if replica is None else replicas == replica
        own = steps if replica is None else steps[steps["replica"] == replica]
        starts = np.unique(own["start_s"].to_numpy(dtype=np.float64))
        if starts.size == 0:
            continue
        at = np.searchsorted(starts, ready[mine], side="left")
        found = at < starts.size
        intake[mine] = np.where(found, starts[np.minimum(at, starts.size - 1)], ready[mine])
    return intake


def counted_from_intake(result: Result) -> pd.DataFrame:
    """``result``'s requests with ``arrival_s`` moved to the engine's intake
    (``engine_intake_s``), so that their TTFT and E2EL count from it."""
    cluster = result.scenario.cluster
    lockstep = cluster is not None and cluster.lockstep
    requests = result.requests
    return requests.assign(arrival_s=engine_intake_s(requests, result.steps, lockstep))
