"""Round-robin replicas simulated in several processes at once.

Replicas behind a fresh round-robin router never affect one another (each takes
its own turns, ``sim.fast.feed.pool_feeds``), so they can be dealt to worker
processes, each sending back its replicas' ``CoreOutput``s: the same result, to
the bit (tested). Workers are forked (Linux only) from this process's state, the
workload and engine built, and import nothing. Used only where it pays: several
usable CPUs, enough requests per worker, and not inside a sweep's worker.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import numpy as np

from sim.fast.feed import Feed, take_feeds
from sim.fast.forks import forking_supported
from sim.serving.pool import Pool
from sim.serving.progress import Progress
from sim.serving.raw_result import CoreOutput

# Below this many requests a worker's start (a fork, ~10 ms) and its pickled
# outputs cost about what its share of the run saves (16 replicas on two
# cores: 1,000 requests 0.16 -> 0.12 s, 4,000 requests 0.65 -> 0.36 s).
MIN_REQUESTS_PER_WORKER = 1_000


def usable_cpus() -> int:
    """CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_num_workers(num_replicas: int, num_requests: int) -> int:
    """Processes to simulate ``num_replicas`` round-robin replicas with (1: this one only)."""
    if not forking_supported():
        return 1
    if multiprocessing.parent_process() is not None:  # a sweep's worker, say
        return 1
    return max(1, min(usable_cpus(), num_replicas, num_requests // MIN_REQUESTS_PER_WORKER))


def shares(num_replicas: int, num_workers: int) -> list[list[int]]:
    """Replica indices per worker, dealt in turn (neighbours' loads are alike)."""
    return [list(range(w, num_replicas, num_workers)) for w in range(num_workers)]


class WorkerError(RuntimeError):
    """A worker process failed; the message holds its traceback."""


def run_in_workers(
    pool: Pool,
    feeds: Sequence[Feed],
    num_workers: int,
    drive: Callable[[Callable[[], None]], None],
    progress: Progress,
) -> list[CoreOutput]:
    """Simulate ``pool``'s replicas, fed by ``feeds``, in ``num_workers`` processes
    (this one included): every replica's outputs, in replica order. ``drive(tick)``
    runs the SimPy environment to its end; ``progress`` counts every worker's done."""
    context = multiprocessing.get_context("fork")
    share = shares(len(pool.replicas), num_workers)
    # Requests done in each other worker, for the bar (shared memory, no lock:
    # each slot has one writer, and the bar only needs a recent value).
    done = context.RawArray("q", num_workers)
    counted = progress.done
    progress.done = lambda: counted() + sum(done)
    children: list[tuple[Any, Connection]] = []
    for w in range(1, num_workers):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(
            target=_work, args=(pool, feeds, share[w], drive, done, w, send), daemon=True
        )
        child.start()
        send.close()
        children.append((child, receive))
    failure: str | None = None
    outputs: dict[int, CoreOutput] = {}
    try:
        mine = _simulate(pool, feeds, share[0], drive, progress.tick)
        outputs.update(zip(share[0], mine, strict=True))
        pending = {receive: w for w, (_, receive) in enumerate(children, start=1)}
        while pending:
            for ready in wait(list(pending), timeout=0.25):
                receive = cast(Connection, ready)  # wait returns what it was given
                w = pending.pop(receive)
                try:
                    reply = receive.recv()
                except EOFError:
                    reply = f"worker {w} ended without a result"
                if isinstance(reply, str):
                    failure = failure or reply
                else:
                    outputs.update(zip(share[w], reply, strict=True))
            progress.tick()
    finally:
        for child, receive in children:
            receive.close()
            if len(outputs) < len(pool.replicas) and failure is None:
                child.terminate()  # this process failed (or was interrupted): stop the rest
            child.join()
    if failure is not None:
        raise WorkerError(failure)
    return [outputs[i] for i in range(len(pool.replicas))]


def _simulate(
    pool: Pool,
    feeds: Sequence[Feed],
    mine: list[int],
    drive: Callable[[Callable[[], None]], None],
    tick: Callable[[], None],
) -> list[CoreOutput]:
    """Run the replicas ``mine`` on their feeds (the others get none); their outputs."""
    owned = set(mine)
    take_feeds(pool, [feed if i in owned else _empty(pool, i) for i, feed in enumerate(feeds)])
    drive(tick)
    cores = [pool.cores[i] for i in mine]
    for core in cores:
        core.flush_unfinished()
    return [CoreOutput.of(core) for core in cores]


def _work(
    pool: Pool,
    feeds: Sequence[Feed],
    mine: list[int],
    drive: Callable[[Callable[[], None]], None],
    done: Any,
    w: int,
    send: Connection,
) -> None:
    """A worker process: simulate ``mine``, send their outputs (or a traceback) back."""
    cores = [pool.cores[i] for i in mine]

    def report() -> None:
        done[w] = sum(core.num_done for core in cores)

    try:
        reply: object = _simulate(pool, feeds, mine, drive, report)
        report()  # all of them, before the parent hears of it
    except BaseException:  # any failure goes back to the parent, whole
        reply = f"worker {w} failed:\n{traceback.format_exc()}"
    send.send(reply)
    send.close()


def _empty(pool: Pool, index: int) -> Feed:
    """A feed with no requests for replica ``index``: it plans once, at time 0, and stops."""
    nothing = np.empty(0, dtype=np.float64)
    return Feed(nothing, nothing, iter(()), pool.cores[index].add)
