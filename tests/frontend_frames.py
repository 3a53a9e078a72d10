"""The frontend's delivery and the ITL pairs on an expanded step log (one row per
step): the references ``deliver``, ``Delivery.of`` and ``step_itl_gaps_s`` are held
to on the compact one (``tests/test_step_table.py``, ``tests/test_frontend.py``);
and ``step_table``, a frame written by hand as the ``StepTable`` the metrics take."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.engine.step_runs import COUNT_COLUMNS, StepTable
from sim.serving.frontend import Delivery, delivery_s


def step_table(columns: pd.DataFrame | dict[str, object]) -> StepTable:
    """``StepTable.from_frame`` of a step log written by hand: the counts it leaves
    out (those the code under test never reads) are zero."""
    frame = pd.DataFrame(columns)
    if len(frame):
        frame = frame.assign(**{c: 0 for c in COUNT_COLUMNS if c not in frame.columns})
    return StepTable.from_frame(frame)


def frame_itl_gaps_s(
    steps: pd.DataFrame, extra_itl_s: npt.ArrayLike = ()
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``step_itl_gaps_s`` read off one row per step: each step's gap (between
    deliveries, else its duration) where it has ITL tokens, then ``extra_itl_s``."""
    counts = steps["num_itl_tokens"].to_numpy()
    if "delivered_s" in steps.columns:
        delivered = steps["delivered_s"].to_numpy(dtype=np.float64)
        gaps = np.zeros(len(steps))
        # The previous step: of the same replica wherever the count is positive.
        np.subtract(delivered[1:], delivered[:-1], out=gaps[1:])
        used = gaps > 0
        used &= counts > 0
    else:
        ends = steps["end_s"].to_numpy(dtype=np.float64)
        gaps = ends - steps["start_s"].to_numpy(dtype=np.float64)
        used = counts > 0
    extra = np.asarray(extra_itl_s, dtype=np.float64).ravel()
    gaps = np.concatenate([gaps[used], extra])
    return gaps, np.concatenate([counts[used].astype(np.float64), np.ones_like(extra)])


def _replicas(steps: pd.DataFrame) -> npt.NDArray[np.integer]:
    if "replica" not in steps.columns:
        return np.zeros(len(steps), dtype=np.int64)
    return np.asarray(steps["replica"].to_numpy())


def add_delivery(steps: pd.DataFrame, step_s: float, per_output_s: float) -> pd.DataFrame:
    """``steps`` with ``delivered_s`` (``delivery_s`` per replica when there is a
    ``replica`` column)."""
    ends = steps["end_s"].to_numpy(dtype=np.float64)
    outputs = steps["num_outputs"].to_numpy()
    replicas = _replicas(steps)
    delivered = np.full(len(steps), np.nan)
    for replica in np.unique(replicas):
        mine = np.flatnonzero(replicas == replica)
        delivered[mine] = delivery_s(ends[mine], outputs[mine], step_s, per_output_s)
    steps["delivered_s"] = delivered
    return steps


def frame_delivery(steps: pd.DataFrame) -> Delivery:
    """``Delivery`` of an expanded step log with ``delivered_s`` (``add_delivery``)."""
    ends = steps["end_s"].to_numpy(dtype=np.float64)
    delivered = steps["delivered_s"].to_numpy(dtype=np.float64)
    replicas = _replicas(steps)
    parts = []
    for r in np.unique(replicas):
        mine = replicas == r
        parts.append((int(r), ends[mine], delivered[mine]))
    return Delivery(parts)
