"""Runs through the Python path and the compiled loop, and their comparison
(``tests/test_compiled_path.py``, ``tests/properties/test_compiled_equivalence.py``)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
import pytest

from sim.fast.compiled import path
from sim.serving.cluster import Cluster
from sim.serving.replica_config import ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation
from sim.workload.generate import RequestArrays


def record_plays(patch: pytest.MonkeyPatch) -> list[bool]:
    """What each ``path.run_compiled`` call answers from now on (True: the compiled
    loop played the run), in order."""
    played: list[bool] = []
    run_compiled = path.run_compiled

    def recording(*args: Any) -> bool:
        played.append(run_compiled(*args))
        return played[-1]

    patch.setattr(path, "run_compiled", recording)
    return played


def simulate(
    arrays: RequestArrays,
    engine: ReplicaConfig,
    mode: str,
    cluster: Cluster | None = None,
    workers: int | None = 1,
) -> tuple[RawResult, list[int], bool]:
    """One run with ``SERVESIM_COMPILED=mode``: its result, the request ids in the
    order they left each core (replica after replica), and whether the compiled
    loop played it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SERVESIM_COMPILED", mode)
        played = record_plays(patch)
        simulation = Simulation(engine, cluster, workers=workers)
        orders: list[list[int]] = []
        for core in simulation.cores:
            order: list[int] = []
            orders.append(order)
            take = core.take_records

            def taking(take: Any = take, order: list[int] = order) -> dict[str, Any]:
                records = take()
                order.extend(records["request_id"].tolist())
                return records

            patch.setattr(core, "take_records", taking)
        raw = simulation.run(cast(OpenLoop, arrays))
    assert (raw.accelerator == "compiled loop") == bool(
        played and played[0]
    )  # the result says which loop ran
    return raw, [i for order in orders for i in order], bool(played and played[0])


def assert_identical(a: RawResult, b: RawResult) -> None:
    """The same records, steps, series, breaks and rejections, to the bit."""
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)
    assert a.later_runs == b.later_runs
    assert a.rejections == b.rejections
    np.testing.assert_array_equal(a.extra_itl_s, b.extra_itl_s)
