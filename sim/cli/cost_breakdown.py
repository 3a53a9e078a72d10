"""``servesim cost-breakdown``: where one step's time goes, op by op, under a scenario's cost model.

The step is a short spec (``--step``), terms joined by ``+``: ``512p`` one
prefill chunk of 512 new tokens, ``2x256p`` two of 256, ``512p@4096`` a chunk
after 4096 cached tokens; ``60d`` 60 decodes of ``DEFAULT_DECODE_CONTEXT_TOKENS``
context each, ``60d@2048`` of 2048.

The kernel cost model lists every op it prices with its share of the step and
its source (``KernelCost.op_source``), and the rest of the step (the engine's CPU
work it does not hide) as one more row; other cost models print the step's
total (the roofline also its compute and memory times). Under speculative
decoding the ops are the verification's, then the proposer's and the engine's
extra work (``sim.cost.speculative``); an n-gram proposer that drafts with
probability q < 1 gives every figure as its expectation over the binomial
number of decodes that draft (``expected_breakdown``). A step the scenario's
engine never runs is refused in one line (``step_problem``), not priced, as is a
``--set`` of a key the price never reads (``UNPRICED_KEYS``: the workload, ...).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from typing import TYPE_CHECKING, Any

from sim.api.build import cost_model_for, kv_blocks_for, model_for, step_limits
from sim.cli import HELP, Subparsers, add_scenario_arguments
from sim.cost.base import StepShape
from sim.cost.engine_cpu import EngineCpuCost
from sim.cost.kernels.cost import KernelCost
from sim.cost.label import cost_model_tag
from sim.cost.roofline import RooflineCost
from sim.cost.speculative import SpeculativeCost
from sim.engine.scheduler import ContinuousSettings
from sim.engine.speculative import speculative_cost
from sim.errors import ConfigError
from sim.scenario import load_scenario, set_keys

if TYPE_CHECKING:
    from sim.cost.base import CostModel
    from sim.scenario import Scenario

# A decode term without "@KV": each sequence has this many tokens of context.
DEFAULT_DECODE_CONTEXT_TOKENS = 1024
# Scenario keys one step's price never reads (step_problem and the cost model read
# model, hardware, cost, parallelism, quantization, scheduler, engine, speculative):
# a --set under one would change nothing printed.
UNPRICED_KEYS = {
    "workload": "the run's traffic",
    "slo": "the run's targets",
    "frontend": "the frontend's per-request work, outside the engine's step",
    "cluster": "the replicas around the engine",
    "seed": "the run's random draws",
}
_GRAMMAR = "terms like 512p, 2x256p, 512p@4096, 60d or 60d@2048 joined by '+'"
_TERM = re.compile(r"(?:(?P<count>\d+)x)?(?P<tokens>\d+)(?P<kind>[pd])(?:@(?P<at>\d+))?")


def parse_step(spec: str) -> StepShape:
    """The ``StepShape`` a ``--step`` spec describes (grammar: the module docstring)."""
    return StepShape.build(*_sequences(spec))


def _sequences(spec: str) -> tuple[list[tuple[int, int]], list[int]]:
    """A ``--step`` spec's sequences: ``(new, cached)`` tokens of each prefill chunk
    and the context of each decode (``StepShape.build``'s arguments)."""
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
    return chunks, contexts


def step_problem(spec: str, scenario: Scenario) -> str | None:
    """Why the scenario's engine never runs the step ``spec`` (one line), or None: more
    sequences, tokens, length or KV than it allows (a kernel table would extrapolate)."""
    chunks, contexts = _sequences(spec)
    policy, engine = scenario.scheduler, scenario.engine
    max_seqs, step_token_bound = step_limits(scenario)
    seqs_field = "max_batch_size" if hasattr(policy, "max_batch_size") else "max_num_seqs"
    if len(chunks) + len(contexts) > max_seqs:
        return (
            f"--step {spec!r}: {len(chunks) + len(contexts)} sequences in one step; "
            f"scheduler.{seqs_field} is {max_seqs}"
        )
    num_tokens = sum(new for new, _ in chunks) + len(contexts)
    if num_tokens > step_token_bound:
        # Continuous batching's budget; other policies' bound (step_token_bound) is
        # their whole prompts' (a prompt up to engine.max_model_len_tokens).
        limit = (
            "scheduler.max_num_batched_tokens is"
            if isinstance(policy, ContinuousSettings)
            else f"a {policy.kind} step computes at most"
        )
        return f"--step {spec!r}: {num_tokens} tokens in one step; {limit} {step_token_bound}"
    lengths = [new + cached for new, cached in chunks] + contexts
    if max(lengths) > engine.max_model_len_tokens:
        return (
            f"--step {spec!r}: a sequence of {max(lengths)} tokens; "
            f"engine.max_model_len_tokens is {engine.max_model_len_tokens}"
        )
    block = engine.block_size_tokens
    num_blocks = sum(-(-length // block) for length in lengths)
    num_kv_blocks = kv_blocks_for(scenario)
    if num_blocks > num_kv_blocks:
        return (
            f"--step {spec!r}: its KV takes {num_blocks} blocks of {block} tokens; "
            f"the cache holds {num_kv_blocks} (engine.num_kv_blocks)"
        )
    return None


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


# Numbers of drafting decodes less likely than this are left out of an expectation
# (with n decodes at most n x 1e-12 of the probability, far below a figure's digits).
_NEGLIGIBLE_PROBABILITY = 1e-12


def expected_breakdown(cost: CostModel, spec: str, match_probability: float) -> dict[str, Any]:
    """``breakdown`` of the step ``spec`` in expectation when each of its ``n`` decodes
    drafts with probability ``match_probability`` and otherwise verifies its one token
    (a one-token chunk): the mean over ``m ~ binomial(n, q)`` drafting decodes, the
    ``n - m`` misses spread evenly over the decodes sorted by context. Text fields are
    the most likely ``m``'s."""
    chunks, contexts = _sequences(spec)
    n = len(contexts)
    if match_probability == 1.0 or n == 0 or not isinstance(cost, SpeculativeCost):
        return breakdown(cost, StepShape.build(chunks, contexts))
    ordered = sorted(contexts)
    weighted = []
    for m in range(n + 1):
        weight = _binomial_pmf(n, m, match_probability)
        if weight < _NEGLIGIBLE_PROBABILITY:
            continue
        misses = {int((j + 0.5) * n / (n - m)) for j in range(n - m)}
        shape = StepShape.build(
            chunks + [(1, ordered[i] - 1) for i in sorted(misses)],
            [context for i, context in enumerate(ordered) if i not in misses],
        )
        weighted.append((weight, breakdown(cost, shape)))
    return _mean(weighted)


def _binomial_pmf(n: int, m: int, q: float) -> float:
    """P(m successes in n draws of probability q), in log space (n may be 1,000+)."""
    if q == 0.0:
        return 1.0 if m == 0 else 0.0
    log_ways = math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1)
    return math.exp(log_ways + m * math.log(q) + (n - m) * math.log1p(-q))


def _mean(weighted: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """The weighted mean of ``breakdown`` results, key by key (a number absent from
    one counts as 0; text is the heaviest result's that has it)."""
    total = sum(weight for weight, _ in weighted)
    heaviest_first = sorted(weighted, key=lambda pair: -pair[0])
    out: dict[str, Any] = {}
    for _, result in weighted:
        for key in result:
            if key in out:
                continue
            values = [(weight, r[key]) for weight, r in heaviest_first if key in r]
            first = values[0][1]
            if isinstance(first, dict):
                out[key] = _mean(values)
            elif isinstance(first, float | int) and not isinstance(first, bool):
                out[key] = sum(weight * value for weight, value in values) / total
            else:
                out[key] = first
    return out


def breakdown(cost: CostModel, shape: StepShape) -> dict[str, Any]:
    """The step's total and, where the cost model has one, its per-op split (ms); under
    speculative decoding the verification's split and the other parts of the step."""
    if isinstance(cost, SpeculativeCost):
        parts = cost.parts_s(shape)
        verify = breakdown(cost.target, cost.verify_shape(shape))  # the verification's ops
        # The LM head at each drafting sequence's k more positions (SpeculativeCost.verify_s).
        lm_head_ms = parts.verify_s * 1e3 - verify["step_ms"]
        verify["cost_model"], verify["cost_source"] = cost.label, cost_model_tag(cost.label)
        verify["step_ms"] = parts.total_s * 1e3
        verify["speculative_ms"] = {
            "LM head at the drafted positions": lm_head_ms,
            f"proposer GPU ({cost.proposer.label})": parts.propose_gpu_s * 1e3,
            "proposer CPU": parts.propose_cpu_s * 1e3,
            "rejection sampler": parts.rejection_s * 1e3,
            "draft bookkeeping (CPU)": parts.bookkeeping_s * 1e3,
        }
        return verify
    step_ms = cost.step_s(shape) * 1e3
    # The source in the words every face uses (measured or a guess), in the JSON too.
    source = cost_model_tag(cost.label)
    out: dict[str, Any] = {"cost_model": cost.label, "cost_source": source, "step_ms": step_ms}
    # The GPU's ops come from the GPU model inside the engine's CPU work (sim.cost.engine_cpu).
    gpu = cost.gpu if isinstance(cost, EngineCpuCost) else cost
    if isinstance(gpu, KernelCost):
        ops_ms = {name: seconds * 1e3 for name, seconds in gpu.breakdown_s(shape).items()}
        out["ops_ms"] = ops_ms
        # Where each op's time comes from: measured rows, derived ones, bytes / bandwidth.
        out["op_sources"] = {name: gpu.op_source(name) for name in ops_ms}
        # The step's communication: its collectives together (0 on one GPU).
        out["communication_ms"] = sum(ops_ms.get(name, 0.0) for name in gpu.COLLECTIVE_OPS)
        # What the step takes beyond the kernels: the engine's CPU work it does not hide.
        out["other_ms"] = step_ms - sum(ops_ms.values())
        out["note"] = None
        factor = gpu.mixed_decode_factor(shape)
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
        # What the step takes beyond the GPU's roofline: the engine's CPU work (0: none).
        out["other_ms"] = step_ms - gpu.step_s(shape) * 1e3
        out["note"] = (
            "the roofline has no per-op breakdown: a step is the larger of its compute and "
            "memory times (a guess, not measured kernels) with the engine's CPU work"
        )
    else:
        if gpu is not cost:  # the GPU's step and the engine's CPU work apart
            out["gpu_ms"] = gpu.step_s(shape) * 1e3
            out["other_ms"] = step_ms - out["gpu_ms"]
        out["note"] = f"cost model {cost.label} has no per-op breakdown"
    return out


def format_breakdown(result: dict[str, Any]) -> str:
    """``breakdown``'s result as a table: op, ms, % of the step."""
    step_ms = result["step_ms"]
    lines = [
        f"step {result['step']}: {result['step_words']}",
        f"cost model: {result['cost_model']}",
        f"cost source: {result['cost_source']}",
    ]

    sources = result.get("op_sources", {})
    width = 28 + (11 if sources else 0)  # the source column, where ops have one

    def row(name: str, ms: float, source: str = "") -> str:
        share = 100.0 * ms / step_ms if step_ms > 0 else 0.0
        label = f"{name:<28} {source}" if sources else name
        return f"{label:<{width}} {ms:>10.3f} {share:>8.1f} %"

    if "ops_ms" in result:
        lines.append(f"{'op':<28} {'source':<10} {'ms':>10} {'% of step':>10}")
        lines += [row(name, ms, sources[name]) for name, ms in result["ops_ms"].items()]
    if "roofline_ms" in result:
        lines += [row(f"roofline {k}", ms) for k, ms in result["roofline_ms"].items()]
    if "gpu_ms" in result:
        lines.append(row("GPU step", result["gpu_ms"]))
    if "other_ms" in result:
        lines.append(row("rest of step (engine CPU)", result["other_ms"]))
    for name, ms in result.get("speculative_ms", {}).items():
        lines.append(row(name, ms))
    lines.append(row("step", step_ms))
    if "communication_ms" in result:  # the collectives' rows above, together
        ms = result["communication_ms"]
        share = 100.0 * ms / step_ms if step_ms > 0 else 0.0
        lines.append(f"communication: {ms:.3f} ms in collectives ({share:.1f} % of the step)")
    if result.get("match_probability", 1.0) < 1.0:
        lines.append(
            f"expected figures: each decode drafts with probability "
            f"{result['match_probability']:g} (speculative.match_probability), "
            "else verifies its one token"
        )
    if result["note"]:
        lines.append(f"note: {result['note']}")
    return "\n".join(lines)


def _cmd_cost_breakdown(args: argparse.Namespace) -> int:
    shape = parse_step(args.step)  # before the scenario: a bad spec is the cheaper error
    for key in set_keys(args.set):
        section = key.partition(".")[0]
        if section in UNPRICED_KEYS:
            raise ConfigError(
                f"--set {key}: {section} is {UNPRICED_KEYS[section]}, which one step's price "
                "never reads"
            )
    scenario = load_scenario(args.scenario, args.set or ())
    problem = step_problem(args.step, scenario)
    if problem is not None:  # refused: no price for a step the engine never runs
        raise ConfigError(problem)
    cost = cost_model_for(scenario)
    if scenario.speculative is not None:  # every decode verifies k + 1 tokens, and more
        cost = speculative_cost(scenario.speculative, cost, model_for(scenario), scenario.hardware)
    # An n-gram proposer's misses: the figures are expectations over them.
    match_probability = (
        1.0 if scenario.speculative is None else scenario.speculative.match_probability
    )
    result = {
        "scenario": scenario.name,
        "step": args.step,
        "step_words": describe_step(shape),
        **expected_breakdown(cost, args.step, match_probability),
    }
    if match_probability < 1.0 and shape.num_decode_seqs:  # an expectation was taken
        result["match_probability"] = match_probability
    print(json.dumps(result, indent=2) if args.json else format_breakdown(result))
    return 0


def add_parsers(subparsers: Subparsers) -> None:
    p = subparsers.add_parser("cost-breakdown", help=HELP["cost-breakdown"])
    add_scenario_arguments(p)
    p.add_argument(
        "--step",
        required=True,
        help=f"the step: {_GRAMMAR} (NxTp: N chunks of T new tokens, @C after C cached; "
        f"Nd@KV: N decodes of KV context tokens each, default {DEFAULT_DECODE_CONTEXT_TOKENS}); "
        "e.g. 512p+60d",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_cmd_cost_breakdown)
