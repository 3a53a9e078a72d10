"""A cost model plus the per-step work of a real engine loop around the forward pass.

Microbenchmarks time ``forward_step`` alone. A serving engine also schedules,
builds the batch, detokenizes, and commits each step; on a CPU running a
small model that is a few percent of a decode step, and the forward pass
itself may run a little slower or faster inside the loop than in a tight
benchmark (caches). ``EngineOverheadCost`` models a step as::

    step_s = scale * base.step_s(shape) + per_step_s + per_seq_s * num_seqs

with the three coefficients fitted (``calibration.fit.fit_engine_overhead``) from the step
log of a *different* measured run than the one being predicted.
"""

from __future__ import annotations

from sim.cost.base import CostModel, FloatArray, StepShape


class EngineOverheadCost:
    """``base`` scaled, plus a fixed and a per-sequence cost per step."""

    def __init__(
        self,
        base: CostModel,
        scale: float,
        per_step_s: float,
        per_seq_s: float,
        source: str = "engine step log",
    ) -> None:
        if scale <= 0 or per_step_s < 0 or per_seq_s < 0:
            raise ValueError(f"bad overhead coefficients {scale=}, {per_step_s=}, {per_seq_s=}")
        self.base = base
        self.scale = scale
        self.per_step_s = per_step_s
        self.per_seq_s = per_seq_s
        self.source = source

    @property
    def label(self) -> str:
        return (
            f"{self.base.label} x{self.scale:.3f} + {1e3 * self.per_step_s:.3f} ms/step"
            f" + {1e3 * self.per_seq_s:.3f} ms/seq (fit on {self.source})"
        )

    def step_s(self, shape: StepShape) -> float:
        if shape.is_empty:
            return 0.0
        num_seqs = shape.num_prefill_seqs + shape.num_decode_seqs
        return self.scale * self.base.step_s(shape) + self.per_step_s + self.per_seq_s * num_seqs

    def decode_steps_s(self, num_seqs: int, context_tokens: int, num_steps: int) -> FloatArray:
        out = self.base.decode_steps_s(num_seqs, context_tokens, num_steps)
        if num_seqs == 0:
            return out
        # step_s's operations in its order, so skip-ahead gives step-by-step's bits.
        out *= self.scale
        out += self.per_step_s
        out += self.per_seq_s * num_seqs
        return out


class ScaledCost:
    """``base`` times a constant factor (e.g. a deliberately wrong model, in tests)."""

    def __init__(self, base: CostModel, factor: float) -> None:
        if factor <= 0:
            raise ValueError(f"factor must be positive, got {factor}")
        self.base = base
        self.factor = factor

    @property
    def label(self) -> str:
        return f"{self.base.label} x{self.factor:g}"

    def step_s(self, shape: StepShape) -> float:
        return self.factor * self.base.step_s(shape)

    def decode_steps_s(self, num_seqs: int, context_tokens: int, num_steps: int) -> FloatArray:
        out = self.base.decode_steps_s(num_seqs, context_tokens, num_steps)
        out *= self.factor
        return out
