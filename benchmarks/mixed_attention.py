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

3. The factor ``sim.cost.kernels.mixed_factor`` carries from the RTX 4090
   profile to FA2 tables without mixed rows, checked where it can be: on the
   RTX PRO 6000, whose own profile times the mixed kernel and is not used to
   build the factor. Over that profile's mixed rows, the error of pure prefill
   + factor x pure decode (its own pure rows) against the measured time, next
   to the sum's; then, on the RTX PRO 6000 public run's mixed steps, their
   attention priced by the profile, by aiconfigurator's tables as the sum, and
   by those tables with the factor.

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
from sim.api.build import cost_model_for  # noqa: E402
from sim.config import FloatArray  # noqa: E402
from sim.cost.base import CostModel, StepShape  # noqa: E402
from sim.cost.engine_cpu import EngineCpuCost  # noqa: E402
from sim.cost.kernels.artifact import (  # noqa: E402
    load_cached,
    load_kernel_artifact,
    resolve_kernel_artifact,
)
from sim.cost.kernels.cost import KernelCost  # noqa: E402
from sim.cost.kernels.mixed_factor import (  # noqa: E402
    balance_flops_per_byte,
    factor_from_profile,
    transferred_factor,
)
from sim.hardware.specs import hardware_preset  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402

PROFILES = ("rtx4090-vllm-0.19.0-llama-3.1-8b-tp1", "rtxpro6000-vllm-0.19.0-llama-3.1-8b-tp1")
RUN = ROOT / "scenarios" / "public" / "rtx4090_llama31_8b.yaml"
PRO_RUN = ROOT / "scenarios" / "public" / "rtxpro6000_llama31_8b.yaml"  # aiconfigurator
PRO_PROFILE_RUN = ROOT / "scenarios" / "public" / "rtxpro6000_llama31_8b_profile.yaml"


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


def extra_ratios() -> FloatArray:
    """The RTX PRO 6000's measured extra (factor - 1) over the RTX 4090's, at the 4090
    lattice's points with at least 8 decodes, no cached prefill and a 4090 extra over
    0.05 (a ratio of near-zeros says nothing)."""
    own = [
        factor_from_profile(load_cached(resolve_kernel_artifact(name, None)), name)
        for name in PROFILES
    ]
    chunks, _, decodes, kvs = own[0].grid.axes
    ratios = []
    for chunk in chunks:
        for n in decodes[decodes >= 8]:
            for kv in kvs:
                ref, pro = (f(chunk, 0.0, n, kv) - 1.0 for f in own)
                if ref > 0.05:
                    ratios.append(pro / ref)
    return np.asarray(ratios)


def transfer_errors(min_decodes: int) -> dict[str, FloatArray]:
    """Predicted / measured - 1 over the RTX PRO 6000 profile's mixed rows with at
    least ``min_decodes`` decodes: its pure rows summed, and with the carried factor."""
    table = load_kernel_artifact(resolve_kernel_artifact(PROFILES[1], None)).tables[
        "mixed_attention"
    ]
    key = ["prefill_chunk_tokens", "kv_prefill_tokens", "num_decode_seqs", "kv_decode_tokens"]
    times = {tuple(int(v) for v in k): t for *k, t in table[[*key, "latency_s"]].itertuples(False)}
    factor = transferred_factor(hardware_preset("rtx-pro-6000"))
    with_factor, as_sum = [], []
    for (pc, kp, nd, kv), t in times.items():
        pre, dec = times.get((pc, kp, 0, 0)), times.get((0, 0, nd, kv))
        if pc > 0 and nd >= min_decodes and pre is not None and dec is not None:
            with_factor.append((pre + factor(pc, kp, nd, kv) * dec) / t - 1.0)
            as_sum.append((pre + dec) / t - 1.0)
    return {"factor": np.asarray(with_factor), "sum": np.asarray(as_sum)}


def run_mixed_attention_s() -> dict[str, float]:
    """The RTX PRO 6000 public run's mixed steps (as its profile replay takes them):
    their attention, all layers, summed, as each pricing gives it (s)."""
    recorders: list[Recorder] = []

    def wrap(cost: CostModel) -> CostModel:
        recorders.append(Recorder(cost))
        return recorders[-1]

    api.run(PRO_PROFILE_RUN, wrap_cost=wrap)
    shapes = [s for s, _ in recorders[0].steps if s.num_prefill_tokens and s.num_decode_seqs]
    profile = recorders[0].inner
    tables = cost_model_for(load_scenario(PRO_RUN, []), engine_cpu=False)
    two = cost_model_for(load_scenario(PRO_RUN, ["cost.mixed_attention=false"]), engine_cpu=False)
    if isinstance(profile, EngineCpuCost):
        profile = profile.gpu
    out = {"num_steps": float(len(shapes))}
    for name, cost in (("profile", profile), ("tables, sum", two), ("tables, factor", tables)):
        assert isinstance(cost, KernelCost)
        out[name] = sum(cost.arch.num_layers * cost.attention_s(s) for s in shapes)
    return out


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
    ratios = extra_ratios()
    q25, q50, q75 = np.percentile(ratios, [25, 50, 75])
    balance = balance_flops_per_byte(hardware_preset("rtx-4090")) / balance_flops_per_byte(
        hardware_preset("rtx-pro-6000")
    )
    print(
        f"\nRTX PRO 6000's measured extra / RTX 4090's, {ratios.size} lattice points with >= 8 "
        f"decodes: median {q50:.2f} (interquartile {q25:.2f}-{q75:.2f}); FLOP/B balance "
        f"ratio {balance:.2f}"
    )
    print("\nThe RTX 4090's factor carried to the RTX PRO 6000 (FLOP/B balance), against")
    print("that GPU's own measured mixed rows (predicted / measured - 1):\n")
    print("| rows | pricing | median | median abs | p10 / p90 |")
    print("|---|---|---|---|---|")
    for min_decodes in (1, 8):
        for name, errors in transfer_errors(min_decodes).items():
            p10, p50, p90 = 100 * np.percentile(errors, [10, 50, 90])
            abs50 = 100 * np.median(np.abs(errors))
            what = "pure prefill + factor x pure decode" if name == "factor" else "the sum"
            print(
                f"| {errors.size} with >= {min_decodes} decodes | {what} | {p50:+.1f} % "
                f"| {abs50:.1f} % | {p10:+.1f} / {p90:+.1f} % |"
            )
    run = run_mixed_attention_s()
    print(
        f"\nRTX PRO 6000 run, its {run['num_steps']:.0f} mixed steps' attention: profile "
        f"{run['profile']:.2f} s; aiconfigurator's tables as the sum {run['tables, sum']:.2f} s, "
        f"with the factor {run['tables, factor']:.2f} s"
    )


if __name__ == "__main__":
    main()
