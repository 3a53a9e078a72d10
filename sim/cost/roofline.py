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

from collections.abc import Iterator
from itertools import repeat

import numpy as np

from sim.cost.base import FloatArray, StepShape, no_decode_run
from sim.hardware.specs import HardwareSpec, ModelSpec

# Below this many steps, decode_steps_s prices in Python rather than numpy.
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
        durations = self.decode_durations_s(num_seqs, context_tokens, num_steps)
        if num_seqs == 0 or num_steps <= SMALL_RUN_STEPS:
            # numpy's per-call overhead dominates below ~30 elements.
            return np.fromiter(durations, np.float64, num_steps)
        # Integer-valued float64 arrays are exact below 2**53, and the operations
        # mirror step_s one for one, so the results match it bit for bit.
        contexts = context_tokens + np.arange(num_steps, dtype=np.float64) * num_seqs
        compute = self._s_per_dense_token * num_seqs + self._s_per_attention_pair * contexts
        memory = self._weight_s + self._s_per_kv_token * (contexts + num_seqs)
        out: FloatArray = self._overhead_s + np.maximum(compute, memory)
        return out

    def decode_durations_s(
        self, num_seqs: int, context_tokens: int, num_steps: int
    ) -> Iterator[float]:
        """``decode_steps_s``'s durations one at a time, each priced when taken
        (``sim.cost.run_ends``: none past a run's cut)."""
        if no_decode_run(num_seqs, context_tokens, num_steps) is not None:
            return repeat(0.0)  # steps of no sequence take no time
        return self._durations(num_seqs, context_tokens)

    def _durations(self, num_seqs: int, context_tokens: int) -> Iterator[float]:
        dense_s = self._s_per_dense_token * num_seqs
        pair_s, weight_s = self._s_per_attention_pair, self._weight_s
        kv_s, overhead_s = self._s_per_kv_token, self._overhead_s
        context = context_tokens
        while True:
            # The operations of step_s, in its order.
            compute = dense_s + pair_s * context
            memory = weight_s + kv_s * (context + num_seqs)
            yield overhead_s + (compute if compute > memory else memory)
            context += num_seqs

    def __repr__(self) -> str:
        return f"RooflineCost(model={self.model.name!r}, hardware={self.hardware.name!r})"
