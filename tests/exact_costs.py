"""Shared by the hand-checked trace tests: power-of-two costs and tiny workloads.

Every step time is a sum of powers of two, so simulated times add up exactly
and tests can compare them with hand-derived values to 1e-12 s.
"""

from __future__ import annotations

import numpy as np

from sim.cost.linear import LinearCost
from sim.workload.generate import RequestArrays

OVH = 1 / 128  # step overhead, s
PRE = 1 / 1024  # per prefill token, s
DEC = 1 / 256  # per decode sequence, s
COST = LinearCost(step_overhead_s=OVH, per_prefill_token_s=PRE, per_decode_seq_s=DEC)
TOL = 1e-12


def work(
    arrival_s: list[float], prompt: list[int], output: list[int], priority: list[int] | None = None
) -> RequestArrays:
    """An open-loop workload from plain lists."""
    return RequestArrays(
        np.asarray(arrival_s, dtype=np.float64),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        priority=None if priority is None else np.asarray(priority, dtype=np.int64),
    )
