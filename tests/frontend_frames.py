"""The frontend's delivery on an expanded step log (one row per step): the reference
``deliver`` and ``Delivery.of`` are held to on the compact one
(``tests/test_step_table.py``, ``tests/test_frontend.py``)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from sim.serving.frontend import Delivery, delivery_s


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
