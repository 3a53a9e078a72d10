"""Shared by the skew tests: the test profile with a skew fit in every bucket.

``tests/data/kernels/profile`` has no ``skew_fit.csv``; these helpers add an
``attention_skew`` table whose every bucket (pure decode, and one prefill chunk
of 16 or 128 tokens beside decodes) has a non-zero alpha, different per bucket,
so a step's price depends on its longest and shortest decode context wherever
it has two decodes of different lengths.
"""

from __future__ import annotations

from itertools import product
from pathlib import Path

import pandas as pd

from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.cost import KernelCost
from sim.cost.kernels.llmservingsim import profile_artifact
from sim.hardware.specs import load_architecture

PROFILE = profile_artifact(Path(__file__).parent / "data" / "kernels" / "profile" / "bf16" / "tp1")
LLAMA = load_architecture("llama-3.1-8b")
# LLMServingSim's bucket edges (upper edges of its labels).
N_EDGES = (2, 4, 8, 16, 32, 64, 128, 256)
RATE_EDGES = (0.05, 0.15, 0.4, 0.7, 1.0)
KV_EDGES = (1024, 4096, 16384)
KP_EDGES = (0, 512, 1024, 2048, 4096, 8192)


def skew_table() -> pd.DataFrame:
    """Every bucket of chunks 0, 16 and 128, alpha 0.05 .. 0.95 varying by bucket."""
    rows = [
        (pc, n, rate, kv, kp, 4, round(0.05 + 0.9 * ((i * 37) % 101) / 100, 4))
        for i, (pc, n, rate, kv, kp) in enumerate(
            product((0, 16, 128), N_EDGES, RATE_EDGES, KV_EDGES, KP_EDGES)
        )
        if pc or not kp  # a pure decode has no cached prefill
    ]
    columns = ["prefill_chunk_tokens", "max_num_decode_seqs", "max_skew_rate",
               "max_kv_decode_tokens", "max_kv_prefill_tokens", "num_samples", "alpha"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def skewed_profile() -> KernelArtifact:
    """The test profile with ``skew_table`` as its skew fit."""
    return KernelArtifact(PROFILE.provenance, {**PROFILE.tables, "attention_skew": skew_table()})


def skewed_kernel_cost(skew: bool = True) -> KernelCost:
    """Llama-3.1-8B priced by the skewed test profile (``skew``: apply the fit)."""
    return KernelCost(
        LLAMA, skewed_profile(), disabled_terms=frozenset() if skew else frozenset({"skew"})
    )
