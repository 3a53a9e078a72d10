"""A speculative verification's attention is never cheaper than the decode it replaces.

A sequence of context ``p + 1`` decodes one token reading its ``p + 1`` tokens of
KV; verifying ``c = k + 1`` tokens after the same ``p`` reads ``p + c`` tokens and
computes ``c`` queries, so its attention is at least the decode's, for any
context a decode has after its prompt (``p >= c``; issue 41 item 4;
docs/speculative.md: 32 sequences x 4 tokens were priced by the prefill table's
quadratic scaling below their plain decode).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cost.base import StepShape
from sim.cost.kernels.aiconfigurator import from_aiconfigurator
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.hardware.specs import load_architecture

DATA = Path(__file__).parent / "data" / "kernels"
LLAMA = load_architecture("llama-3.1-8b")
COSTS = {
    "aic": KernelCost(
        LLAMA,
        from_aiconfigurator("rtx_pro_6000_server", data_dir=DATA / "aic" / "systems" / "data"),
    ),
    "profile": KernelCost(LLAMA, profile_artifact(DATA / "profile" / "bf16" / "tp1")),
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(COSTS)),
    num_seqs=st.integers(1, 256),
    cached_tokens=st.integers(9, 16_000),
    num_verified_tokens=st.integers(2, 9),
)
def test_verification_attention_at_least_the_decode(
    kind: str, num_seqs: int, cached_tokens: int, num_verified_tokens: int
) -> None:
    cost = COSTS[kind]
    verify = StepShape.build([(num_verified_tokens, cached_tokens)] * num_seqs)
    context = cached_tokens + 1  # the decode's context counts its own token
    decode = StepShape.build(decode_context_tokens=[context] * num_seqs)
    assert cost.attention_s(verify) >= cost.attention_s(decode)
