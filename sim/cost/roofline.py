"""Roofline cost model: a step takes as long as the slower of its FLOPs and its bytes.

For a step of shape ``s`` on model ``m`` and hardware ``h``::

    tokens    = s.num_prefill_tokens + s.num_decode_seqs                      [tokens]
    flops     = m.dense_flops_per_token * tokens                              [FLOP]
              + 4 * layers * heads * head_dim
                  * (s.prefill_attention_pairs + s.num_decode_context_tokens) [FLOP]
    bytes     = m.weight_bytes                      (every weight read once)  [B]
              + m.kv_bytes_per_token
                  * (s.prefill_kv_read_tokens + s.num_decode_context_tokens)  [B] KV read
              + m.kv_bytes_per_token * tokens                                 [B] KV written
    compute_s = flops / (h.peak_flops_per_s * h.compute_efficiency)           [s]
    memory_s  = bytes / (h.memory_bandwidth_bytes_per_s * h.memory_efficiency)[s]
    step_s    = h.step_overhead_s + max(compute_s, memory_s)                  [s]

An empty step costs 0 s. Small decode batches are memory-bound (about
weight bytes / effective bandwidth per step); long prefills are compute-bound.
Activations are ignored: they stay on chip or are small next to weights and KV.
"""

from __future__ import annotations

import numpy as np

from sim.cost.base import FloatArray, StepShape, no_decode_run
from sim.hardware.specs import HardwareSpec, ModelSpec

# Below this many steps, decode_steps_s loops in Python rather than numpy.
SMALL_RUN_STEPS = 24


class RooflineCost:
    """Step time from model and hardware specs by the roofline formula (see module)."""

    __slots__ = (
        "_overhead_s",
        "_s_per_attention_pair",
        "_s_per_dense_token",
        "_s_per_kv_token",
        "_weight_s",
        "hardware",
        "model",
    )

    def __init__(self, model: ModelSpec, hardware: HardwareSpec) -> None:
        self.model = model
        self.hardware = hardware
        # Everything is folded into seconds-per-count constants once, so that
        # step_s is a handful of float operations.
        flops_per_s = hardware.peak_flops_per_s * hardware.compute_efficiency
        bytes_per_s = hardware.memory_bandwidth_bytes_per_s * hardware.memory_efficiency
        self._overhead_s = hardware.step_overhead_s
        self._s_per_dense_token = model.dense_flops_per_token / flops_per_s
        self._s_per_attention_pair = model.attention_flops_per_pair / flops_per_s
        self._weight_s = model.weight_bytes / bytes_per_s
        self._s_per_kv_token = model.kv_bytes_per_token / bytes_per_s

    @property
    def label(self) -> str:
        return f"roofline:{self.model.name}@{self.hardware.name}"

    def compute_s(self, shape: StepShape) -> float:
        """Seconds the step's FLOPs take at effective peak (no overhead)."""
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        pairs = shape.prefill_attention_pairs + shape.num_decode_context_tokens
        return self._s_per_dense_token * tokens + self._s_per_attention_pair * pairs

    def memory_s(self, shape: StepShape) -> float:
        """Seconds the step's weight and KV traffic take at effective bandwidth."""
        kv_tokens = (
            shape.prefill_kv_read_tokens
            + shape.num_decode_context_tokens
            + shape.num_prefill_tokens
            + shape.num_decode_seqs
        )
        return self._weight_s + self._s_per_kv_token * kv_tokens

    def step_s(self, shape: StepShape) -> float:
        # compute_s and memory_s inlined: this runs millions of times per run.
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        if tokens == 0:
            return 0.0
        context = shape.num_decode_context_tokens
        compute = self._s_per_dense_token * tokens + self._s_per_attention_pair * (
            shape.prefill_attention_pairs + context
        )
        memory = self._weight_s + self._s_per_kv_token * (
            shape.prefill_kv_read_tokens + context + tokens
        )
        # A conditional expression is several times cheaper than calling max().
        return self._overhead_s + (compute if compute > memory else memory)

    def decode_steps_s(self, num_seqs: int, context_tokens: int, num_steps: int) -> FloatArray:
        if (zeros := no_decode_run(num_seqs, context_tokens, num_steps)) is not None:
            return zeros
        if num_steps <= SMALL_RUN_STEPS:
            return np.array(self._decode_steps_list(num_seqs, context_tokens, num_steps))
        # Integer-valued float64 arrays are exact below 2**53, and the operations
        # mirror step_s one for one, so the results match it bit for bit.
        contexts = context_tokens + np.arange(num_steps, dtype=np.float64) * num_seqs
        compute = self._s_per_dense_token * num_seqs + self._s_per_attention_pair * contexts
        memory = self._weight_s + self._s_per_kv_token * (contexts + num_seqs)
        out: FloatArray = self._overhead_s + np.maximum(compute, memory)
        return out

    def _decode_steps_list(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[float]:
        """Plain-Python twin of the numpy path: 3x faster for short runs (numpy's
        per-call overhead dominates below ~30 elements), same operations in the
        same order, so the same bits."""
        dense_s = self._s_per_dense_token * num_seqs
        pair_s, weight_s = self._s_per_attention_pair, self._weight_s
        kv_s, overhead_s = self._s_per_kv_token, self._overhead_s
        out = []
        for j in range(num_steps):
            context = context_tokens + j * num_seqs
            compute = dense_s + pair_s * context
            memory = weight_s + kv_s * (context + num_seqs)
            out.append(overhead_s + (compute if compute > memory else memory))
        return out

    def decode_ends_s(
        self,
        first_end_s: float,
        num_seqs: int,
        context_tokens: int,
        num_decode_steps: int,
        stop_s: float,
        num_after: int,
    ) -> list[float]:
        """``sim.cost.run_ends.run_ends_s`` for this model: the same sums, but
        steps past the cut are never priced (an open-loop run usually stops at the
        next arrival, long before its first finish)."""
        # Decode steps still to price: all, unless one ends at or after stop_s.
        left = num_decode_steps if first_end_s < stop_s else min(num_decode_steps, num_after - 1)
        if no_decode_run(num_seqs, context_tokens, num_decode_steps) is not None:
            return [first_end_s] * (1 + left)  # steps of no sequence take no time
        dense_s = self._s_per_dense_token * num_seqs
        pair_s, weight_s = self._s_per_attention_pair, self._weight_s
        kv_s, overhead_s = self._s_per_kv_token, self._overhead_s
        end = first_end_s
        ends = [end]
        context = context_tokens
        while left > 0:
            # The operations of step_s (and _decode_steps_list), in its order.
            compute = dense_s + pair_s * context
            memory = weight_s + kv_s * (context + num_seqs)
            end += overhead_s + (compute if compute > memory else memory)
            ends.append(end)
            context += num_seqs
            left -= 1
            if end >= stop_s:  # the cut: num_after - 1 more steps at most
                left = min(left, num_after - 1)
                stop_s = float("inf")
        return ends

    def __repr__(self) -> str:
        return f"RooflineCost(model={self.model.name!r}, hardware={self.hardware.name!r})"
