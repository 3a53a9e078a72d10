"""What pricing a mixed step's attention as two pure kernels misses, on profile data.

    python benchmarks/mixed_attention.py

vLLM runs one varlen attention kernel over a chunked-prefill batch; a source
with only pure kernels (aiconfigurator: context and generation tables) can
only add a pure prefill and a pure decode kernel. LLMServingSim's profiles
time the mixed batch itself, so they measure the gap:

1. Over every mixed row of each shipped profile, the ratio of the measured
   time to the sum of the pure rows at the same prefill (chunk, cached) and
   decode (count, KV) coordinates: median, 10th / 90th percentile and range.
2. On the RTX 4090 public run (``scenarios/public/rtx4090_llama31_8b.yaml``,
   priced by its profile), the share of the engine's busy time spent in
   mixed steps, and how much shorter those steps come out when their
   attention is priced as the sum (every step the run executes one at a
   time; skip-ahead runs are decode-only).

Figures, not test goldens; ``docs/kernels.md`` quotes them.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim import api  # noqa: E402
from sim.cost.base import CostModel, FloatArray, StepShape  # noqa: E402
from sim.cost.engine_cpu import EngineCpuCost  # noqa: E402
from sim.cost.kernels.artifact import load_kernel_artifact, resolve_kernel_artifact  # noqa: E402
from sim.cost.kernels.cost import KernelCost  # noqa: E402

PROFILES = ("rtx4090-vllm-0.19.0-llama-3.1-8b-tp1", "rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1")
RUN = ROOT / "scenarios" / "public" / "rtx4090_llama31_8b.yaml"


def row_ratios(name: str) -> FloatArray:
    """Measured mixed time / (pure prefill + pure decode) over a profile's mixed rows."""
    table = load_kernel_artifact(resolve_kernel_artifact(name, None)).tables["mixed_attention"]
    key = ["prefill_chunk_tokens", "kv_prefill_tokens", "num_decode_seqs", "kv_decode_tokens"]
    times = {tuple(int(v) for v in k): t for *k, t in table[[*key, "latency_s"]].itertuples(False)}
    ratios = [
        t / (times[(pc, kp, 0, 0)] + times[(0, 0, nd, kv)])
        for (pc, kp, nd, kv), t in times.items()
        if pc > 0 and nd > 0 and (pc, kp, 0, 0) in times and (0, 0, nd, kv) in times
    ]
    return np.asarray(ratios)


class Recorder:
    """A cost model that prices as ``inner`` and keeps each step's shape and price."""

    def __init__(self, inner: CostModel) -> None:
        self.inner = inner
        self.steps: list[tuple[StepShape, float]] = []

    @property
    def label(self) -> str:
        return self.inner.label

    def step_s(self, shape: StepShape) -> float:
        price = self.inner.step_s(shape)
        self.steps.append((shape, price))
        return price

    def decode_steps_s(
        self,
        num_seqs: int,
        context_tokens: int,
        num_steps: int,
        *,
        max_context_tokens: int = 0,
        min_context_tokens: int = 0,
    ) -> FloatArray:
        return self.inner.decode_steps_s(
            num_seqs,
            context_tokens,
            num_steps,
            max_context_tokens=max_context_tokens,
            min_context_tokens=min_context_tokens,
        )


def busy_time_shares() -> dict[str, float]:
    """Mixed steps' share of busy time on the 4090 run, and the sum's shortfall."""
    recorders: list[Recorder] = []

    def wrap(cost: CostModel) -> CostModel:
        recorders.append(Recorder(cost))
        return recorders[-1]

    result = api.run(RUN, wrap_cost=wrap)
    busy_s = float((result.steps["end_s"] - result.steps["start_s"]).sum())
    (recorder,) = recorders
    cost = recorder.inner
    if isinstance(cost, EngineCpuCost):  # the engine's CPU work around the GPU's price
        cost = cost.gpu
    assert isinstance(cost, KernelCost)
    mixed_s = short_s = 0.0
    ratios = []
    for shape, price in recorder.steps:
        if shape.num_prefill_tokens and shape.num_decode_seqs:
            two_kernels = cost.prefill_attention_s(shape) + cost.decode_attention_s(
                shape.num_decode_seqs, shape.num_decode_context_tokens
            )
            mixed_s += price
            short_s += cost.arch.num_layers * (cost.attention_s(shape) - two_kernels)
            ratios.append(cost.attention_s(shape) / two_kernels)
    return {
        "busy_s": busy_s,
        "mixed_share_pct": 100.0 * mixed_s / busy_s,
        "mixed_steps_short_pct": 100.0 * short_s / mixed_s,
        "busy_short_pct": 100.0 * short_s / busy_s,
        "attention_ratio_p50": float(np.median(ratios)),
        "num_mixed_steps": float(len(ratios)),
    }


def main() -> None:
    warnings.simplefilter("ignore")  # proportional extrapolation warnings
    print("| profile | mixed rows | measured / (pure prefill + pure decode): median "
          "| p10 / p90 | min / max |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name in PROFILES:
        r = row_ratios(name)
        p10, p50, p90 = np.percentile(r, [10, 50, 90])
        spread = f"{p10:.2f} / {p90:.2f} | {r.min():.2f} / {r.max():.2f}"
        print(f"| {name} | {r.size} | {p50:.2f} | {spread} |")
    shares = busy_time_shares()
    print(
        f"\nRTX 4090 run: busy {shares['busy_s']:.1f} s; {shares['num_mixed_steps']:.0f} mixed "
        f"steps, {shares['mixed_share_pct']:.1f} % of it; their attention is "
        f"{shares['attention_ratio_p50']:.2f}x the two kernels' sum (median); priced as "
        f"two kernels they come out {shares['mixed_steps_short_pct']:.1f} % short "
        f"({shares['busy_short_pct']:.1f} % of busy time)"
    )


if __name__ == "__main__":
    main()
