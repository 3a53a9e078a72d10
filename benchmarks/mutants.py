"""A small mutation check: plant known single-line bugs, one at a time, and see the tests fail.

    python benchmarks/mutants.py --list               # the mutants and their tests
    python benchmarks/mutants.py                      # run them all (CPU-heavy: minutes)
    python benchmarks/mutants.py --only router-tie --only grid-fill-axis-values

Each mutant replaces one line of one module (found by its exact text, which must
occur once, or at its ``nth`` occurrence) with a plausible bug: a wrong axis, a
unit left in milliseconds, ``<`` for ``<=``, a bound off by one. The bugs come
from issue 30 ("Tests that miss real bugs": the survivors of 32 planted bugs
and the ones caught by a single test) and from the code they sit in.

Mutants are applied in a temporary copy of the tree (never in the tree itself),
and only the test files named for each run (``pytest -x``, with a timeout), so
a whole check takes minutes, not the suite's time per mutant. First the named
test files run once on the unmutated copy: a failure there makes every verdict
meaningless, so the check stops (exit 2). A mutant whose line is no longer in
its file (or whose file is gone) is ``stale``: the code moved on and the mutant
tests nothing. Each stale one is named on stderr before the run and after it,
and fails the check (exit 1), as ``--list`` does (update the mutant).

Hypothesis runs derandomized (the same examples every time) and without
shrinking a failing example (the copy's ``tests/conftest.py`` gets a profile for
that): a kill is a kill however small its example.

Verdicts: ``killed`` (a test failed), ``survived`` (all passed: a gap in the
tests, or a mutant that changes nothing observable), ``timeout``, ``stale``.
The score is killed / (killed + survived + timeout). Exit status 1 when any
mutant survived, timed out or was stale, 0 when every one applied and was killed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Appended to the copy's tests/conftest.py: a failing example is not shrunk (the
# verdict is the same; shrinking one can take minutes), examples are derandomized.
NO_SHRINK = """
from hypothesis import Phase as _Phase
from hypothesis import settings as _settings

_settings.register_profile(
    "mutants", derandomize=True, phases=[_Phase.explicit, _Phase.reuse, _Phase.generate]
)
_settings.load_profile("mutants")
"""
# Not copied outside a git checkout (in one, git's own ignore rules decide).
IGNORED = (".git", "__pycache__", ".venv", ".mypy_cache", ".ruff_cache", ".hypothesis",
           ".pytest_cache", "runs", "*.egg-info")  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``original`` (a line's text, stripped) becomes ``mutated``."""

    name: str
    path: str  # relative to the tree's root
    original: str
    mutated: str
    tests: tuple[str, ...]  # test files (or node ids) that must catch it
    why: str
    nth: int | None = None  # which occurrence (0-based) when the line is not unique


# The test files the issue-39 mutants run (each group the files of its term).
MIXED_TESTS = (
    "tests/test_cost_kernels_mixed.py",
    "tests/test_cost_kernels_mixed_factor.py",
    "tests/test_mut_mixed_factor.py",
)
DRAM_TESTS = ("tests/test_cost_kernels_dram_floor.py", "tests/test_mut_dram_floor.py")
WAY_IN_TESTS = ("tests/test_feed.py", "tests/test_ttft_parts.py", "tests/test_mut_way_in.py")
METRICS_TESTS = (
    "tests/test_openai_conformance.py",
    "tests/test_serve_simulate.py",
    "tests/test_mut_metrics.py",
)
PLAN_TESTS = (
    "tests/test_mut_plan.py",
    "tests/test_plan.py::test_pruned_search_finds_the_exhaustive_answer",
    "tests/test_plan.py::test_lone_request_bound_is_below_the_simulated_latency_at_low_load",
    "tests/test_plan.py::test_a_search_stops_where_its_fleet_already_loses",
    "tests/test_plan.py::test_plan_cli_an_slo_no_configuration_meets",
)

MUTANTS = (
    Mutant(
        "grid-fill-axis-values",
        "sim/cost/kernels/grid.py",
        "values = fill_holes(values, axes[axis], axis)",
        "values = fill_holes(values, axes[fill_axis], axis)",
        ("tests/test_cost_kernels_grid_fill.py", "tests/test_cost_kernels_grid.py"),
        "from_points fills an empty line along another axis with the fill axis's coordinates",
    ),
    Mutant(
        "grid-fill-axis-order",
        "sim/cost/kernels/grid.py",
        "for axis in [fill_axis, *(a for a in range(len(axes)) if a != fill_axis)]:",
        "for axis in [fill_axis, *(a for a in reversed(range(len(axes))) if a != fill_axis)]:",
        ("tests/test_cost_kernels_grid_fill.py", "tests/test_cost_kernels_grid.py"),
        "from_points's second pass tries the other axes last first",
    ),
    Mutant(
        "grid-fill-same-axis",
        "sim/cost/kernels/grid.py",
        "values = fill_holes(values, axes[axis], axis)",
        "values = fill_holes(values, axes[fill_axis], fill_axis)",
        ("tests/test_cost_kernels_grid_fill.py", "tests/test_cost_kernels_grid.py"),
        "from_points never fills along another axis (every pass along fill_axis)",
    ),
    Mutant(
        "aic-allreduce-ms",
        "sim/cost/kernels/aiconfigurator.py",
        'tables["allreduce"] = _table(ar, {"num_gpus": "num_gpus", "message_bytes": '
        '"message_bytes"})',
        'tables["allreduce"] = _table(ar, {"num_gpus": "num_gpus", "message_bytes": '
        '"message_bytes"}).assign(latency_s=ar["latency"].to_numpy())',
        ("tests/test_cost_kernels_aic_units.py",),
        "aiconfigurator all-reduce latency left in milliseconds",
    ),
    Mutant(
        "aic-allreduce-elements",
        "sim/cost/kernels/aiconfigurator.py",
        'ar = ar.assign(message_bytes=ar["message_size"].astype(int) * ALLREDUCE_ELEMENT_BYTES)',
        'ar = ar.assign(message_bytes=ar["message_size"].astype(int))',
        ("tests/test_cost_kernels_aic_units.py",),
        "vLLM all-reduce message size taken as bytes (it counts bf16 elements)",
    ),
    Mutant(
        "aic-table-ms",
        "sim/cost/kernels/aiconfigurator.py",
        'return pd.DataFrame({**out, "latency_s": rows["latency"] * _MS}).reset_index(drop=True)',
        'return pd.DataFrame({**out, "latency_s": rows["latency"]}).reset_index(drop=True)',
        ("tests/test_cost_kernels_aic_units.py",),
        "GEMM, attention, all-reduce and MoE latencies left in milliseconds",
    ),
    Mutant(
        "aic-nccl-ms",
        "sim/cost/kernels/aiconfigurator.py",
        '"latency_s": c["latency"] * _MS,',
        '"latency_s": c["latency"],',
        ("tests/test_cost_kernels_aic_units.py",),
        "NCCL latency left in milliseconds",
    ),
    Mutant(
        "aic-nccl-elements",
        "sim/cost/kernels/aiconfigurator.py",
        '"message_bytes": c["message_size"].astype(int) * NCCL_ELEMENT_BYTES,',
        '"message_bytes": c["message_size"].astype(int),',
        ("tests/test_cost_kernels_aic_units.py",),
        "NCCL message size taken as bytes (it counts fp16 elements)",
    ),
    Mutant(
        "kernels-one-allreduce",
        "sim/cost/kernels/cost.py",
        "return 2.0 * self.allreduce_s(tokens * activation_bytes)",
        "return 1.0 * self.allreduce_s(tokens * activation_bytes)",
        ("tests/test_cost_kernels_aic_units.py",),
        "one all-reduce per layer instead of two (after attention and after the MLP)",
    ),
    Mutant(
        "router-tie",
        "sim/serving/router.py",
        "return second if loads[second].num_requests < loads[first].num_requests else first",
        "return second if loads[second].num_requests <= loads[first].num_requests else first",
        ("tests/test_router_ties.py", "tests/test_router.py"),
        "power-of-two ties go to the second draw (the docstring promises the first)",
    ),
    Mutant(
        "compiled-tight-pool",
        "sim/fast/compiled/loop.py",
        "if num_sched * (num_steps // block_size + 1) <= free:",
        "if num_sched * (num_steps // block_size) <= free:",
        ("tests/test_compiled_tight_pool.py",),
        "the compiled loop's cheap pool bound loses its + 1",
    ),
    Mutant(
        "scheduler-tight-pool",
        "sim/fast/decode_runs.py",
        "if len(scheduled) * (num_steps // block_size + 1) <= free or missing(num_steps) <= free:",
        "if len(scheduled) * (num_steps // block_size) <= free or missing(num_steps) <= free:",
        ("tests/test_compiled_tight_pool.py",),
        "the decode runs' cheap pool bound loses its + 1",
    ),
    Mutant(
        "decode-ends-tie",
        "sim/fast/run_ends.py",
        "if end >= stop_s:",
        "if end > stop_s:",
        ("tests/test_compiled_decode_ends_ties.py", "tests/test_run_ends.py"),
        "decode_ends (the compiled loop's, and the Python path's on the table) misses a"
        " step ending exactly at the arrival",
    ),
    Mutant(
        "decode-ends-first-tie",
        "sim/fast/run_ends.py",
        "left = num_decode_steps if first_end_s < stop_s else min(num_decode_steps, cut)",
        "left = num_decode_steps if first_end_s <= stop_s else min(num_decode_steps, cut)",
        ("tests/test_compiled_decode_ends_ties.py", "tests/test_run_ends.py"),
        "decode_ends (the compiled loop's, and the Python path's on the table) ignores a"
        " first step ending exactly at the arrival",
    ),
    Mutant(
        "capacity-bisect-a",
        "sim/planning/capacity.py",
        "while b - a > max(rel_width * b, step):",
        "while b - a > max(rel_width * a, step):",
        ("tests/test_capacity_bisection.py",),
        "bisection stops at rel_width of the cell's lower end instead of its upper",
    ),
    Mutant(
        "capacity-crossing",
        "sim/planning/capacity.py",
        "share = (1.0 - low.ratio) / (high.ratio - low.ratio)",
        "share = (high.ratio - 1.0) / (high.ratio - low.ratio)",
        ("tests/test_capacity_bisection.py",),
        "the crossing interpolated from the wrong end of the cell",
    ),
    Mutant(
        "may-run-budget",
        "sim/fast/decode_runs.py",
        "not policy.chunked_prefill",  # `if budget == 0 or (...)` then blocks at 0 only
        "False",
        ("tests/test_budget_block_no_run.py",),
        "a decode run follows a step whose admission the token budget blocked",
    ),
    Mutant(
        "may-run-budget-compiled",
        "sim/fast/compiled/loop.py",
        "if stable and blocked != _BUDGET and min_left >= 1 and not deferred:",
        "if stable and min_left >= 1 and not deferred:",
        ("tests/test_compiled_tight_pool.py",),
        "the compiled loop runs decode steps after a budget-blocked admission",
    ),
    Mutant(
        "try-grow-last-block",
        "sim/engine/kv_cache.py",
        "if short > self.num_free_blocks:",
        "if short >= self.num_free_blocks:",
        ("tests/test_kv_try_grow.py",),
        "try_grow refuses the last free blocks (off by one)",
    ),
    Mutant(
        "try-grow-floor",
        "sim/engine/kv_cache.py",
        "short = -(-num_tokens // self.block_size_tokens) - request.num_blocks",
        "short = num_tokens // self.block_size_tokens - request.num_blocks",
        ("tests/test_kv_try_grow.py",),
        "try_grow rounds the blocks needed down (a partial block is not counted)",
    ),
    Mutant(
        "itl-gap-filter-table",
        "sim/metrics/itl.py",
        "used = gaps > 0",
        "used = gaps >= 0",
        ("tests/test_step_table.py",),
        "steps delivered in one chunk count a zero ITL gap (the compact step table)",
    ),
    Mutant(
        "prefix-free-order",
        "sim/engine/kv_cache.py",
        "tail.reverse()",
        "tail.sort()",
        ("tests/test_prefix_cache_reference.py",),
        "a freed request's blocks are queued head first (vLLM frees the tail first)",
    ),
    Mutant(
        "prefix-group-keys",
        "sim/engine/kv_blocks.py",
        'chain.extend(("group", group, j) for j in range(len(chain), end))',
        'chain.extend(("group", group, j // 2) for j in range(len(chain), end))',
        ("tests/test_prefix_cache_reference.py",),
        "a prefix group's blocks share keys pairwise (a wrong chain)",
    ),
    Mutant(
        "prefix-shareable-past-prompt",
        "sim/engine/kv_blocks.py",
        "return min(request.num_shared_prefix_tokens, request.num_prompt_tokens) // size",
        "return request.num_shared_prefix_tokens // size",
        ("tests/test_prefix_cache_reference.py",),
        "a shared prefix declared longer than the prompt keys output blocks as shared "
        "(survives a reference that borrows the pool's keys)",
    ),
    Mutant(
        "prefix-own-key-shift",
        "sim/engine/kv_blocks.py",
        "return request.request_id << OWN_SHIFT",
        "return request.request_id << (OWN_SHIFT - 8)",
        ("tests/test_prefix_cache_reference.py",),
        "own keys built with too small a shift (they can collide across requests)",
    ),
    # Issue 39: the cost terms and faces added since issue 30's audit (mixed-attention
    # lattice, DRAM floor, memory-bound ops, engine CPU, way in, /metrics, plan pruning).
    Mutant(
        "mixed-kv-counts-current",
        "sim/cost/kernels/price.py",
        "kv = (context - n) / n",
        "kv = context / n",
        MIXED_TESTS,
        "the mixed lattice's decode KV counts the token being computed (the profile's excludes it)",
    ),
    Mutant(
        "mixed-extra-chunks",
        "sim/cost/kernels/price.py",
        "return one + (prefill_seqs - 1) * grid_point(tables, layout, grids[0], chunk, cached)",
        "return one + prefill_seqs * grid_point(tables, layout, grids[0], chunk, cached)",
        MIXED_TESTS,
        "a mixed step of b chunks adds b pure-prefill chunks beside the lattice's one (b - 1)",
    ),
    Mutant(
        "mixed-factor-balance",
        "sim/cost/kernels/mixed_factor.py",
        "factor = 1.0 + (measured - 1.0) * balance_scale",
        "factor = 1.0 + (measured - 1.0) / balance_scale",
        MIXED_TESTS,
        "the FA2 mixed-decode factor's extra carried by the inverse FLOP/B balance",
    ),
    Mutant(
        "mixed-factor-unfloored",
        "sim/cost/kernels/mixed_factor.py",
        "measured = np.maximum((mixed - prefill) / decode, 0.0)",
        "measured = (mixed - prefill) / decode",
        MIXED_TESTS,
        "the measured mixed-decode factor is not floored at 0 (noise makes decodes free)",
    ),
    Mutant(
        "mixed-factor-no-clamp",
        "sim/cost/kernels/price.py",
        "x2 if x2 < last2 else last2, x3 if x3 < last3 else last3,",
        "x2, x3 if x3 < last3 else last3,",
        MIXED_TESTS,
        "the mixed-decode factor extrapolated past the lattice's last decode count",
    ),
    Mutant(
        "dram-floor-off",
        "sim/cost/kernels/tables.py",
        "return Grid(decode.name, decode.axis_names, decode.axes, np.maximum(decode.values, "
        "floor_s))",
        "return Grid(decode.name, decode.axis_names, decode.axes, decode.values)",
        DRAM_TESTS,
        "decode attention faster than its KV streamed from DRAM (the floor dropped)",
    ),
    Mutant(
        "dram-floor-k-only",
        "sim/cost/kernels/cost.py",
        "kv_bytes = 2.0 * s.num_kv_heads * s.head_dim * DTYPE_BYTES.get(provenance.kv_dtype, 2.0)",
        "kv_bytes = 1.0 * s.num_kv_heads * s.head_dim * DTYPE_BYTES.get(provenance.kv_dtype, 2.0)",
        DRAM_TESTS,
        "the DRAM floor streams K only, not K and V",
    ),
    Mutant(
        "dram-floor-kv-dtype",
        "sim/cost/kernels/cost.py",
        "kv_bytes = 2.0 * s.num_kv_heads * s.head_dim * DTYPE_BYTES.get(provenance.kv_dtype, 2.0)",
        "kv_bytes = 2.0 * s.num_kv_heads * s.head_dim * 2.0",
        DRAM_TESTS,
        "the DRAM floor prices an fp8 KV cache at 2 bytes an element",
    ),
    Mutant(
        "memops-rotary-q-only",
        "sim/cost/kernels/memory_ops.py",
        "qk_width=(shapes.num_heads + shapes.num_kv_heads) * shapes.head_dim,",
        "qk_width=shapes.num_heads * shapes.head_dim,",
        ("tests/test_cost_kernels_memory_ops.py",),
        "rotary embedding moves q only (it rotates q and k)",
    ),
    Mutant(
        "memops-kv-write-no-read",
        "sim/cost/kernels/memory_ops.py",
        "kv_write = self.op_s(t * 2.0 * self.kv_width * (a + self.kv_dtype_bytes))",
        "kv_write = self.op_s(t * 2.0 * self.kv_width * self.kv_dtype_bytes)",
        ("tests/test_cost_kernels_memory_ops.py",),
        "the KV-cache write does not read k and v (only writes the cache)",
    ),
    Mutant(
        "memops-plain-as-gated",
        "sim/cost/kernels/memory_ops.py",
        "return (3.0 if gated else 2.0) * width * dtype_bytes",
        "return 3.0 * width * dtype_bytes",
        ("tests/test_cost_kernels_memory_ops.py",),
        "a plain (GELU, ReLU) MLP's activation priced as a gated one's",
    ),
    Mutant(
        "memops-no-efficiency",
        "sim/cost/kernels/memory_ops.py",
        "bytes_per_s=hardware.effective_bytes_per_s,",
        "bytes_per_s=hardware.memory_bandwidth_bytes_per_s,",
        ("tests/test_cost_kernels_memory_ops.py",),
        "memory-bound ops at the datasheet bandwidth (no efficiency)",
    ),
    Mutant(
        "memops-one-add-norm",
        "sim/cost/kernels/memory_ops.py",
        "add_norm = 2.0 * self.op_s(t * 4.0 * self.hidden_size * a)",
        "add_norm = self.op_s(t * 4.0 * self.hidden_size * a)",
        ("tests/test_cost_kernels_memory_ops.py",),
        "one fused add + RMSNorm per layer instead of two",
    ),
    Mutant(
        "memops-fp32-activations",
        "sim/cost/kernels/cost.py",
        'activation = 4.0 if a.provenance.dtype == "float32" else 2.0',
        "activation = 2.0",
        ("tests/test_cost_kernels_memory_ops.py", "tests/test_mut_memory_ops.py"),
        "fp32 tables' memory-bound ops moved as 16-bit activations",
    ),
    Mutant(
        "engine-cpu-prefill-seqs-free",
        "sim/cost/engine_cpu.py",
        "seqs = shape.num_prefill_seqs + shape.num_decode_seqs",
        "seqs = shape.num_decode_seqs",
        ("tests/test_engine_cpu.py",),
        "the engine's per-sequence CPU work skips the step's prefill sequences",
    ),
    Mutant(
        "engine-cpu-overlap-min",
        "sim/cost/engine_cpu.py",
        "return cost[CPU_NON_OVERLAPPED_S] + (gpu_s if gpu_s > cpu_s else cpu_s)",
        "return cost[CPU_NON_OVERLAPPED_S] + (gpu_s if gpu_s < cpu_s else cpu_s)",
        ("tests/test_engine_cpu.py",),
        "an overlapped step takes the shorter of GPU and CPU work, not the longer",
    ),
    Mutant(
        "engine-cpu-decode-no-tokens",
        "sim/cost/engine_cpu.py",
        "return with_cpu_s(self.costs, self._gpu_step_s(shape), seqs, tokens)",
        "return with_cpu_s(self.costs, self._gpu_step_s(shape), seqs, shape.num_prefill_tokens)",
        ("tests/test_engine_cpu.py",),
        "a step's per-token CPU work leaves out its decode tokens (one per sequence)",
    ),
    Mutant(
        "engine-cpu-serial-no-fixed",
        "sim/cost/engine_cpu.py",
        "return cost[CPU_NON_OVERLAPPED_S] + cpu_s + gpu_s",
        "return cpu_s + gpu_s",
        ("tests/test_engine_cpu.py",),
        "a synchronous step drops the CPU work no mode hides",
    ),
    Mutant(
        "way-in-arrival-order",
        "sim/serving/submission.py",
        'order = np.argsort(ready, kind="stable")',
        'order = np.argsort(work.arrival_s, kind="stable")',
        WAY_IN_TESTS,
        "requests reach the engine in arrival order, not in the order their way in ends",
    ),
    Mutant(
        "way-in-one-no-tokenize",
        "sim/serving/replica_config.py",
        "return self.way_in_s_per_request + self.tokenize_s_per_token * num_prompt_tokens",
        "return self.way_in_s_per_request",
        WAY_IN_TESTS,
        "a closed-loop request's way in leaves out its tokenization",
    ),
    Mutant(
        "metrics-queue-from-arrival",
        "sim/serving/stream.py",
        "queued = request.ready_s if request.ready_s is not None else request.arrival_s",
        "queued = request.arrival_s",
        METRICS_TESTS,
        "/metrics' queue time counts the way in (from arrival, not from reaching the engine)",
    ),
    Mutant(
        "metrics-inference-decode-only",
        "sim/serving/stream.py",
        "return self.prefill_s + self.decode_s",
        "return self.decode_s",
        METRICS_TESTS,
        "/metrics' inference time leaves out the prefill",
    ),
    Mutant(
        "metrics-phase-ttft-buckets",
        "sim/openai/metrics.py",
        'phase: histogram(f"vllm:request_{phase}_time_seconds", f"{what} (s).", E2E_BUCKETS_S)',
        'phase: histogram(f"vllm:request_{phase}_time_seconds", f"{what} (s).", TTFT_BUCKETS_S)',
        METRICS_TESTS,
        "the engine-phase histograms take the TTFT buckets (vLLM's are the request-latency ones)",
    ),
    Mutant(
        "metrics-prompt-hist-generated",
        "sim/openai/metrics.py",
        "self._prompt_hist.labels(**labels).observe(num_prompt_tokens)",
        "self._prompt_hist.labels(**labels).observe(num_generated)",
        METRICS_TESTS,
        "the prompt-tokens histogram observes the generated tokens",
    ),
    # Plan pruning: sim/planning/plan.py was being edited beside these (issue 39); re-run
    # them (--only plan-...) after a change there.
    Mutant(
        "plan-prune-halved",
        "sim/planning/plan.py",
        "if bound_usd > best_usd * (1 + 1e-9):",
        "if 2.0 * bound_usd > best_usd * (1 + 1e-9):",
        PLAN_TESTS,
        "plan prunes a candidate whose optimistic fleet costs half the best's (it could win)",
    ),
    Mutant(
        "plan-stop-below-doubled",
        "sim/planning/plan.py",
        'task["stop_below_rate_per_s"] = sized_rate_per_s * gpus * price / best.usd_per_hour',
        'task["stop_below_rate_per_s"] = 2.0 * sized_rate_per_s * gpus * price / best.usd_per_hour',
        PLAN_TESTS,
        "a candidate's search is abandoned at twice the rate where its fleet would lose",
    ),
    Mutant(
        "plan-bound-no-slack",
        "sim/planning/plan_bound.py",
        "return Bound(rate * OPTIMISM / SERVED_MIN_RATIO)",
        "return Bound(rate * SERVED_MIN_RATIO)",
        PLAN_TESTS,
        "the optimistic rate bound without its slack (below what a candidate can serve)",
    ),
    Mutant(
        "plan-lone-unchunked",
        "sim/planning/plan_bound.py",
        "else max(max_num_batched_tokens, round(prompt))",
        "else max_num_batched_tokens",
        PLAN_TESTS,
        "without chunked prefill a lone prompt is still priced in budget-sized chunks",
    ),
    Mutant(
        "plan-lone-e2el-sum",
        "sim/planning/plan_bound.py",
        "return max(1e3 * prefill_s(cost, prompt, chunk), cheapest_decode_ms * max(output - 1.0, "
        "0.0))",
        "return 1e3 * prefill_s(cost, prompt, chunk) + cheapest_decode_ms * max(output - 1.0, 0.0)",
        PLAN_TESTS,
        "a lone request's e2el quantile as the sum of the prefill's and the decodes' quantiles",
    ),
)


def _locate(text: str, mutant: Mutant) -> int | None:
    """Index of the line to mutate, or None when it is absent or ambiguous."""
    lines = text.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.strip() == mutant.original]
    if mutant.nth is None:
        return found[0] if len(found) == 1 else None
    return found[mutant.nth] if mutant.nth < len(found) else None


def mutate(text: str, mutant: Mutant) -> str | None:
    """``text`` with the mutant's line replaced (its indentation kept), or None if stale."""
    index = _locate(text, mutant)
    if index is None:
        return None
    lines = text.splitlines(keepends=True)
    line = lines[index]
    indent = line[: len(line) - len(line.lstrip())]
    ending = line[len(line.rstrip("\r\n")) :]
    lines[index] = indent + mutant.mutated + ending
    return "".join(lines)


def is_stale(mutant: Mutant, root: Path | None = None) -> bool:
    """Whether the mutant's line (or its file) is gone from the tree at ``root``
    (the checkout's by default)."""
    target = (ROOT if root is None else root) / mutant.path
    return not target.is_file() or mutate(target.read_text(), mutant) is None


def report_stale(mutants: list[Mutant]) -> list[Mutant]:
    """The stale ones among ``mutants``, each named on stderr."""
    stale = [m for m in mutants if is_stale(m)]
    for m in stale:
        print(f"STALE mutant {m.name}: its line is not in {m.path} (update the mutant)",
              file=sys.stderr)  # fmt: skip
    return stale


def copy_tree(dest: Path) -> None:
    """The tree's files as git sees them (tracked, and untracked but not ignored) into
    ``dest``; outside a git checkout, everything but ``IGNORED``."""
    listing = [
        "git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
    ]  # fmt: skip
    try:
        done = subprocess.run(listing, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)
        return
    for name in done.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # (a tracked file deleted in the tree is skipped)
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def _pytest(tree: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[str, float, str]:
    """Run ``tests`` in ``tree``: ('pass' | 'fail' | 'timeout', seconds, the first failed
    test's node id or "")."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1", "CI": "1"}
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-rf", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        done = subprocess.run(args, cwd=tree, env=env, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, ""
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        return "pass", seconds, ""
    # pytest -rf: "FAILED tests/x.py::test_y - message" in the short summary.
    failed = [line.split()[1] for line in done.stdout.decode().splitlines()
              if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1]  # fmt: skip
    return "fail", seconds, failed[0] if failed else ""


def run(mutants: list[Mutant], timeout_s: float) -> int:
    report_stale(mutants)  # told up front too: the run takes minutes
    with tempfile.TemporaryDirectory(prefix="servesim-mutants-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(tree)
        conftest = tree / "tests" / "conftest.py"
        if conftest.is_file():
            conftest.write_text(conftest.read_text() + NO_SHRINK)
        files = sorted({t for m in mutants for t in m.tests})
        verdict, seconds, _ = _pytest(tree, tuple(files), 4 * timeout_s)
        print(f"baseline: {len(files)} test files on the unmutated copy: {verdict} "
              f"({seconds:.0f} s)", flush=True)  # fmt: skip
        if verdict != "pass":
            print("the tests fail without a mutant: fix that first", file=sys.stderr)
            return 2
        counts = {"killed": 0, "survived": 0, "timeout": 0, "stale": 0}
        for mutant in mutants:
            target = tree / mutant.path
            mutated = None if is_stale(mutant, tree) else mutate(target.read_text(), mutant)
            caught_by = ""
            if mutated is None:
                status, seconds = "stale", 0.0
            else:
                target.write_text(mutated)
                try:
                    verdict, seconds, caught_by = _pytest(tree, mutant.tests, timeout_s)
                finally:  # the copy's file back, with its original time stamp
                    shutil.copy2(ROOT / mutant.path, target)
                status = {"fail": "killed", "pass": "survived", "timeout": "timeout"}[verdict]
            counts[status] += 1
            print(f"{status:9s} {mutant.name:26s} {seconds:6.1f} s  {mutant.why}", flush=True)
            if caught_by:
                print(f"{'':9s} {'':26s} caught by {caught_by}", flush=True)
    applied = counts["killed"] + counts["survived"] + counts["timeout"]
    score = counts["killed"] / applied if applied else 0.0
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    print(f"score: {counts['killed']}/{applied} killed ({score:.0%}); {summary}")
    if report_stale(mutants):
        return 1
    return 0 if applied == counts["killed"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this mutant (repeatable)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=300.0, metavar="S",
                        help="seconds per mutant's tests (default 300)")  # fmt: skip
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        print(f"unknown mutant(s): {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    chosen = [known[name] for name in args.only] if args.only else list(MUTANTS)
    if args.list:
        for m in chosen:
            mark = "  (stale: its line is not in the file)" if is_stale(m) else ""
            print(f"{m.name:26s} {m.path}{mark}  [{' '.join(m.tests)}]\n{'':26s} {m.why}")
        return 1 if report_stale(chosen) else 0
    return run(chosen, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
