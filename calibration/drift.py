"""The machine's drift: probe times (``calibration.probe``) against the cost model.

Torch-free, so that ``servesim validate`` can read a measured run's probes on a
machine without PyTorch.
"""

from __future__ import annotations

import numpy as np

from sim.cost.base import CostModel, StepShape

# Shapes inside every shipped grid's range (chunk <= 128 tokens, batch <= 8,
# context 160), so the curve prices them by interpolation, not extrapolation.
# Each is (prefill chunks as (new, cached) tokens, decode contexts).
PROBE_POINTS: dict[str, tuple[tuple[tuple[int, int], ...], tuple[int, ...]]] = {
    "prefill 128": (((128, 0),), ()),
    "decode 8 x 160": ((), (160,) * 8),
    "mixed 64 + 8 x 160": (((64, 0),), (160,) * 8),
}


def speed_ratio(probes: list[object], cost: CostModel) -> float | None:
    """Geometric mean of measured / predicted over every probe shape and time.

    Above 1: the machine ran slower around the measured run than the cost
    model says. ``probes`` are ``run_probe`` results as read back from a
    ``summary.json`` (anything else is skipped); None if nothing usable.
    """
    logs = []
    for medians in probes:
        if not isinstance(medians, dict):
            continue
        for name, measured in medians.items():
            point = PROBE_POINTS.get(str(name))
            if point is None or not isinstance(measured, int | float) or measured <= 0:
                continue
            chunks, contexts = point
            predicted = cost.step_s(StepShape.build(list(chunks), list(contexts)))
            logs.append(np.log(float(measured) / predicted))
    return float(np.exp(np.mean(logs))) if logs else None
