"""Run many independent simulations: the point function and its executors.

A *task* is a plain dict (``{"scenario": <validated scenario dict>, "base_dir": ...}``
for ``run_point``) so that it pickles cheaply to other processes or Ray workers; a
point function (default ``run_point``; the planner's is a whole capacity search) turns
it into a flat record, the same under every executor. Executors yield ``(index,
record)`` as tasks finish; ``local`` draws the next task only once a finished one has
been handed over, so a task iterator that reads the records seen so far (the planner's
pruning) decides each next task on everything finished before it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from sim import api
from sim.errors import ConfigError
from sim.planning.served import load_set_by_clients, served_ratio_of
from sim.scenario import Scenario, scenario_from_dict

Task = dict[str, Any]
Record = dict[str, Any]
PointFunction = Callable[[Task], Record]


def task_for(doc: dict[str, Any], scenario: Scenario) -> Task:
    """``run_point``'s task of ``doc`` (``scenario``'s dict): its relative paths read from
    the scenario's folder (``Scenario.base_dir``; None: the working directory)."""
    return {"scenario": doc, "base_dir": str(scenario.base_dir or Path.cwd())}


def batch_size_one(scenario: Any) -> bool:
    """True when the engine serves one request at a time (a single FIFO server)."""
    return bool(scenario.scheduler.step_seq_bound() == 1)


def offered_rate_per_s(scenario: Any, arrival_s: np.ndarray) -> float | None:
    """Requests per second the workload offers: nominal if synthetic, measured from a
    trace, None for a closed loop. Under a binding ``max_concurrency`` ``arrival_s`` are
    send times: the sends after the first instant, each following an answer, per second
    up to the last one are the clients' throughput while all are busy (Little:
    ``max_concurrency / mean E2E``), free of the drain ``request_throughput`` counts."""
    workload = scenario.workload
    if workload.kind != "closed_loop" and load_set_by_clients(workload, arrival_s.size):
        sent_s = arrival_s[np.isfinite(arrival_s)]
        span_s = float(sent_s.max() - sent_s.min()) if sent_s.size else 0.0
        later = int(np.count_nonzero(sent_s > sent_s.min())) if sent_s.size else 0
        return later / span_s if span_s > 0 else None
    if workload.kind == "synthetic":
        return float(workload.arrival.rate_per_s)
    if workload.kind == "trace" and arrival_s.size >= 2:
        span_s = float(np.nanmax(arrival_s) - np.nanmin(arrival_s))
        return (arrival_s.size - 1) / span_s if span_s > 0 else None
    return None


def _queue_stats(result: Any) -> Record:
    """Service-time moments of a batch-size-1 run, for the M/G/1 cross-check: a
    request's service runs from its first scheduled step to its last token, and its TTFT
    less its queueing is load-independent (way in, prefill, way out)."""
    empty: Record = dict.fromkeys(("service_mean_s", "service_m2_s2", "ttft_excl_queue_mean_s"))
    if not batch_size_one(result.scenario):
        return empty
    frame = result.requests
    service = (frame["engine_finish_s"] - frame["first_scheduled_s"]).to_numpy(float)
    base = (frame["ttft_s"] - frame["queue_s"]).to_numpy(float)
    service, base = service[np.isfinite(service)], base[np.isfinite(base)]
    if service.size == 0 or base.size == 0:
        return empty
    return {
        "service_mean_s": float(service.mean()),
        "service_m2_s2": float(np.mean(service**2)),
        "ttft_excl_queue_mean_s": float(base.mean()),
    }


def run_point(task: Task) -> Record:
    """Simulate one validated scenario dict; a flat record of scalars."""
    # Every relative path read from the scenario's folder (Scenario.base_dir).
    scenario = scenario_from_dict(task["scenario"], "<sweep point>", Path(task["base_dir"]))
    # A process runs many points: the compiled loop's start-up (~0.4 s, once) pays.
    result = api.run(scenario, compiled=True)
    record: Record = {
        key: value
        for key, value in result.summary.items()
        if value is None or isinstance(value, (int, float, str, bool))
    }
    records = result.raw.records  # columns: no frame is built for a point's two columns
    arrivals = np.asarray(records["arrival_s"], dtype=float)
    record["offered_rate_per_s"] = offered_rate_per_s(scenario, arrivals)
    finishes = np.asarray(records["finish_s"], dtype=float)
    record["served_ratio"] = served_ratio_of(scenario.workload, arrivals, finishes)
    workload = scenario.workload
    arrival = None if workload.kind == "closed_loop" else workload.arrival
    record["arrival_kind"] = workload.kind if arrival is None else arrival.kind
    record.update(_queue_stats(result))
    return record


def default_jobs() -> int:
    """Worker processes by default: every CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_local(
    tasks: Iterable[Task], jobs: int | None = None, function: PointFunction = run_point
) -> Iterator[tuple[int, Record]]:
    """Run tasks in at most ``jobs`` worker processes (``jobs=1``, or a single task: in
    this process), drawing the next only after a finished one was yielded."""
    jobs = default_jobs() if jobs is None else jobs
    if isinstance(tasks, Sequence) and len(tasks) <= 1:
        jobs = 1
    if jobs == 1:
        for index, task in enumerate(tasks):
            yield index, function(task)
        return
    if isinstance(tasks, Sequence):
        jobs = min(jobs, len(tasks))
    source = enumerate(tasks)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        running: dict[Future[Record], int] = {}

        def fill() -> None:
            while len(running) < jobs:
                item = next(source, None)
                if item is None:
                    return
                running[pool.submit(function, item[1])] = item[0]

        fill()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                yield running.pop(future), future.result()
            fill()


def _import_ray() -> Any:
    try:
        # Imported here: ray is an optional extra (--executor ray).
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray, an optional extra: pip install 'ray>=2.9'"
        ) from None
    return ray


def run_ray(
    tasks: Iterable[Task],
    address: str | None = None,
    function: PointFunction = run_point,
) -> Iterator[tuple[int, Record]]:
    """Run tasks as Ray tasks, all submitted at once (the cluster schedules them);
    starts (and later stops) Ray if it is not running."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(function)
        pending = {remote.remote(task): i for i, task in enumerate(tasks)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started_here:
            ray.shutdown()


def check_executor(executor: str, jobs: int | None, address: str | None) -> None:
    """The errors ``execute`` would raise for these options, before any work starts."""
    if executor not in ("local", "ray"):
        raise ConfigError(f"--executor: unknown executor {executor!r}; expected local or ray")
    if executor == "local" and address is not None:
        raise ConfigError("--address applies only to --executor ray")
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    if executor == "ray" and jobs is not None:  # run_ray takes no count
        raise ConfigError("--jobs applies to --executor local (Ray places the tasks itself)")
    if executor == "ray":
        _import_ray()


def execute(
    tasks: Iterable[Task],
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    function: PointFunction = run_point,
) -> Iterator[tuple[int, Record]]:
    """Run ``tasks`` on the chosen executor, yielding ``(index, record)`` as they finish."""
    check_executor(executor, jobs, address)  # fail now, before any work
    if executor == "local":
        return run_local(tasks, jobs, function)
    return run_ray(tasks, address, function)
