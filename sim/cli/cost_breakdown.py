"""``servesim cost-breakdown``: where one step's time goes, op by op, under a scenario's cost model.

The step is written as a short spec (``--step``), terms joined by ``+``:

- ``512p``: one prefill chunk of 512 new tokens; ``2x256p``: two chunks of
  256; ``512p@4096``: a chunk of 512 new tokens after 4096 cached ones (a
  prefix-cache hit or the prompt's earlier chunks);
- ``60d``: 60 decode sequences, each with ``DEFAULT_DECODE_CONTEXT_TOKENS``
  tokens of context (KV); ``60d@2048``: each with 2048.

So ``512p+60d`` is a mixed step of one 512-token chunk and 60 decodes. The
kernel cost model lists every op it prices (all layers together) with its
share of the step; the rest of the step (the engine's CPU work it does not hide) is one more
row. Cost models without a per-op breakdown print the step's total (the
roofline also its compute and memory times).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.cost.base import CostModel, StepShape

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

# A decode term without "@KV": each sequence has this many tokens of context.
DEFAULT_DECODE_CONTEXT_TOKENS = 1024
_GRAMMAR = "terms like 512p, 2x256p, 512p@4096, 60d or 60d@2048 joined by '+'"
_TERM = re.compile(r"(?:(?P<count>\d+)x)?(?P<tokens>\d+)(?P<kind>[pd])(?:@(?P<at>\d+))?")


def parse_step(spec: str) -> StepShape:
    """The ``StepShape`` a ``--step`` spec describes (grammar: the module docstring)."""
    from sim.cost.base import StepShape

    chunks: list[tuple[int, int]] = []
    contexts: list[int] = []
    for term in spec.replace(" ", "").split("+"):
        match = _TERM.fullmatch(term)
        if match is None:
            raise ConfigError(f"--step {spec!r}: bad term {term!r}; expected {_GRAMMAR}")
        count = int(match["count"] or 1)
        tokens = int(match["tokens"])
        if count == 0 or tokens == 0:
            raise ConfigError(f"--step {spec!r}: term {term!r} has no tokens")
        if match["kind"] == "p":
            chunks += [(tokens, int(match["at"] or 0))] * count
            continue
        if match["count"] is not None:
            raise ConfigError(f"--step {spec!r}: write {term!r} as {count * tokens}d")
        context = int(match["at"] or DEFAULT_DECODE_CONTEXT_TOKENS)
        if context == 0:
            raise ConfigError(f"--step {spec!r}: decodes in {term!r} need a context of 1+ tokens")
        contexts += [context] * tokens
    return StepShape.build(chunks, contexts)


def describe_step(shape: StepShape) -> str:
    """The step in words: its prefill chunks and decodes, as sums."""
    parts = []
    if shape.num_prefill_seqs:
        parts.append(
            f"{shape.num_prefill_seqs} prefill chunk(s), {shape.num_prefill_tokens} new tokens, "
            f"{shape.prefill_kv_read_tokens - shape.num_prefill_tokens} cached"
        )
    if shape.num_decode_seqs:
        mean = shape.num_decode_context_tokens / shape.num_decode_seqs
        parts.append(f"{shape.num_decode_seqs} decodes at {mean:g} tokens of context (mean)")
    return "; ".join(parts)


def breakdown(cost: CostModel, shape: StepShape) -> dict[str, Any]:
    """The step's total and, where the cost model has one, its per-op split (ms)."""
    from sim.cost.engine_cpu import EngineCpuCost
    from sim.cost.kernels.cost import KernelCost
    from sim.cost.roofline import RooflineCost

    step_ms = cost.step_s(shape) * 1e3
    out: dict[str, Any] = {"cost_model": cost.label, "step_ms": step_ms}
    # The GPU's ops come from the GPU model inside the engine's CPU work (sim.cost.engine_cpu).
    gpu = cost.gpu if isinstance(cost, EngineCpuCost) else cost
    terms = getattr(gpu, "breakdown_s", None)
    if terms is not None:
        ops_ms = {name: seconds * 1e3 for name, seconds in terms(shape).items()}
        out["ops_ms"] = ops_ms
        # What the step takes beyond the kernels: the engine's CPU work it does not hide.
        out["other_ms"] = step_ms - sum(ops_ms.values())
        out["note"] = None
        factor = gpu.mixed_decode_factor(shape) if isinstance(gpu, KernelCost) else 1.0
        if factor != 1.0:  # FA2 tables: the decodes' slowdown beside a chunk
            out["note"] = (
                f"decode_attention is {factor:.2f}x the pure decode kernel: decodes beside "
                "a prefill chunk in FA2's varlen kernel, a factor measured on the RTX 4090 "
                "and carried to this GPU (an estimate; docs/kernels.md)"
            )
    elif type(gpu) is RooflineCost:
        out["roofline_ms"] = {
            "compute": gpu.compute_s(shape) * 1e3,
            "memory": gpu.memory_s(shape) * 1e3,
        }
        out["note"] = (
            "the roofline has no per-op breakdown: a step is the larger of its compute and "
            "memory times (a guess, not measured kernels) with the engine's CPU work"
        )
    else:
        out["note"] = f"cost model {cost.label} has no per-op breakdown"
    return out


def format_breakdown(result: dict[str, Any]) -> str:
    """``breakdown``'s result as a table: op, ms, % of the step."""
    step_ms = result["step_ms"]
    lines = [
        f"step {result['step']}: {result['step_words']}",
        f"cost model: {result['cost_model']}",
    ]

    def row(name: str, ms: float) -> str:
        share = 100.0 * ms / step_ms if step_ms > 0 else 0.0
        return f"{name:<28} {ms:>10.3f} {share:>8.1f} %"

    if "ops_ms" in result:
        lines.append(f"{'op':<28} {'ms':>10} {'% of step':>10}")
        lines += [row(name, ms) for name, ms in result["ops_ms"].items()]
        lines.append(row("rest of step (engine CPU)", result["other_ms"]))
    if "roofline_ms" in result:
        lines += [row(f"roofline {k}", ms) for k, ms in result["roofline_ms"].items()]
    lines.append(row("step", step_ms))
    if result["note"]:
        lines.append(f"note: {result['note']}")
    return "\n".join(lines)


def _cmd_cost_breakdown(args: argparse.Namespace) -> int:
    from sim.api.build import cost_model_for
    from sim.scenario import load_scenario

    shape = parse_step(args.step)  # before the scenario: a bad spec is the cheaper error
    scenario = load_scenario(args.scenario, args.set or ())
    cost = cost_model_for(scenario, Path(args.scenario).parent)
    result = {
        "scenario": scenario.name,
        "step": args.step,
        "step_words": describe_step(shape),
        **breakdown(cost, shape),
    }
    print(json.dumps(result, indent=2) if args.json else format_breakdown(result))
    return 0


def add_parsers(subparsers: Subparsers) -> None:
    """Register ``cost-breakdown``."""
    p = subparsers.add_parser(
        "cost-breakdown", help="where one step's time goes, op by op, under a scenario's cost model"
    )
    p.add_argument("scenario", help="scenario YAML file, e.g. scenarios/chat.yaml")
    p.add_argument(
        "--step",
        required=True,
        help=f"the step: {_GRAMMAR} (NxTp: N chunks of T new tokens, @C after C cached; "
        f"Nd@KV: N decodes of KV context tokens each, default {DEFAULT_DECODE_CONTEXT_TOKENS}); "
        "e.g. 512p+60d",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set engine.max_num_seqs=64 (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_cmd_cost_breakdown)
