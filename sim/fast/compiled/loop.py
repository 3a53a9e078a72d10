"""The compiled twin of one fed replica's loop (``sim.fast.compiled.path`` runs it).

``run`` plays what ``sim.fast.feed.FedReplica.run``, ``EngineCore`` and ``Continuous`` do for one
replica taking an open loop's requests from a feed (alone, or its turns behind a
round-robin router), priced by ``sim.cost.tabulate.tabulate``'s arrays (a roofline
or kernel tables, with or without the engine's CPU work), with a KV pool whose
requests share no prefix (so only counts matter). Each piece mirrors a Python
function of the engine, the same operations in the same order, so its plans,
step ends, records, step log and queue samples are the Python path's to the bit
(``tests/properties/test_compiled_equivalence.py``).

What it cannot play answers ``UNSUPPORTED`` and the Python path runs the whole
workload: a KV pool too small for the batch (preemption), a token that does not
follow its request's previous one by one step, and a kernel-table lookup past a
grid's last point (``kernels.why_not`` keeps runs inside the grids, so the last
two are safety nets).

All state lives in numpy arrays (numba compiles functions of arrays and numbers),
named below by index, so a call may stop when an output buffer is nearly full
(``FLUSH``) and the next goes on where it left off. The functions are plain
Python that numba compiles when installed (``compile_run``: compiled twins, the
modules' own stay plain); uncompiled they run slowly (the tests do so where numba
is missing). A run of decode steps' ends (``decode_ends``) and the kernel tables'
per-step terms are ``sim.fast.run_ends``'s, which the Python path's decode runs
call on lists.
"""

from __future__ import annotations

import hashlib
import types
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray, IntArray
from sim.cost.engine_cpu import with_cpu_s  # the engine's CPU work, written once
from sim.cost.kernels import price
from sim.cost.kernels.price import (  # the kernel tables' layout, and their price
    DENSE,
    KERNELS,
    KIND,
    NUM_LAYERS,
    attention_s,
    grids_of,
)
from sim.cost.tabulate import (  # the constants' layout (``tabulate``)
    S_PER_DENSE_TOKEN,
    S_PER_KV_TOKEN,
    S_PER_LAYER_TOKEN,
    S_PER_PAIR,
    WEIGHT_S,
)
from sim.fast import run_ends
from sim.fast.run_ends import decode_ends, kernel_per_step_s  # shared with the Python path

DONE = 0  # every request finished
FLUSH = 1  # an output buffer is nearly full: empty them and call again
UNSUPPORTED = 2  # something only the Python path plays (see the module)

# Settings (``settings`` array, int64), by index.
MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, TOKEN_CAP, CHUNKED, BLOCK_SIZE = 0, 1, 2, 3, 4
NUM_BLOCKS, CACHES_PREFIXES, MAX_RUN_STEPS, ASYNC_SCHEDULING = 5, 6, 7, 8
RESERVE_FULL_SEQUENCE = 9
NUM_SETTINGS = 10
# Per-request times (``times``, float64, a row each, a column per request in
# submission order and one more: inf in CLOCK_S and READY_S, "nothing more to come").
CLOCK_S, READY_S, FIRST_SCHEDULED_S, FIRST_TOKEN_S, FINISH_S = 0, 1, 2, 3, 4
NUM_TIMES = 5
# Per-request counts (``counts``, int64, a row each): tokens of the prompt, of the
# output, computed and generated; KV blocks held; prefix lookups; the latest step.
PROMPT, OUTPUT, COMP, GEN, BLOCKS, LOOKUPS, LAST_STEP = 0, 1, 2, 3, 4, 5, 6
NUM_COUNTS = 7
# The batch's lists (``slots``, int64, a row each): running requests, a plan's
# scheduled ones and their new tokens, and (async scheduling) finished requests
# whose blocks are freed once the plan under way is made.
RUNNING, SCHED_R, SCHED_NEW, HELD = 0, 1, 2, 3
NUM_SLOTS = 4
# Scalar state (``state`` array, int64), by index.
NUM_TAKEN, WAIT_HEAD, NUM_RUNNING, NUM_STEPS, NUM_FREE, STARTED, NUM_DONE = 0, 1, 2, 3, 4, 5, 6
NUM_ENDS, NUM_SEGMENTS, NUM_PLANS, NUM_HELD, VISIBLE = 7, 8, 9, 10, 11
STATE_SIZE = 12
# Clock state (``clock`` array, float64): the end of the last step (the next plan's
# time; SimPy's own clock decides nothing the replica does here), and (async
# scheduling, when ``state[VISIBLE]``) what the next plan can see up to.
LAST_END, VISIBLE_UNTIL = 0, 1
NUM_CLOCKS = 2

CountArray = npt.NDArray[np.int32]


def step_s(
    cost: FloatArray,
    tables: FloatArray,
    layout: IntArray,
    prefill_seqs: int,
    prefill_tokens: int,
    pairs: int,
    kv_read: int,
    decode_seqs: int,
    context: int,
    max_context: int,
    min_context: int,
) -> float:
    """``EngineCpuCost.step_s`` around ``RooflineCost.step_s`` or ``KernelCost.step_s``
    of a step shape, the same operations in their order; NaN where a kernel table
    would be read past its last point."""
    tokens = prefill_tokens + decode_seqs
    if tokens == 0:
        return 0.0
    seqs = prefill_seqs + decode_seqs
    if layout[KIND] == KERNELS:  # num_layers x (dense + attention) + the step's terms
        attention = attention_s(
            tables, layout, grids_of(layout), prefill_seqs, prefill_tokens, pairs, kv_read,
            decode_seqs, context, max_context, min_context,
        )  # fmt: skip
        if attention != attention:
            return attention
        layer = tables[layout[DENSE] + tokens] + attention
        gpu = layout[NUM_LAYERS] * layer + kernel_per_step_s(tables, layout, tokens, seqs)
    else:
        # RooflineCost.step_s: the LM head at one position a sequence, layers at every token.
        compute = (
            cost[S_PER_DENSE_TOKEN] * seqs
            + cost[S_PER_LAYER_TOKEN] * (prefill_tokens - prefill_seqs)
            + cost[S_PER_PAIR] * (pairs + context)
        )
        memory = cost[WEIGHT_S] + cost[S_PER_KV_TOKEN] * (kv_read + context + tokens)
        gpu = compute if compute > memory else memory
    return with_cpu_s(cost, gpu, seqs, tokens)


def first_step(
    cost: FloatArray,
    tables: FloatArray,
    layout: IntArray,
    counts: IntArray,
    slots: IntArray,
    num_sched: int,
    max_run: int,
) -> tuple[float, int, int, int, int]:
    """The plan's first step (``Continuous._finish_plan``, ``_tally``): its price, how
    many decode steps of the batch may follow it before the first finish (0 if a
    request is still prefilling after it), and their summed, longest and shortest
    context in the first of them."""
    prompt, output, comp, gen = counts[PROMPT], counts[OUTPUT], counts[COMP], counts[GEN]
    sched_r, sched_new = slots[SCHED_R], slots[SCHED_NEW]
    prefill_seqs = prefill_tokens = pairs = kv_read = decode_seqs = decode_context = 0
    longest = shortest = 0  # of this step's decodes' contexts
    min_left = max_run
    run_context = run_longest = run_shortest = 0
    all_emit = True
    for j in range(num_sched):
        r = sched_r[j]
        num_new = sched_new[j]
        cached = comp[r]
        generated = gen[r]
        computed = cached + num_new
        if num_new == 1 and generated > 0:
            if decode_seqs == 0 or computed < shortest:
                shortest = computed
            if computed > longest:
                longest = computed
            decode_seqs += 1
            decode_context += computed
        else:
            prefill_seqs += 1
            prefill_tokens += num_new
            pairs += num_new * cached + num_new * (num_new + 1) // 2
            kv_read += computed
        if computed != prompt[r] + generated:
            all_emit = False  # still prefilling after this step
        else:
            left = output[r] - generated - 1
            if left < min_left:
                min_left = left
            after = computed + 1
            run_context += after
            if after > run_longest:
                run_longest = after
            if run_shortest == 0 or after < run_shortest:
                run_shortest = after
    price_s = step_s(
        cost, tables, layout, prefill_seqs, prefill_tokens, pairs, kv_read, decode_seqs,
        decode_context, longest, shortest,
    )  # fmt: skip
    return price_s, (min_left if all_emit else 0), run_context, run_longest, run_shortest


def steps_within_pool(
    block_size: int,
    free: int,
    comp: IntArray,
    blocks: IntArray,
    sched_r: IntArray,
    sched_new: IntArray,
    num_sched: int,
    num_steps: int,
) -> int:
    """``sim.fast.decode_runs.steps_within_pool`` over the scheduled rows."""
    if num_sched * (num_steps // block_size + 1) <= free:
        return num_steps
    if _missing(block_size, comp, blocks, sched_r, sched_new, num_sched, num_steps) <= free:
        return num_steps
    low, high = 0, num_steps
    while high - low > 1:
        mid = (low + high) // 2
        if _missing(block_size, comp, blocks, sched_r, sched_new, num_sched, mid) <= free:
            low = mid
        else:
            high = mid
    return low


def _missing(
    block_size: int,
    comp: IntArray,
    blocks: IntArray,
    sched_r: IntArray,
    sched_new: IntArray,
    num_sched: int,
    k: int,
) -> int:
    """Blocks the scheduled requests lack to hold ``k`` more tokens each after this step."""
    total = 0
    for j in range(num_sched):
        r = sched_r[j]
        short = -(-(comp[r] + sched_new[j] + k) // block_size) - blocks[r]
        if short > 0:
            total += short
    return total


def commit(
    counts: IntArray,
    times: FloatArray,
    slots: IntArray,
    num_sched: int,
    async_scheduling: bool,
    state: IntArray,
    logs: tuple[FloatArray, FloatArray, CountArray, FloatArray, CountArray, IntArray],
    at: int,
    num_ends: int,
    start_s: float,
    bs: int,
) -> int:
    """``EngineCore.commit`` of the plan's step and the ``num_ends - 1`` decode steps
    after it (``EngineCore._commit_one`` / ``_commit_run``), finishes included."""
    prompt, output, comp, gen = counts[PROMPT], counts[OUTPUT], counts[COMP], counts[GEN]
    blocks, last_step = counts[BLOCKS], counts[LAST_STEP]
    first_token_s, finish_s = times[FIRST_TOKEN_S], times[FINISH_S]
    sched_r, sched_new, held = slots[SCHED_R], slots[SCHED_NEW], slots[HELD]
    ends, segment_start_s, segment_counts, done_order = logs[0], logs[1], logs[2], logs[5]
    first = state[NUM_STEPS]
    end_first = ends[at]
    end_last = ends[at + num_ends - 1]
    num_itl = num_decode = num_prefill = num_fresh = 0
    num_finished = 0
    for j in range(num_sched):
        r = sched_r[j]
        num_new = sched_new[j]
        generated = gen[r]
        if num_new == 1 and generated > 0:
            num_decode += 1
        else:
            num_prefill += num_new
        computed = comp[r] + num_new
        if num_ends == 1 and computed != prompt[r] + generated:
            comp[r] = computed  # a prefill chunk: no token yet
            continue
        # The request samples a token in each step (a run guarantees it).
        if first_token_s[r] == first_token_s[r]:  # not NaN: it has had a token
            if last_step[r] != first - 1:
                return UNSUPPORTED  # a broken run of tokens (EngineCore.break_run)
            num_itl += 1
        else:
            first_token_s[r] = end_first
            num_fresh += 1
        computed += num_ends - 1
        comp[r] = computed
        gen[r] = generated + num_ends
        last_step[r] = first + num_ends - 1
        if num_ends > 1:  # inline growth (the plan checked the pool suffices)
            short = -(-computed // bs) - blocks[r]
            if short > 0:
                state[NUM_FREE] -= short
                blocks[r] += short
        if generated + num_ends == output[r]:
            sched_r[num_finished] = r  # (a slot already read: reused for the finishers)
            num_finished += 1
    for j in range(num_finished):  # EngineCore.finish, in running order
        r = sched_r[j]
        finish_s[r] = end_last
        if async_scheduling:  # its slot and blocks count for the plan already under way
            held[state[NUM_HELD]] = r
            state[NUM_HELD] += 1
        else:
            state[NUM_FREE] += blocks[r]
            blocks[r] = 0
        done_order[state[NUM_DONE]] = r
        state[NUM_DONE] += 1
        state[NUM_RUNNING] -= 1
    # The step log (StepLog.add_step, add_decode_run).
    g = state[NUM_SEGMENTS]
    segment_start_s[g] = start_s
    segment_counts[g, 0] = 1
    segment_counts[g, 1] = num_prefill
    segment_counts[g, 2] = num_decode
    segment_counts[g, 3] = num_itl
    segment_counts[g, 4] = num_itl + num_fresh if num_ends == 1 else num_sched
    g += 1
    if num_ends > 1:
        segment_start_s[g] = end_first
        segment_counts[g, 0] = num_ends - 1
        segment_counts[g, 1] = 0
        segment_counts[g, 2] = num_sched
        segment_counts[g, 3] = num_sched
        segment_counts[g, 4] = num_sched
        g += 1
    state[NUM_SEGMENTS] = g
    state[NUM_ENDS] = at + num_ends
    state[NUM_STEPS] = first + num_ends
    return DONE


# What stopped admission (Continuous._admit's answer).
_EMPTY, _SEQS, _BUDGET, _KV = 0, 1, 2, 3


def run(
    settings: IntArray,
    prices: tuple[FloatArray, FloatArray, IntArray],
    times: FloatArray,
    counts: IntArray,
    slots: IntArray,
    state: IntArray,
    clock: FloatArray,
    logs: tuple[FloatArray, FloatArray, CountArray, FloatArray, CountArray, IntArray],
) -> int:
    """Plan and commit until every request is done (``DONE``), an output buffer is
    nearly full (``FLUSH``) or the Python path is needed (``UNSUPPORTED``).

    ``prices``: ``sim.cost.tabulate.tabulate``'s arrays; the other arrays' rows and
    slots are named above (requests in submission order). ``logs``: step ends,
    segment starts and counts, queue sample times and counts, and the requests in
    the order they finish, filled from the counts in ``state``.
    """
    cost, tables, layout = prices
    clock_s, ready_s = times[CLOCK_S], times[READY_S]
    first_scheduled_s, finish_s = times[FIRST_SCHEDULED_S], times[FINISH_S]
    prompt, comp, gen = counts[PROMPT], counts[COMP], counts[GEN]
    blocks, lookups = counts[BLOCKS], counts[LOOKUPS]
    running, held = slots[RUNNING], slots[HELD]
    sched_r, sched_new = slots[SCHED_R], slots[SCHED_NEW]
    ends, segment_start_s, series_time_s, series_counts = logs[0], logs[1], logs[3], logs[4]
    max_num_seqs = settings[MAX_NUM_SEQS]
    max_num_batched_tokens = settings[MAX_NUM_BATCHED_TOKENS]
    cap, chunked, bs = settings[TOKEN_CAP], settings[CHUNKED], settings[BLOCK_SIZE]
    num_blocks, caches_prefixes = settings[NUM_BLOCKS], settings[CACHES_PREFIXES]
    max_run = settings[MAX_RUN_STEPS]
    async_scheduling = settings[ASYNC_SCHEDULING] != 0
    reserve_full_sequence = settings[RESERVE_FULL_SEQUENCE] != 0
    lag = 2 if async_scheduling else 1  # steps a run goes on past the one an arrival lands in
    while True:
        if (
            state[NUM_ENDS] + max_run + 1 > ends.shape[0]
            or state[NUM_SEGMENTS] + 2 > segment_start_s.shape[0]
            or state[NUM_PLANS] + 1 > series_time_s.shape[0]
        ):
            return FLUSH
        now = clock[LAST_END]
        taken = state[NUM_TAKEN]
        if state[STARTED] and clock_s[taken] <= now:  # Feed.take: ready_s is clock_s
            while clock_s[taken] <= now:
                taken += 1
            state[NUM_TAKEN] = taken
        state[STARTED] = 1
        # Async scheduling: requests ready after the last step's start stay hidden
        # (EngineCore.schedule); ready times grow along the queue, so a suffix.
        visible = taken
        if state[VISIBLE]:
            until_s = clock[VISIBLE_UNTIL]
            while visible > state[WAIT_HEAD] and clock_s[visible - 1] > until_s:
                visible -= 1
            state[VISIBLE] = 0
        num_held = state[NUM_HELD]
        # -- Continuous.schedule: the running loop (no preemption here) --------------
        budget = max_num_batched_tokens
        num_sched = 0
        num_running = state[NUM_RUNNING]
        free = state[NUM_FREE]
        i = 0
        while i < num_running and budget > 0:
            r = running[i]
            computed = comp[r]
            wanted = prompt[r] + gen[r] - computed
            if cap > 0 and wanted > cap:
                wanted = cap
            num_new = wanted if wanted < budget else budget
            target = computed + num_new
            if target > blocks[r] * bs:
                short = -(-target // bs) - blocks[r]
                if short > free:
                    return UNSUPPORTED  # a preemption
                if short > 0:
                    free -= short
                    blocks[r] += short
            sched_r[num_sched] = r
            sched_new[num_sched] = num_new
            num_sched += 1
            budget -= num_new
            i += 1
        stable = num_sched == num_running
        # -- Continuous._admit ----------------------------------------------------
        blocked = _EMPTY
        head = state[WAIT_HEAD]
        while head < visible:
            if num_running >= max_num_seqs - num_held:
                blocked = _SEQS
                break
            r = head
            wanted = prompt[r] + gen[r] - comp[r]
            if cap > 0 and wanted > cap:
                wanted = cap
            if budget == 0 or (wanted > budget and chunked == 0):
                blocked = _BUDGET
                break
            num_new = wanted if wanted < budget else budget
            missing = -(-(comp[r] + num_new) // bs) - blocks[r]
            if missing < 0:
                missing = 0
            # vLLM >= 0.19: the whole sequence must fit, which covers the chunk.
            short = -(-(prompt[r] + gen[r]) // bs) - blocks[r] if reserve_full_sequence else missing
            if short > free:
                blocked = _KV
                break
            head += 1
            free -= missing
            blocks[r] += missing
            if caches_prefixes and comp[r] == 0:
                lookups[r] += 1
            running[num_running] = r
            num_running += 1
            sched_r[num_sched] = r
            sched_new[num_sched] = num_new
            num_sched += 1
            budget -= num_new
            if first_scheduled_s[r] != first_scheduled_s[r]:  # NaN: not yet
                first_scheduled_s[r] = now
        state[WAIT_HEAD] = head
        state[NUM_RUNNING] = num_running
        # Hidden arrivals, and held slots if anyone waits: the plan cannot promise a run.
        deferred = async_scheduling and (visible < taken or (num_held > 0 and head < visible))
        free_at_plan = free  # what the policy saw (held blocks still out)
        for i in range(num_held):  # freed once the plan under way is made
            free += blocks[held[i]]
            blocks[held[i]] = 0
        state[NUM_HELD] = 0
        state[NUM_FREE] = free
        # -- EngineCore.schedule samples the queue ------------------------------------
        plan = state[NUM_PLANS]
        series_time_s[plan] = now
        series_counts[plan, 0] = taken - head
        series_counts[plan, 1] = num_running
        series_counts[plan, 2] = num_blocks - free
        state[NUM_PLANS] = plan + 1
        if num_sched == 0:
            if deferred:  # vLLM plans again once step N's output is in
                continue
            # FedReplica._sleep until the next submission
            next_clock_s = clock_s[taken]
            if next_clock_s == np.inf:
                return DONE
            clock[LAST_END] = next_clock_s  # the plan is made at the submission's time
            continue
        # -- Continuous._finish_plan: the step's price, and the run it allows --------
        first_s, min_left, run_context, run_longest, run_shortest = first_step(
            cost, tables, layout, counts, slots, num_sched, max_run
        )
        if first_s != first_s:
            return UNSUPPORTED  # past a kernel table's last point
        num_steps = 1
        interruptible = True
        if stable and blocked != _BUDGET and min_left >= 1 and not deferred:
            num_steps = 1 + steps_within_pool(
                bs, free_at_plan, comp, blocks, sched_r, sched_new, num_sched, min_left
            )
            interruptible = (
                blocked == _EMPTY
                and num_sched < max_num_seqs
                and num_sched < max_num_batched_tokens
            )
        at = state[NUM_ENDS]
        if num_steps == 1:
            ends[at] = now + (first_s + 0.0)  # + the plan's extra_s (none here)
            num_ends = 1
        else:
            stop_s = ready_s[taken] if interruptible else np.inf  # the replica's horizon
            num_ends = decode_ends(
                cost,
                tables,
                layout,
                ends,
                at,
                now + (first_s + 0.0),
                num_sched,
                run_context,
                run_longest,
                run_shortest,
                num_steps - 1,
                stop_s,
                lag,
            )
        last_end_s = ends[at + num_ends - 1]
        if last_end_s != last_end_s:
            return UNSUPPORTED  # past a kernel table's last point
        status = commit(
            counts, times, slots, num_sched, async_scheduling, state, logs, at, num_ends, now, bs
        )
        if status != DONE:
            return status
        clock[LAST_END] = last_end_s
        if async_scheduling:  # the next plan was made (in vLLM) when the last step began
            clock[VISIBLE_UNTIL] = ends[at + num_ends - 2] if num_ends > 1 else now
            state[VISIBLE] = 1
        if state[NUM_RUNNING] != num_running:  # EngineCore.remove_finished, in order
            kept = 0
            for i in range(num_running):
                r = running[i]
                if finish_s[r] != finish_s[r]:
                    running[kept] = r
                    kept += 1


def drop_stale_cache(module: Path, sources: tuple[Path, ...]) -> None:
    """Drop ``module``'s numba cache if ``sources`` changed since it was written.

    numba keys a cache by its own file's timestamp only, but ``run`` freezes
    ``tabulate``'s constants and calls ``price``'s functions and ``engine_cpu``'s
    ``with_cpu_s``: an edit there alone would leave a stale, silently wrong loop. A
    digest of ``sources`` beside the cache tells (nothing is kept where the folder is
    read-only: an installed package changes only on reinstall)."""
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    cache = module.parent / "__pycache__"
    stamp = cache / f"{module.stem}.sources.sha256"
    try:
        if stamp.exists() and stamp.read_text() == digest:
            return
        for stale in cache.glob(f"{module.stem}.*.nb[ic]"):
            stale.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # read-only install: numba then caches in its user folder
        return


# ``price``'s functions the loop reaches, compiled as they are written there.
PRICE = (
    "cell", "past", "axis_cell", "grid_2d", "grid_4d", "grids_of", "corners", "grid_point",
    "corners_4d", "grid_point_4d", "bucket_alpha", "skew_alpha", "blend_s", "skewed_decode_s",
    "decode_attention_s", "prefill_chunk", "prefill_attention_s", "mixed_attention_s",
    "clamped_point_4d", "mixed_decode_factor", "attention_s",
)  # fmt: skip


# The pieces ``run`` calls, compiled as twins (``compile_run``): ``run_ends``'s,
# shared with the Python path's decode runs, then the loop's own.
RUN_ENDS_PIECES = ("kernel_per_step_s", "decode_ends")
PIECES = ("_missing", "step_s", "first_step", "steps_within_pool", "commit")
# What ``compile_run`` compiled, by name: every piece's twin, ``price``'s and ``run``.
COMPILED: dict[str, Any] = {}


def compile_run() -> Any:
    """``run`` compiled by numba and cached on disk, so only a machine's first run
    pays the compilation (~5 s). Numba reads a caller's globals when it compiles
    it, so each function is compiled as a twin, its code over a copy of its
    module's globals holding the compiled twins (``price``'s: ``bisect_*`` are
    ``search_*``), all kept in ``COMPILED``. The modules keep their plain functions:
    ``KernelCost`` calls ``price``'s, the Python path's decode runs ``run_ends``'."""
    # Imported here: numba compiles on first use (seconds): only a run on the compiled path pays.
    import numba

    here = Path(__file__).resolve()
    cost = here.parents[2] / "cost"
    shared = here.parents[1] / "run_ends.py"
    sources = (cost / "tabulate.py", cost / "kernels" / "price.py", cost / "engine_cpu.py", shared)
    for module in (here, shared):  # (each caches its own functions' twins)
        drop_stale_cache(module, sources)
    jit = numba.njit(cache=True, nogil=True)
    namespace = dict(vars(price))
    namespace["bisect_right"] = jit(price.search_right)
    namespace["bisect_left"] = jit(price.search_left)
    for name in PRICE:
        namespace[name] = COMPILED[name] = jit(_twin(namespace[name], namespace))
    COMPILED["with_cpu_s"] = jit(with_cpu_s)  # (its globals: engine_cpu's slot numbers)
    for names_of, names in ((vars(run_ends), RUN_ENDS_PIECES), (globals(), (*PIECES, "run"))):
        own = {**names_of, **COMPILED}
        for name in names:
            own[name] = COMPILED[name] = jit(_twin(own[name], own))
    return COMPILED["run"]


def _twin(function: Any, namespace: dict[str, Any]) -> types.FunctionType:
    """``function``'s code over ``namespace`` as its globals."""
    return types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__
    )
