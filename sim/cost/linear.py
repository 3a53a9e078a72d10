"""A cost model linear in the step's counts, for teaching and exact queueing checks.

    step_s = step_overhead_s
           + per_prefill_seq_s    * num_prefill_seqs           [s/seq   * seqs]
           + per_prefill_token_s  * num_prefill_tokens         [s/token * tokens]
           + per_attention_pair_s * prefill_attention_pairs    [s/pair  * pairs]
           + per_decode_seq_s     * num_decode_seqs            [s/seq   * seqs]
           + per_context_token_s  * num_decode_context_tokens  [s/token * tokens]

An empty step costs 0 s. With only ``per_decode_seq_s`` (or only the overhead)
non-zero every step has a fixed service time, which is what M/D/1-style checks
need. The coefficients are checked where a scenario gives them
(``sim.cost.config.LinearCostConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.base import StepShape


@dataclass(slots=True, eq=False)  # eq=False: compared and hashed by identity, as any cost model
class LinearCost:
    """Step time as a non-negative linear function of the step's counts (see module)."""

    step_overhead_s: float = 0.0
    per_prefill_seq_s: float = 0.0
    per_prefill_token_s: float = 0.0
    per_attention_pair_s: float = 0.0
    per_decode_seq_s: float = 0.0
    per_context_token_s: float = 0.0

    @property
    def label(self) -> str:
        return "linear"

    def step_s(self, shape: StepShape) -> float:
        if shape.num_prefill_tokens == 0 and shape.num_decode_seqs == 0:
            return 0.0
        return (
            self.step_overhead_s
            + self.per_prefill_seq_s * shape.num_prefill_seqs
            + self.per_prefill_token_s * shape.num_prefill_tokens
            + self.per_attention_pair_s * shape.prefill_attention_pairs
            + self.per_decode_seq_s * shape.num_decode_seqs
            + self.per_context_token_s * shape.num_decode_context_tokens
        )
