"""When an engine took each request in: where a vLLM run's latencies count from.

vLLM's engine core drains its input queue at the top of each turn of its busy
loop, right before it schedules (vLLM 0.19 ``EngineCoreProc.run_busy_loop`` ->
``_process_input_queue`` -> ``Scheduler.add_request``, event ``QUEUED``, which
stamps ``queued_ts``): once a step while busy, at once while idle. A run whose
arrivals are those stamps (LLMServingSim's: ``ENGINE_INTAKE``) counts TTFT and
E2EL from them. A replay puts the request at its engine at the stamp, mid-step;
the simulated loop takes it in at the next step start (the first plan that sees
it, ``EngineCore.schedule``'s ``visible_until_s``), so counted from the stamp its
TTFT would carry half a step on average that the measurement does not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.api import Result

ENGINE_INTAKE = "engine_intake"
"""An imported run's ``latency_from`` (``run.json``) when its arrivals are the
engine's intake stamps, so its replay counts from the simulated intake too."""


def engine_intake_s(requests: pd.DataFrame, steps: pd.DataFrame, lockstep: bool) -> np.ndarray:
    """When a replay's engine took each request in (s): the first step start of its
    ``replica`` at or after its ``ready_s``, else ``ready_s`` (an idle engine takes
    it at once). ``lockstep``: the ranks turn together, an idle one with its dummy
    batch (``cluster.lockstep``), so any rank's step start is each one's."""
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
