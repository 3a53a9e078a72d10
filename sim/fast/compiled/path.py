"""When and how one fed replica runs compiled (``sim.fast.compiled.loop``).

A single replica (or a fresh round-robin pool) serving an open loop, with
plain continuous batching, a roofline cost or kernel tables
(``sim.fast.compiled.kernels``; either with or without the engine's CPU
work, ``sim.cost.engine_cpu``), skip-ahead and no shared
prefixes, is what most capacity searches and sweeps simulate. ``run_compiled``
plays such a run in ``sim.fast.compiled.loop.run`` (numba, if installed)
and fills the engine cores' logs with its results, which are the Python
path's to the bit; the result is then built from the cores as after any run.
``why_not`` says why a run is not of that kind; ``run_compiled`` answers
``False``, the cores as they were, when one meets what only the Python path
plays (a preemption, a broken run of tokens); the caller then simulates as usual.

``LoopArrays``'s fields are the loop's arguments, in order (``args``), built
from a workload and a core and read back into it. Requests are indexed in
submission order (the feed's: arrival plus its way in, stable), which
``order`` maps back to request ids.
"""

from __future__ import annotations

import functools
import warnings
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.cost.engine_cpu import EngineCpuCost
from sim.cost.kernels.cost import KernelCost
from sim.cost.roofline import RooflineCost
from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.scheduler import (
    _RECORD_COUNTS,
    _RECORD_TIMES,
    MAX_RUN_STEPS,
    Continuous,
    EngineCore,
)
from sim.engine.step_runs import SEGMENT_COUNTS
from sim.fast.compiled import kernels, loop
from sim.fast.feed import Submissions
from sim.serving.replica_config import FrontendConfig
from sim.serving.submission import OpenLoop, concurrency_limit, prefix_describer

# The cost models the loop plays (why_not says which of them).
PlayedCost = RooflineCost | KernelCost | EngineCpuCost


@functools.cache
def compiled() -> Callable[..., int] | None:
    """The compiled loop, or None without numba (or where it cannot set up: the
    Python path then runs, with a warning saying why)."""
    try:
        return loop.compile_run()
    except ImportError:
        return None
    except Exception as error:  # e.g. no writable place for numba's cache
        warnings.warn(
            f"the compiled loop is off ({error}); runs take the Python path", stacklevel=2
        )
        return None


def why_not(
    cores: Sequence[EngineCore], cost: object, skip_ahead: bool, work: OpenLoop
) -> str | None:
    """Why this run cannot take the compiled loop, or None if it can."""
    if concurrency_limit(work) is not None:
        return "capped requests in flight (max_concurrency)"
    core = cores[0]  # (a pool's cores are alike)
    policy = core.policy
    if type(policy) is not Continuous or policy.swap is not None:
        return "not plain continuous batching"
    kernel = kernels.kernel_cost_of(cost)
    if roofline_of(cost) is None and kernel is None:
        return "not a roofline or kernel-table cost"
    if not skip_ahead or any(core.recorder is not None for core in cores):
        return "step by step, or recorded"
    if type(core.kv) not in (BlockPool, PrefixCachingPool) or prefix_describer(work) is not None:
        return "shared prefixes"
    if len(work.num_prompt_tokens) == 0:
        return "no requests, or some rejected"
    # EngineCore.rejection_reason's two limits, for the longest request.
    longest = longest_tokens(work)
    if longest > core.max_model_len_tokens:
        return "no requests, or some rejected"
    if core.kv.blocks_for(longest - 1) > core.kv.num_blocks:
        return "some requests rejected"
    if kernel is not None:
        max_tokens = kernels.max_step_tokens(
            policy.max_num_batched_tokens, policy.max_num_seqs, longest
        )
        return kernels.why_not(kernel, policy.max_num_seqs, max_tokens)
    return None


def longest_tokens(work: OpenLoop) -> int:
    """The longest request's tokens, prompt and output."""
    return int((work.num_prompt_tokens + work.num_output_tokens).max())


def roofline_of(cost: object) -> RooflineCost | None:
    """The roofline that prices ``cost``'s GPU work when the loop can play ``cost``:
    a roofline (a relabelled one too, if it prices steps as the roofline), bare or
    inside exactly an ``EngineCpuCost``; else None."""
    gpu = cost.gpu if type(cost) is EngineCpuCost else cost
    if (
        isinstance(gpu, RooflineCost)
        and type(gpu).step_s is RooflineCost.step_s
        and type(gpu).decode_durations_s is RooflineCost.decode_durations_s
    ):
        return gpu
    return None


def cost_arrays(cost: PlayedCost, max_num_seqs: int, max_tokens: int) -> CostArrays:
    """The loop's ``cost``, ``tables`` and ``layout`` arrays for ``cost`` (``loop``'s
    indices), for steps of up to ``max_num_seqs`` sequences and ``max_tokens`` tokens."""
    constants = np.zeros(loop.NUM_COSTS)
    roofline = roofline_of(cost)
    if roofline is not None:
        constants[loop.S_PER_DENSE_TOKEN] = roofline._s_per_dense_token
        constants[loop.S_PER_PAIR] = roofline._s_per_attention_pair
        constants[loop.WEIGHT_S] = roofline._weight_s
        constants[loop.S_PER_KV_TOKEN] = roofline._s_per_kv_token
        tables, layout = np.zeros(0), np.zeros(loop.LAYOUT_SIZE, dtype=np.int64)
        layout[loop.KIND] = loop.ROOFLINE
    else:
        kernel = kernels.kernel_cost_of(cost)
        assert kernel is not None  # why_not said so
        tables, layout = kernels.arrays(kernel, max_num_seqs, max_tokens)
    constants[loop.CPU_ASYNC_SCHEDULING] = 1.0  # the bare GPU model: 0 + max(gpu, 0) is gpu
    if isinstance(cost, EngineCpuCost):
        cpu = cost.cpu.config
        constants[loop.CPU_PER_STEP_S] = cpu.per_step_s
        constants[loop.CPU_PER_SEQ_S] = cpu.per_seq_s
        constants[loop.CPU_PER_TOKEN_S] = cpu.per_token_s
        constants[loop.CPU_NON_OVERLAPPED_S] = cpu.non_overlapped_s
        constants[loop.CPU_ASYNC_SCHEDULING] = float(cost.async_scheduling)
    return constants, tables, layout


def run_compiled(
    cores: Sequence[EngineCore],
    cost: PlayedCost,
    work: OpenLoop,
    frontend: FrontendConfig,
    run: Callable[..., int],
    tick: Callable[[], None],
) -> bool:
    """Simulate ``work`` on the fresh ``cores`` with ``run`` (several: a round-robin
    pool's, each serving its turns, ``Submissions.dealt``); False, and the cores
    as they were, if the Python path must simulate it instead."""
    shares = Submissions.dealt(work, frontend, len(cores))
    policy = cores[0].policy  # (a pool's cores are alike)
    assert isinstance(policy, Continuous)
    max_tokens = kernels.max_step_tokens(
        policy.max_num_batched_tokens, policy.max_num_seqs, longest_tokens(work)
    )
    priced = cost_arrays(cost, policy.max_num_seqs, max_tokens)
    for core, mine in zip(cores, shares, strict=True):
        if not _run_one(core, priced, work, mine, run, tick):
            for other in cores:  # (the ones before: run, and now dropped)
                other.new_logs()
                other.num_done = other.num_steps = 0
                other.last_end_s = 0.0
            return False
    return True


def _run_one(
    core: EngineCore,
    priced: CostArrays,
    work: OpenLoop,
    mine: Submissions,
    run: Callable[..., int],
    tick: Callable[[], None],
) -> bool:
    """One core's run of its submissions ``mine``; False if the loop could not play it."""
    arrays = LoopArrays.build(core, priced, work, mine)
    args = arrays.args()
    while True:
        status = run(*args)
        if status == loop.UNSUPPORTED:
            return False
        arrays.flush_into(core)
        core.num_done = arrays.num_done  # what the progress bar reads
        tick()
        if status == loop.DONE:
            break
    if arrays.num_done != len(mine.order):
        return False  # some never ran: the Python path records them unfinished
    core.num_steps = int(arrays.state[loop.NUM_STEPS])
    core.last_end_s = float(arrays.clock[loop.LAST_END])
    arrays.write_records(core, work, mine.order)
    return True


# -- the loop's arrays ------------------------------------------------------------

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
CountArray = npt.NDArray[np.int32]
# The loop's cost, tables and layout arrays (read only: a pool's cores share them).
CostArrays = tuple[FloatArray, FloatArray, IntArray]

# Step ends a call may log before it returns to have its buffers emptied (8 MB;
# a million base requests log ~14 million steps, so the progress bar moves).
CHUNK_STEPS = 1 << 20
# Segments and plans: fewer than steps (a run of decode steps is one segment).
CHUNK_ROWS = CHUNK_STEPS // 4
_SERIES_COUNTS = ("num_waiting", "num_running", "num_kv_blocks_used")


@dataclass(eq=False)
class LoopArrays:
    """Everything the loop reads and writes (see ``sim.fast.compiled.loop.run``)."""

    settings: IntArray
    cost: FloatArray
    tables: FloatArray
    layout: IntArray
    clock_s: FloatArray
    ready_s: FloatArray
    prompt: IntArray
    output: IntArray
    comp: IntArray
    gen: IntArray
    blocks: IntArray
    lookups: IntArray
    last_step: IntArray
    first_scheduled_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    running: IntArray
    sched_r: IntArray
    sched_new: IntArray
    held: IntArray
    state: IntArray
    clock: FloatArray
    ends: FloatArray
    segment_start_s: FloatArray
    segment_counts: CountArray
    series_time_s: FloatArray
    series_counts: CountArray
    done_order: IntArray

    @classmethod
    def build(
        cls,
        core: EngineCore,
        priced: CostArrays,
        work: OpenLoop,
        mine: Submissions,
    ) -> LoopArrays:
        """The arrays of a run of the submissions ``mine`` of ``work`` on ``core`` (fresh),
        priced by ``priced`` (``cost_arrays``)."""
        policy = core.policy
        assert isinstance(policy, Continuous)
        kv = core.kv
        order = mine.order
        n = len(order)
        inf = np.array([np.inf])  # "nothing more to come", as the feed's
        settings = np.zeros(loop.NUM_SETTINGS, dtype=np.int64)
        settings[loop.MAX_NUM_SEQS] = policy.max_num_seqs
        settings[loop.MAX_NUM_BATCHED_TOKENS] = policy.max_num_batched_tokens
        settings[loop.TOKEN_CAP] = policy.max_tokens_per_request or 0  # 0: no cap
        settings[loop.CHUNKED] = policy.chunked_prefill
        settings[loop.BLOCK_SIZE] = kv.block_size_tokens
        settings[loop.NUM_BLOCKS] = kv.num_blocks
        settings[loop.CACHES_PREFIXES] = kv.caches_prefixes
        settings[loop.MAX_RUN_STEPS] = MAX_RUN_STEPS
        settings[loop.ASYNC_SCHEDULING] = policy.async_scheduling
        constants, tables, layout = priced
        state = np.zeros(loop.STATE_SIZE, dtype=np.int64)
        state[loop.NUM_FREE] = kv.num_free_blocks
        slots = policy.max_num_seqs + 1  # running, scheduled and held never exceed the limit

        def counts() -> IntArray:
            return np.zeros(n, dtype=np.int64)

        def times() -> FloatArray:
            return np.full(n, np.nan)

        def slot_array() -> IntArray:
            return np.zeros(slots, dtype=np.int64)

        return cls(
            settings, constants, tables, layout, np.concatenate([mine.clock_s, inf]),
            np.concatenate([mine.ready_s, inf]),
            np.ascontiguousarray(work.num_prompt_tokens[order], dtype=np.int64),
            np.ascontiguousarray(work.num_output_tokens[order], dtype=np.int64),
            counts(), counts(), counts(), counts(), counts(),
            times(), times(), times(),
            slot_array(), slot_array(), slot_array(), slot_array(),
            state, np.zeros(loop.NUM_CLOCKS),
            np.empty(CHUNK_STEPS + MAX_RUN_STEPS + 1),
            np.empty(CHUNK_ROWS), np.empty((CHUNK_ROWS, len(SEGMENT_COUNTS)), dtype=np.int32),
            np.empty(CHUNK_ROWS), np.empty((CHUNK_ROWS, len(_SERIES_COUNTS)), dtype=np.int32),
            np.empty(n, dtype=np.int64),
        )  # fmt: skip

    def args(self) -> tuple[npt.NDArray[np.generic], ...]:
        """The loop's arguments, in its order (the arrays themselves: it writes to them)."""
        # Every field in order, the arrays themselves (astuple would copy them).
        return tuple(getattr(self, field.name) for field in fields(self))

    @property
    def num_done(self) -> int:
        return int(self.state[loop.NUM_DONE])

    def flush_into(self, core: EngineCore) -> None:
        """Append the logged steps and queue samples to ``core``'s logs; empty the buffers."""
        state = self.state
        num_ends, num_segments, num_plans = (
            state[loop.NUM_ENDS], state[loop.NUM_SEGMENTS], state[loop.NUM_PLANS]
        )  # fmt: skip
        steps, series = core.steps, core.series
        _append(steps.ends, self.ends[:num_ends])
        _append(steps.segments.group("f8", ("start_s",)), self.segment_start_s[:num_segments])
        _append(steps.segments.group("i4", SEGMENT_COUNTS), self.segment_counts[:num_segments])
        _append(series.group("f8", ("time_s",)), self.series_time_s[:num_plans])
        _append(series.group("i4", _SERIES_COUNTS), self.series_counts[:num_plans])
        state[loop.NUM_ENDS] = state[loop.NUM_SEGMENTS] = state[loop.NUM_PLANS] = 0

    def write_records(self, core: EngineCore, work: OpenLoop, order: npt.NDArray[np.intp]) -> None:
        """The finished requests' records, in the order they finished, as
        ``EngineCore._done`` writes them (no preemption, nothing cached or rejected).

        Each column is worked out when its place in the table is filled, so that
        no more than one is held beside the table (a million requests' records
        are 130 MB).
        """
        done = self.done_order
        ids = order[done]
        priority = work.priority
        arrival_s = np.asarray(work.arrival_s, dtype=np.float64)
        times: dict[str, Callable[[], npt.NDArray[Any]]] = {
            "arrival_s": lambda: arrival_s[ids],
            "ready_s": lambda: self.clock_s[done],  # a request taken from the feed is ready then
            "first_scheduled_s": lambda: self.first_scheduled_s[done],
            "first_token_s": lambda: self.first_token_s[done],
            "finish_s": lambda: self.finish_s[done],
        }
        counts: dict[str, Callable[[], npt.NDArray[Any] | int]] = {
            "request_id": lambda: ids,
            "num_prompt_tokens": lambda: self.prompt[done],
            "num_output_tokens": lambda: self.output[done],
            "num_generated_tokens": lambda: self.output[done],
            "num_preemptions": lambda: 0,
            "num_swaps": lambda: 0,
            "priority": lambda: 0 if priority is None else np.asarray(priority)[ids],
            "num_cached_tokens": lambda: 0,
            "num_prefix_lookups": lambda: self.lookups[done],
            # Looked up once, fresh: the prompt is the query.
            "num_prefix_query_tokens": lambda: self.lookups[done] * self.prompt[done],
            "num_prefix_hit_tokens": lambda: 0,
        }
        records = core.records
        for dtype, names, columns in (("f8", _RECORD_TIMES, times), ("i8", _RECORD_COUNTS, counts)):
            rows = _new_rows(records.group(dtype, names), len(done), len(names), dtype)
            for k, name in enumerate(names):
                rows[:, k] = columns[name]()
            del rows  # (the view pins the array's size)
        _append(records.group("i4", ("replica",)), np.full(len(done), core.replica, np.int32))


def _new_rows(target: array[Any], num_rows: int, num_columns: int, dtype: str) -> npt.NDArray[Any]:
    """``num_rows`` new rows of zeros at the end of ``target``, as a writable view
    (drop it before ``target`` grows again). The zeros come from calloc'd pages,
    which hold no memory until written."""
    start = len(target) // num_columns
    _append(target, np.zeros(num_rows * num_columns, dtype=dtype))
    return np.frombuffer(target, dtype=dtype).reshape(-1, num_columns)[start:]


def _append(target: array[Any], rows: npt.NDArray[Any]) -> None:
    """Append ``rows`` (C order, ``target``'s item type) to ``target``, without a copy
    of them in between (``tobytes`` would make one: 100 MB at a million requests)."""
    target.frombytes(np.ascontiguousarray(rows).data.cast("B"))
