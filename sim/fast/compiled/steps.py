"""The compiled loop's pieces: a roofline step's price, a run's ends, its room in
the KV pool, and the commit of a plan's steps (``sim.fast.compiled.loop``).

Each mirrors a Python function of the engine, the same operations in the same
order, so that the compiled loop's floats are the Python path's to the bit.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sim.fast.compiled.layout import (
    DONE,
    NUM_DONE,
    NUM_ENDS,
    NUM_FREE,
    NUM_HELD,
    NUM_RUNNING,
    NUM_SEGMENTS,
    NUM_STEPS,
    OVERHEAD_S,
    S_PER_DENSE_TOKEN,
    S_PER_KV_TOKEN,
    S_PER_PAIR,
    UNSUPPORTED,
    WEIGHT_S,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def step_s(
    cost: FloatArray, prefill_tokens: int, pairs: int, kv_read: int, decode_seqs: int, context: int
) -> float:
    """``RooflineCost.step_s`` of a step shape, the same operations in its order."""
    tokens = prefill_tokens + decode_seqs
    if tokens == 0:
        return 0.0
    compute = cost[S_PER_DENSE_TOKEN] * tokens + cost[S_PER_PAIR] * (pairs + context)
    memory = cost[WEIGHT_S] + cost[S_PER_KV_TOKEN] * (kv_read + context + tokens)
    return cost[OVERHEAD_S] + (compute if compute > memory else memory)


def first_step(
    cost: FloatArray,
    prompt: IntArray,
    output: IntArray,
    comp: IntArray,
    gen: IntArray,
    sched_r: IntArray,
    sched_new: IntArray,
    num_sched: int,
    max_run: int,
) -> tuple[float, int, int]:
    """The plan's first step (``Continuous._finish_plan``): its price, how many decode
    steps of the batch may follow it before the first finish (0 if a request is still
    prefilling after it), and their summed context in the first of them."""
    prefill_tokens = pairs = kv_read = decode_seqs = decode_context = 0
    min_left = max_run
    run_context = 0
    all_emit = True
    for j in range(num_sched):
        r = sched_r[j]
        num_new = sched_new[j]
        cached = comp[r]
        generated = gen[r]
        computed = cached + num_new
        if num_new == 1 and generated > 0:
            decode_seqs += 1
            decode_context += computed
        else:
            prefill_tokens += num_new
            pairs += num_new * cached + num_new * (num_new + 1) // 2
            kv_read += computed
        if computed != prompt[r] + generated:
            all_emit = False  # still prefilling after this step
        else:
            left = output[r] - generated - 1
            if left < min_left:
                min_left = left
            run_context += computed + 1
    price_s = step_s(cost, prefill_tokens, pairs, kv_read, decode_seqs, decode_context)
    return price_s, (min_left if all_emit else 0), run_context


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
    """``sim.engine.scheduler.steps_within_pool`` over the scheduled rows."""
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


def decode_ends(
    cost: FloatArray,
    out: FloatArray,
    at: int,
    first_end_s: float,
    num_seqs: int,
    context_tokens: int,
    num_decode_steps: int,
    stop_s: float,
    num_after: int,
) -> int:
    """``sim.cost.base.run_ends_for`` of a ``RooflineCost``, written into ``out``
    from ``at``; returns how many ends (the first step's included)."""
    cut = num_after - 1  # steps kept after the first to end at or after stop_s
    left = num_decode_steps if first_end_s < stop_s else min(num_decode_steps, cut)
    dense_s = cost[S_PER_DENSE_TOKEN] * num_seqs
    pair_s, weight_s = cost[S_PER_PAIR], cost[WEIGHT_S]
    kv_s, overhead_s = cost[S_PER_KV_TOKEN], cost[OVERHEAD_S]
    end = first_end_s
    out[at] = end
    count = 1
    context = context_tokens
    while left > 0:
        compute = dense_s + pair_s * context
        memory = weight_s + kv_s * (context + num_seqs)
        end += overhead_s + (compute if compute > memory else memory)
        out[at + count] = end
        count += 1
        context += num_seqs
        left -= 1
        if end >= stop_s:
            left = min(left, cut)
            stop_s = np.inf
    return count


def commit(
    prompt: IntArray,
    output: IntArray,
    comp: IntArray,
    gen: IntArray,
    blocks: IntArray,
    last_step: IntArray,
    first_token_s: FloatArray,
    finish_s: FloatArray,
    sched_r: IntArray,
    sched_new: IntArray,
    num_sched: int,
    held: IntArray,
    pipelined: bool,
    state: IntArray,
    ends: FloatArray,
    at: int,
    num_ends: int,
    start_s: float,
    bs: int,
    segment_start_s: FloatArray,
    segment_counts: npt.NDArray[np.int32],
    done_order: IntArray,
) -> int:
    """``EngineCore.commit`` of the plan's step and the ``num_ends - 1`` decode steps
    after it (``EngineCore._commit_one`` / ``_commit_run``), finishes included."""
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
        if pipelined:  # its slot and blocks count for the plan already under way
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
