"""The compiled twin of one fed replica's loop (``sim.fast.compiled.path`` runs it).

One function, ``run``, plays what ``Replica._run``, ``EngineCore`` and
``Continuous`` do for one replica taking an open loop's requests from a feed
(alone, or its turns behind a round-robin router), under a roofline cost, with
a KV pool whose requests share no prefix (so only counts matter): the same plans at the same
times, the same step ends summed in the same order, the same records, step
log and queue samples, to the bit (``tests/properties/test_compiled_equivalence.py``
compares them with the Python path on random workloads). It walks the whole running batch
at every plan (the Python path's reference loop, not its decode cohort: that
is the Python path's way of not paying for it, and here it costs nothing).

Everything it cannot play stops it, and the Python path runs the whole
workload instead: a KV pool too small for the running batch (preemption), and
a token that does not follow its request's previous one by one step (which
plain continuous batching only causes by preempting: a safety net). Those
answer ``UNSUPPORTED``.

All state lives in the arrays passed in, so a call may stop when an output
buffer is nearly full (``FLUSH``), and the next call goes on where it left
off: the caller empties the buffers between calls (and ticks its progress bar).

The function is plain Python that numba compiles when it is installed; it
runs uncompiled, slowly, as well (the tests do so where numba is missing).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sim.fast.compiled import steps
from sim.fast.compiled.layout import (
    ASYNC,
    BLOCK_SIZE,
    CACHES_PREFIXES,
    CHUNKED,
    DONE,
    FLUSH,
    LAST_END,
    MAX_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    MAX_RUN_STEPS,
    NUM_BLOCKS,
    NUM_ENDS,
    NUM_FREE,
    NUM_HELD,
    NUM_PLANS,
    NUM_RUNNING,
    NUM_SEGMENTS,
    NUM_TAKEN,
    STARTED,
    TOKEN_CAP,
    UNSUPPORTED,
    VISIBLE,
    VISIBLE_UNTIL,
    WAIT_HEAD,
)
from sim.fast.compiled.steps import (
    FloatArray,
    IntArray,
    commit,
    decode_ends,
    first_step,
    steps_within_pool,
)

# What stopped admission (Continuous._admit's answer).
_EMPTY, _SEQS, _BUDGET, _KV = 0, 1, 2, 3


def run(
    settings: IntArray,
    cost: FloatArray,
    clock_s: FloatArray,
    ready_s: FloatArray,
    prompt: IntArray,
    output: IntArray,
    comp: IntArray,
    gen: IntArray,
    blocks: IntArray,
    lookups: IntArray,
    last_step: IntArray,
    first_scheduled_s: FloatArray,
    first_token_s: FloatArray,
    finish_s: FloatArray,
    running: IntArray,
    sched_r: IntArray,
    sched_new: IntArray,
    held: IntArray,
    state: IntArray,
    clock: FloatArray,
    ends: FloatArray,
    segment_start_s: FloatArray,
    segment_counts: npt.NDArray[np.int32],
    series_time_s: FloatArray,
    series_counts: npt.NDArray[np.int32],
    done_order: IntArray,
) -> int:
    """Plan and commit until every request is done (``DONE``), an output buffer is
    nearly full (``FLUSH``) or the Python path is needed (``UNSUPPORTED``).

    Requests are indexed in submission order (``clock_s``, ``ready_s``: the feed's
    times, inf last). Once a request has a first token, ``last_step`` is the step
    of its latest. Logs go to the buffers from the
    counts in ``state``; ``done_order`` lists requests as they finish.
    """
    max_num_seqs, max_batched = settings[MAX_NUM_SEQS], settings[MAX_BATCHED_TOKENS]
    cap, chunked, bs = settings[TOKEN_CAP], settings[CHUNKED], settings[BLOCK_SIZE]
    num_blocks, caches_prefixes = settings[NUM_BLOCKS], settings[CACHES_PREFIXES]
    max_run = settings[MAX_RUN_STEPS]
    pipelined = settings[ASYNC] != 0
    lag = 2 if pipelined else 1  # steps a run goes on past the one an arrival lands in
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
        budget = max_batched
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
            if missing > free:
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
        deferred = pipelined and (visible < taken or (num_held > 0 and head < visible))
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
            # Replica._sleep until the next submission
            next_clock_s = clock_s[taken]
            if next_clock_s == np.inf:
                return DONE
            clock[LAST_END] = next_clock_s  # the plan is made at the submission's time
            continue
        # -- Continuous._finish_plan: the step's price, and the run it allows --------
        first_s, min_left, run_context = first_step(
            cost, prompt, output, comp, gen, sched_r, sched_new, num_sched, max_run
        )
        num_steps = 1
        interruptible = True
        if stable and blocked != _BUDGET and min_left >= 1 and not deferred:
            num_steps = 1 + steps_within_pool(
                bs, free_at_plan, comp, blocks, sched_r, sched_new, num_sched, min_left
            )
            interruptible = (
                blocked == _EMPTY and num_sched < max_num_seqs and num_sched < max_batched
            )
        at = state[NUM_ENDS]
        if num_steps == 1:
            ends[at] = now + (first_s + 0.0)  # + the plan's extra_s (none here)
            num_ends = 1
        else:
            stop_s = ready_s[taken] if interruptible else np.inf  # the replica's horizon
            num_ends = decode_ends(
                cost,
                ends,
                at,
                now + (first_s + 0.0),
                num_sched,
                run_context,
                num_steps - 1,
                stop_s,
                lag,
            )
        last_end_s = ends[at + num_ends - 1]
        status = commit(
            prompt,
            output,
            comp,
            gen,
            blocks,
            last_step,
            first_token_s,
            finish_s,
            sched_r,
            sched_new,
            num_sched,
            held,
            pipelined,
            state,
            ends,
            at,
            num_ends,
            now,
            bs,
            segment_start_s,
            segment_counts,
            done_order,
        )
        if status != DONE:
            return status
        clock[LAST_END] = last_end_s
        if pipelined:  # the next plan was made (in vLLM) when the last step began
            clock[VISIBLE_UNTIL] = ends[at + num_ends - 2] if num_ends > 1 else now
            state[VISIBLE] = 1
        if state[NUM_RUNNING] != num_running:  # EngineCore.remove_finished, in order
            kept = 0
            for i in range(num_running):
                r = running[i]
                if finish_s[r] != finish_s[r]:
                    running[kept] = r
                    kept += 1


def compile_run() -> Any:
    """``run`` compiled by numba, cached on disk beside this file (or in numba's
    user cache), so that only the first run on a machine pays the compilation
    (~5 s). Its helpers are compiled in place first: ``run`` and
    ``steps_within_pool`` call them through their modules' globals, which numba
    reads when it compiles a caller."""
    import numba

    jit = numba.njit(cache=True, nogil=True)
    for name in ("_missing", "step_s", "first_step", "steps_within_pool", "decode_ends", "commit"):
        compiled = jit(getattr(steps, name))
        setattr(steps, name, compiled)
        if name in globals():
            globals()[name] = compiled
    return jit(run)
