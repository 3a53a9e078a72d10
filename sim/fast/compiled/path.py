"""When and how one fed replica runs compiled (``sim.fast.compiled.loop``).

A single replica (or a fresh round-robin pool) serving an open loop under plain
continuous batching, a roofline or kernel-table cost (``sim.cost.tabulate``),
skip-ahead and no shared prefixes is what most capacity searches and sweeps
simulate. ``why_not`` says why a run is not of that kind; ``run_compiled`` plays
one in the loop and fills the cores' logs, the Python path's to the bit, or
answers False, the cores as they were (a preemption, a broken run of tokens). A
prefix-caching pool without shared prefixes keys no block unless a request is
preempted, so no free-queue order changes what the loop plays: it counts blocks.

``LoopArrays``'s fields are the loop's arguments, in order, built from a workload
and a core and read back into it; requests in submission order, which ``order``
maps back to request ids.
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

from sim.config import FloatArray, IntArray
from sim.cost import tabulate
from sim.cost.tabulate import PlayedCost, PriceArrays
from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.scheduler import RECORD_COUNTS, RECORD_TIMES, Continuous, EngineCore
from sim.engine.step_runs import SEGMENT_COUNTS
from sim.fast.compiled import loop
from sim.fast.decode_runs import MAX_RUN_STEPS
from sim.fast.feed import Submissions
from sim.serving.replica_config import FrontendConfig
from sim.serving.submission import OpenLoop, concurrency_limit, prefix_describer


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
    kernel = tabulate.kernel_cost_of(cost)
    if tabulate.roofline_of(cost) is None and kernel is None:
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
        max_tokens = tabulate.max_step_tokens(
            policy.max_num_batched_tokens, policy.max_num_seqs, longest
        )
        return tabulate.why_not(kernel, policy.max_num_seqs, max_tokens)
    return None


def longest_tokens(work: OpenLoop) -> int:
    """The longest request's tokens, prompt and output."""
    return int((work.num_prompt_tokens + work.num_output_tokens).max())


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
    max_tokens = tabulate.max_step_tokens(
        policy.max_num_batched_tokens, policy.max_num_seqs, longest_tokens(work)
    )
    priced = tabulate.tabulate(cost, policy.max_num_seqs, max_tokens)
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
    priced: PriceArrays,
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

CountArray = npt.NDArray[np.int32]

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
    prices: PriceArrays
    times: FloatArray
    counts: IntArray
    slots: IntArray
    state: IntArray
    clock: FloatArray
    logs: tuple[FloatArray, FloatArray, CountArray, FloatArray, CountArray, IntArray]

    @classmethod
    def build(
        cls,
        core: EngineCore,
        priced: PriceArrays,
        work: OpenLoop,
        mine: Submissions,
    ) -> LoopArrays:
        """The arrays of a run of the submissions ``mine`` of ``work`` on ``core`` (fresh),
        priced by ``priced`` (``sim.cost.tabulate.tabulate``)."""
        policy = core.policy
        assert isinstance(policy, Continuous)
        kv = core.kv
        order = mine.order
        n = len(order)
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
        settings[loop.RESERVE_FULL_SEQUENCE] = policy.reserve_full_sequence
        state = np.zeros(loop.STATE_SIZE, dtype=np.int64)
        state[loop.NUM_FREE] = kv.num_free_blocks
        # One column per request, and one more: inf in the feed's times ("nothing
        # more to come", as the feed's).
        times = np.full((loop.NUM_TIMES, n + 1), np.nan)
        times[loop.CLOCK_S, :n], times[loop.READY_S, :n] = mine.clock_s, mine.ready_s
        times[loop.CLOCK_S, n] = times[loop.READY_S, n] = np.inf
        counts = np.zeros((loop.NUM_COUNTS, n), dtype=np.int64)
        counts[loop.PROMPT] = work.num_prompt_tokens[order]
        counts[loop.OUTPUT] = work.num_output_tokens[order]
        # Running, scheduled and held requests never exceed the limit.
        slots = np.zeros((loop.NUM_SLOTS, policy.max_num_seqs + 1), dtype=np.int64)
        logs = (
            np.empty(CHUNK_STEPS + MAX_RUN_STEPS + 1),
            np.empty(CHUNK_ROWS), np.empty((CHUNK_ROWS, len(SEGMENT_COUNTS)), dtype=np.int32),
            np.empty(CHUNK_ROWS), np.empty((CHUNK_ROWS, len(_SERIES_COUNTS)), dtype=np.int32),
            np.empty(n, dtype=np.int64),
        )  # fmt: skip
        return cls(settings, priced, times, counts, slots, state, np.zeros(loop.NUM_CLOCKS), logs)

    def args(self) -> tuple[Any, ...]:
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
        ends, segment_start_s, segment_counts, series_time_s, series_counts, _ = self.logs
        _append(steps.ends, ends[:num_ends])
        _append(steps.segments.group("f8", ("start_s",)), segment_start_s[:num_segments])
        _append(steps.segments.group("i4", SEGMENT_COUNTS), segment_counts[:num_segments])
        _append(series.group("f8", ("time_s",)), series_time_s[:num_plans])
        _append(series.group("i4", _SERIES_COUNTS), series_counts[:num_plans])
        state[loop.NUM_ENDS] = state[loop.NUM_SEGMENTS] = state[loop.NUM_PLANS] = 0

    def write_records(self, core: EngineCore, work: OpenLoop, order: npt.NDArray[np.intp]) -> None:
        """The finished requests' records, in the order they finished, as
        ``EngineCore._done`` writes them (no preemption, nothing cached or rejected);
        each column worked out as its place is filled, so at most one is held beside
        the table (a million requests' records are 130 MB)."""
        done = self.logs[5]  # the requests in the order they finished
        ids = order[done]
        priority = work.priority
        arrival_s = np.asarray(work.arrival_s, dtype=np.float64)
        times: dict[str, Callable[[], npt.NDArray[Any]]] = {
            "arrival_s": lambda: arrival_s[ids],
            # A request taken from the feed is ready at its clock.
            "ready_s": lambda: self.times[loop.CLOCK_S][done],
            "first_scheduled_s": lambda: self.times[loop.FIRST_SCHEDULED_S][done],
            "first_token_s": lambda: self.times[loop.FIRST_TOKEN_S][done],
            "finish_s": lambda: self.times[loop.FINISH_S][done],
        }
        counts: dict[str, Callable[[], npt.NDArray[Any] | int]] = {
            "request_id": lambda: ids,
            "num_prompt_tokens": lambda: self.counts[loop.PROMPT][done],
            "num_output_tokens": lambda: self.counts[loop.OUTPUT][done],
            "num_generated_tokens": lambda: self.counts[loop.OUTPUT][done],
            "num_preemptions": lambda: 0,
            "num_swaps": lambda: 0,
            "priority": lambda: 0 if priority is None else np.asarray(priority)[ids],
            "num_cached_tokens": lambda: 0,
            "num_prefix_lookups": lambda: self.counts[loop.LOOKUPS][done],
            # Looked up once, fresh: the prompt is the query.
            "num_prefix_query_tokens": lambda: (
                self.counts[loop.LOOKUPS][done] * self.counts[loop.PROMPT][done]
            ),
            "num_prefix_hit_tokens": lambda: 0,
        }
        records = core.records
        for dtype, names, columns in (("f8", RECORD_TIMES, times), ("i8", RECORD_COUNTS, counts)):
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
