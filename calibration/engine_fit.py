"""Second calibration source: engine overhead fitted from a measured run's step log.

Each step of a measured run (``steps.parquet``) is a sample: its shape, and
how long the engine was busy with it, from scheduling to the end of its
bookkeeping (``done_s - start_s``). The fit finds non-negative ``scale``,
``per_step_s`` and ``per_seq_s`` of ``sim.cost.fitted.EngineOverheadCost``
minimising the relative error (rows weighted by
1 / measured time, as ``calibration.fit``), with NNLS. Fit it on one run and
predict *another*: a fit on the run being predicted is not a validation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.nnls import nnls
from sim.cost.base import SHAPE_FIELDS, CostModel, StepShape
from sim.cost.fitted import EngineOverheadCost


def step_shapes(steps: pd.DataFrame) -> list[StepShape]:
    """The StepShape of every row of a measured step log."""
    rows = steps[list(SHAPE_FIELDS)].to_numpy(dtype=np.int64)
    return [StepShape(*(int(v) for v in row)) for row in rows]


def fit_engine_overhead(
    steps: pd.DataFrame, base: CostModel, source: str = "engine step log"
) -> EngineOverheadCost:
    """Fit ``scale * base + per_step_s + per_seq_s * seqs`` to the busy time of each step."""
    if steps.empty:
        raise ValueError("no steps to fit")
    busy = (steps["done_s"] - steps["start_s"]).to_numpy(dtype=np.float64)
    shapes = step_shapes(steps)
    predicted = np.array([base.step_s(s) for s in shapes])
    seqs = np.array([s.num_prefill_seqs + s.num_decode_seqs for s in shapes], dtype=np.float64)
    design = np.column_stack([predicted, np.ones_like(predicted), seqs]) / busy[:, None]
    norms = np.linalg.norm(design, axis=0)
    norms[norms == 0] = 1.0
    coef = nnls(design / norms, np.ones_like(busy)) / norms
    scale = float(coef[0]) if coef[0] > 0 else 1.0
    return EngineOverheadCost(base, scale, float(coef[1]), float(coef[2]), source=source)
