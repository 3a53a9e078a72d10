"""Attention's price from kernel tables laid out flat: written once, run twice.

``KernelCost`` calls these functions on plain lists (its grids and skew fit,
flattened once: ``KernelCost.price_tables``); the compiled loop compiles the very
same functions with numba and calls them on ``sim.cost.tabulate``'s arrays. One
copy of the arithmetic, so the two paths agree to the bit. Arguments: ``tables``
(floats), ``layout`` (ints: the slots below), ``grids`` (``grids_of``: each grid's
slots read once), numbers and tuples; ``bisect_*`` are the standard library's in
Python and ``search_*`` under numba (``compile_run`` swaps them in).

A 2-D grid at ``layout[g:]`` is ``GRID_SIZE`` ints: each axis's offset and length
in ``tables``, the values' offset, each axis's stride (0 for an axis of one point);
a 4-D one (``MIXED_GRID``) likewise with four axes. A lookup does ``Grid``'s
operations in their order. Past an axis's last point the Python path
(``layout[EXTRAPOLATES]``) scales proportionally, as ``Grid`` does, and notes the
lookup (``PAST``) for ``KernelCost`` to warn about; the loop gets NaN and hands
the run over.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import MutableSequence, Sequence
from typing import Any

# Kernel tables (``layout``, by index). The loop's per-token tables, indexed by a
# step's tokens T (0 to layout[NUM_T] - 1): KernelCost.dense_layer_s(T); the
# memory-bound per-step ops of T tokens, (0.0 + embedding) + final norm; the
# embedding's all-reduce; the pipeline stages' transfers. Per-sequence tables,
# indexed by a step's sequences S: the sampler's memory-bound op; the LM head's
# GEMM. Then two 2-D grids (prefill attention by batch and length, decode
# attention by batch and KV length), each GRID_SIZE ints (the module docstring).
KIND, NUM_LAYERS, HAS_MEMORY, HAS_PIPELINE, NUM_T, NUM_S = 0, 1, 2, 3, 4, 5
DENSE, EMBED_NORM, ALLREDUCE, PIPELINE, SAMPLER, LM_HEAD = 6, 7, 8, 9, 10, 11
GRID_SIZE = 7
PREFILL_GRID = 12
DECODE_GRID = PREFILL_GRID + GRID_SIZE
# A per-layer profile (LLMServingSim's route): a per-token table of its once-per-step
# ops (0.0 without one); the LM head and sampler as per-sequence tables
# (NUM_LM_OPS 2; 0: the LM head's GEMM alone, at LM_HEAD); the tokens of a decode's
# context outside its KV axis; attention as equal prefill chunks each looked up
# (PROFILE_ATTENTION); the 4-D mixed-attention grid (HAS_MIXED; MIXED_GRID: four
# (offset, length) axes, the values' offset, four strides); the skew fit (HAS_SKEW:
# its prefill chunks, the four bucket axes as (offset, length), then its alphas
# on that lattice, 0 where it has none, and their five strides). FA2 tables without
# a mixed lattice: the decodes' factor in the varlen kernel (HAS_MIXED_FACTOR,
# sim.cost.kernels.mixed_factor), a 4-D grid in MIXED_GRID's place.
PROFILE_STEP, NUM_LM_OPS, LM_SAMPLER, DECODE_HISTORY, PROFILE_ATTENTION = 26, 27, 28, 29, 30
HAS_MIXED, MIXED_GRID = 31, 32
HAS_SKEW, SKEW_CHUNKS, NUM_SKEW_CHUNKS, SKEW_EDGES = 45, 46, 47, 48
SKEW_ALPHAS, SKEW_STRIDES = 56, 57
HAS_MIXED_FACTOR = 62
# Under tensor parallelism, on every route: the logits' all-gather before sampling,
# a per-sequence table (KernelCost.logits_all_gather_s; 0 on one GPU).
LOGITS = 63
# The GPU's price: a roofline's constants, or kernel tables (``layout[KIND]``).
ROOFLINE, KERNELS = 0, 1
# Past a grid's last point: 1 extrapolate and note it (KernelCost), 0 NaN (the loop).
# The notes: how many, then (grid, axis) pairs, the coordinates at tables[PAST_X:].
EXTRAPOLATES, NUM_PAST, PAST_X, PAST = 64, 65, 66, 67
MAX_PAST = 16  # notes kept per call (a step's lookups pass at most 10 axes)
LAYOUT_SIZE = PAST + 2 * MAX_PAST

NAN = float("nan")  # (a module constant: numba freezes it)
# ``tables``: a list (KernelCost) or a float64 array (the loop); ``layout`` likewise.
Tables = Any
Layout = Any
# A grid's slots read out of ``layout`` once, ``g`` first (``grid_2d``, ``grid_4d``).
Grid2 = tuple[int, int, int, int, int, int, int, int]
Grid4 = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int]
Grids = tuple[Grid2, Grid2, Grid4]


def search_right(values: Sequence[float], x: float, lo: int, hi: int) -> int:
    """``bisect.bisect_right(values, x, lo, hi)``, in numba's reach."""
    while lo < hi:
        mid = (lo + hi) // 2
        if x < values[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def search_left(values: Sequence[float], x: float, lo: int, hi: int) -> int:
    """``bisect.bisect_left(values, x, lo, hi)``, in numba's reach."""
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def prefill_chunk(num_seqs: int, num_tokens: int, kv_read_tokens: int) -> tuple[float, float]:
    """(chunk, cached) tokens of one of ``num_seqs`` equal chunks.

    A step shape keeps only sums, so its prefill is priced as ``num_seqs``
    equal chunks of ``num_tokens / num_seqs`` new tokens after
    ``kv_read_tokens / num_seqs - chunk`` cached ones.
    """
    chunk = num_tokens / num_seqs
    return chunk, max(kv_read_tokens / num_seqs - chunk, 0.0)


def cell(tables: Tables, at: int, n: int, x: float) -> tuple[int, float]:
    """``x``'s cell on the axis ``tables[at:at + n]`` (clipped to it): lower corner
    and the upper corner's weight (an axis of one point: 0, weight 0)."""
    if n == 1:
        return 0, 0.0
    top = at + n - 2  # the last cell's lower corner
    first, last = tables[at], tables[top + 1]
    clipped = last if x > last else (first if x < first else x)
    low = bisect_right(tables, clipped, at, top + 2) - 1
    low = at if low < at else (top if low > top else low)
    return low - at, (clipped - tables[low]) / (tables[low + 1] - tables[low])


def past(tables: Tables, layout: Layout, g: int, d: int, x: float, scale: float) -> float:
    """``scale`` times the factor of a lookup at ``x`` past axis ``d``'s last point of
    the grid at ``layout[g:]`` (``Grid``'s operations), noted for the caller's
    warning; NaN where the caller does not extrapolate."""
    if not layout[EXTRAPOLATES]:
        return NAN
    k = layout[NUM_PAST]
    if k < MAX_PAST:
        layout[PAST + 2 * k] = g
        layout[PAST + 2 * k + 1] = d
        tables[layout[PAST_X] + k] = x
        layout[NUM_PAST] = k + 1
    return scale * x / tables[layout[g + 2 * d] + layout[g + 2 * d + 1] - 1]


def axis_cell(
    tables: Tables, layout: Layout, g: int, d: int, at: int, n: int, x: float, scale: float
) -> tuple[int, float, float]:
    """One axis of a lookup in the grid at ``layout[g:]``: ``x``'s ``cell`` on axis ``d``
    (``tables[at:at + n]``), and ``scale`` times its factor if ``x`` is past the axis's
    last point (``past``; ``past`` writes only its notes, so the cells read the same)."""
    if x > tables[at + n - 1]:
        scale = past(tables, layout, g, d, x, scale)
    low, w = cell(tables, at, n, x)
    return low, w, scale


def grid_2d(layout: Layout, g: int) -> Grid2:
    """The 2-D grid at ``layout[g:]`` as ``g`` then its ``GRID_SIZE`` slots (the module
    docstring), read once: a tuple's unpacking costs the Python path's lookup less
    than reading each slot from ``layout`` at ``g + k``."""
    return (g, layout[g], layout[g + 1], layout[g + 2], layout[g + 3], layout[g + 4],
            layout[g + 5], layout[g + 6])  # fmt: skip


def grid_4d(layout: Layout, g: int) -> Grid4:
    """The 4-D grid at ``layout[g:]`` (``MIXED_GRID``'s layout) as ``g`` then its 13
    slots, as ``grid_2d``."""
    return (g, layout[g], layout[g + 1], layout[g + 2], layout[g + 3], layout[g + 4],
            layout[g + 5], layout[g + 6], layout[g + 7], layout[g + 8], layout[g + 9],
            layout[g + 10], layout[g + 11], layout[g + 12])  # fmt: skip


def grids_of(layout: Layout) -> tuple[Grid2, Grid2, Grid4]:
    """The prefill, decode and mixed grids (``grid_2d``, ``grid_4d``): the ``grids``
    every price below takes beside ``tables`` and ``layout``."""
    return grid_2d(layout, PREFILL_GRID), grid_2d(layout, DECODE_GRID), grid_4d(layout, MIXED_GRID)


def corners(
    tables: Tables, o: int, s0: int, s1: int, low0: int, w0: float, low1: int, w1: float
) -> float:
    """The sum over the four corners of a 2-D cell of a grid whose values start at
    ``tables[o]``, with strides ``s0`` and ``s1``."""
    b0, b1 = 1.0 - w0, 1.0 - w1
    o = o + low0 * s0 + low1 * s1
    result = 0.0 + b0 * b1 * tables[o]
    result = result + w0 * b1 * tables[o + s0]
    result = result + b0 * w1 * tables[o + s1]
    return result + w0 * w1 * tables[o + s0 + s1]


def grid_point(tables: Tables, layout: Layout, grid: Grid2, x0: float, x1: float = 0.0) -> float:
    """The 2-D ``grid`` (``grid_2d``) at (``x0``, ``x1``): ``Grid.__call__``, scaled past
    an axis's last point (``past``)."""
    g, a0, n0, a1, n1, o, s0, s1 = grid
    low0, w0, scale = axis_cell(tables, layout, g, 0, a0, n0, x0, 1.0)
    low1, w1, scale = axis_cell(tables, layout, g, 1, a1, n1, x1, scale)
    return corners(tables, o, s0, s1, low0, w0, low1, w1) * scale


def corners_4d(
    values: Tables, o: int, s0: int, s1: int, s2: int, s3: int,
    w0: float, w1: float, w2: float, w3: float,
) -> float:  # fmt: skip
    """The sum over the 16 corners of a 4-axis cell from ``values[o]`` (upper-corner
    weights ``w``, strides ``s``), as ``Grid._lookup`` adds them (``Grid``'s own
    unrolled 4-D lookup runs it too)."""
    a0, a1, a2, a3 = 1.0 - w0, 1.0 - w1, 1.0 - w2, 1.0 - w3
    # Corner weights are ((u0 * u1) * u2) * u3 (Grid._lookup's product order);
    # sharing the partial products changes no bit.
    b00, b10, b01, b11 = a0 * a1, w0 * a1, a0 * w1, w0 * w1
    c0, c1, c2, c3 = b00 * a2, b10 * a2, b01 * a2, b11 * a2
    c4, c5, c6, c7 = b00 * w2, b10 * w2, b01 * w2, b11 * w2
    o1, o2, o3 = o + s0, o + s1, o + s0 + s1
    o4, o5, o6, o7 = o + s2, o1 + s2, o2 + s2, o3 + s2
    result = 0.0 + c0 * a3 * values[o]
    result = result + c1 * a3 * values[o1]
    result = result + c2 * a3 * values[o2]
    result = result + c3 * a3 * values[o3]
    result = result + c4 * a3 * values[o4]
    result = result + c5 * a3 * values[o5]
    result = result + c6 * a3 * values[o6]
    result = result + c7 * a3 * values[o7]
    result = result + c0 * w3 * values[o + s3]
    result = result + c1 * w3 * values[o1 + s3]
    result = result + c2 * w3 * values[o2 + s3]
    result = result + c3 * w3 * values[o3 + s3]
    result = result + c4 * w3 * values[o4 + s3]
    result = result + c5 * w3 * values[o5 + s3]
    result = result + c6 * w3 * values[o6 + s3]
    return result + c7 * w3 * values[o7 + s3]


def grid_point_4d(
    tables: Tables, layout: Layout, grid: Grid4, x0: float, x1: float, x2: float, x3: float = 0.0
) -> float:
    """The 4-D ``grid`` (``grid_4d``) at one point, as ``grid_point``."""
    g, a0, n0, a1, n1, a2, n2, a3, n3, o, s0, s1, s2, s3 = grid
    low0, w0, scale = axis_cell(tables, layout, g, 0, a0, n0, x0, 1.0)
    low1, w1, scale = axis_cell(tables, layout, g, 1, a1, n1, x1, scale)
    low2, w2, scale = axis_cell(tables, layout, g, 2, a2, n2, x2, scale)
    low3, w3, scale = axis_cell(tables, layout, g, 3, a3, n3, x3, scale)
    o = o + low0 * s0 + low1 * s1 + low2 * s2 + low3 * s3
    return corners_4d(tables, o, s0, s1, s2, s3, w0, w1, w2, w3) * scale


def skew_alpha(
    tables: Tables,
    layout: Layout,
    chunk: float,
    kv_prefill: float,
    num_decode_seqs: int,
    kv_mean: float,
    kv_max: int,
    kv_min: int,
) -> float:
    """The skew fit's alpha for decodes of mean, longest and shortest KV (cached
    tokens) beside a prefill chunk (0: none) after ``kv_prefill``: its bucket's
    (``bucket_alpha``); 0 with no fit, one decode, or none longer than the mean."""
    if not layout[HAS_SKEW] or num_decode_seqs < 2 or kv_max <= kv_mean:
        return 0.0
    rate = (kv_mean - kv_min) / (kv_max - kv_min)
    return bucket_alpha(tables, layout, chunk, kv_prefill, num_decode_seqs, rate, kv_max)


def bucket_alpha(
    tables: Tables, layout: Layout, chunk: float, kv_prefill: float, num_decode_seqs: int,
    rate: float, kv_max: float,
) -> float:  # fmt: skip
    """The fit's alpha of the bucket of (the prefill chunk exactly; the decode count,
    skew ``rate`` clipped to [0, 1], longest KV and cached prefill each by
    ``bisect_left``, past the last edge in the last bucket), 0 where none."""
    chunks, num_chunks = layout[SKEW_CHUNKS], layout[NUM_SKEW_CHUNKS]
    at = -1
    for i in range(num_chunks):
        if tables[chunks + i] == chunk:
            at = i
    if at < 0:
        return 0.0
    rate = min(max(rate, 0.0), 1.0)
    values = (float(num_decode_seqs), rate, float(kv_max), kv_prefill)
    o = layout[SKEW_ALPHAS] + at * layout[SKEW_STRIDES]
    for d in range(4):
        edges, n = layout[SKEW_EDGES + 2 * d], layout[SKEW_EDGES + 2 * d + 1]
        index = bisect_left(tables, values[d], edges, edges + n) - edges
        o += (index if index < n - 1 else n - 1) * layout[SKEW_STRIDES + 1 + d]
    return float(tables[o])


def blend_s(mean_s: float, max_s: float, alpha: float) -> float:
    """``mean_s + alpha * (max_s - mean_s)``; ``mean_s`` where the max is no slower."""
    return mean_s + alpha * (max_s - mean_s) if max_s > mean_s else mean_s


def skewed_decode_s(
    tables: Tables, layout: Layout, decode: Grid2, mean_s: float, num_seqs: int, kv: float,
    max_context: int, min_context: int,
) -> float:  # fmt: skip
    """Pure decode attention ``mean_s`` (at mean KV ``kv``) with the skew term
    (``decode``: the decode grid, ``grids[1]``)."""
    history = layout[DECODE_HISTORY]
    kv_max = max_context - history
    alpha = skew_alpha(tables, layout, 0.0, 0.0, num_seqs, kv, kv_max, min_context - history)
    if alpha == 0.0:
        return mean_s
    max_s = grid_point(tables, layout, decode, float(num_seqs), float(kv_max))
    if max_s != max_s:
        return max_s
    return blend_s(mean_s, max_s, alpha)


def decode_attention_s(
    tables: Tables, layout: Layout, grids: Grids, num_seqs: int, context: int, max_context: int,
    min_context: int,
) -> float:  # fmt: skip
    """One layer's attention for ``num_seqs`` decodes of ``context`` tokens in all
    (longest and shortest as in ``StepShape``): looked up at the mean KV, moved
    towards the longest's time by the skew fit's alpha where there is one."""
    if num_seqs == 0:
        return 0.0
    kv = (context - layout[DECODE_HISTORY] * num_seqs) / num_seqs
    mean_s = grid_point(tables, layout, grids[1], float(num_seqs), kv)
    if layout[HAS_SKEW] and mean_s == mean_s:
        return skewed_decode_s(
            tables, layout, grids[1], mean_s, num_seqs, kv, max_context, min_context
        )
    return mean_s


def prefill_attention_s(
    tables: Tables, layout: Layout, grids: Grids, prefill_seqs: int, prefill_tokens: int,
    pairs: int, kv_read: int,
) -> float:  # fmt: skip
    """One layer's attention over the step's prefill chunks, without its decodes.

    Chunks no longer than their cached context (a speculative verification, a
    prefix-cache hit's last tokens: KV-read-bound) are floored at the decode
    attention of their sequences at their cached contexts: such a chunk reads
    that KV and more, which scaling a whole prompt's time by attention pairs
    leaves out. Longer chunks are compute-bound: no floor."""
    if prefill_seqs == 0 or prefill_tokens == 0:
        return 0.0
    chunk, cached = prefill_chunk(prefill_seqs, prefill_tokens, kv_read)
    if layout[PROFILE_ATTENTION]:
        chunks_s = prefill_seqs * grid_point(tables, layout, grids[0], chunk, cached)
    else:
        total = chunk + cached
        full = grid_point(tables, layout, grids[0], float(prefill_seqs), total)
        pairs_full = prefill_seqs * total * (total + 1.0) / 2.0
        scaled = full * pairs / pairs_full
        floor = grid_point(tables, layout, grids[0], float(prefill_seqs), chunk)
        if full != full or floor != floor:
            return NAN
        chunks_s = scaled if scaled > floor else floor
    num_cached = kv_read - prefill_tokens
    if num_cached < prefill_tokens:
        return chunks_s
    # No longest or shortest context given (0): the chunks' own decodes at their mean.
    decode_s = decode_attention_s(
        tables, layout, grids, prefill_seqs, num_cached + prefill_seqs, 0, 0
    )
    if decode_s != decode_s:
        return decode_s
    return chunks_s if chunks_s > decode_s else decode_s


def mixed_attention_s(
    tables: Tables, layout: Layout, grids: Grids, prefill_seqs: int, prefill_tokens: int,
    kv_read: int, decode_seqs: int, context: int, max_context: int, min_context: int,
) -> float:  # fmt: skip
    """One layer's varlen attention over prefill chunks and decodes, from the profile:
    ``mixed(c, p, n, kv) + (b - 1) * pre(c, p)`` at the decode count, mean decode KV
    (``context / n - 1``: the profile's KV excludes the token being computed) and one
    of ``b`` equal chunks (``prefill_chunk``; why: ``docs/kernels.md``)."""
    chunk, cached = prefill_chunk(prefill_seqs, prefill_tokens, kv_read)
    n = decode_seqs
    kv = (context - n) / n
    one = grid_point_4d(tables, layout, grids[2], chunk, cached, float(n), kv)
    if layout[HAS_SKEW]:  # uneven decodes: towards the longest (skew_alpha)
        kv_max = max_context - 1
        alpha = skew_alpha(tables, layout, chunk, cached, n, kv, kv_max, min_context - 1)
        if alpha != 0.0:
            max_s = grid_point_4d(tables, layout, grids[2], chunk, cached, float(n), float(kv_max))
            if max_s != max_s:
                return max_s
            one = blend_s(one, max_s, alpha)
    if prefill_seqs == 1:
        return one
    return one + (prefill_seqs - 1) * grid_point(tables, layout, grids[0], chunk, cached)


def mixed_decode_factor(
    tables: Tables, layout: Layout, grids: Grids, prefill_seqs: int, prefill_tokens: int,
    kv_read: int, decode_seqs: int, context: int,
) -> float:  # fmt: skip
    """How much longer a mixed step's decodes take in FA2's varlen kernel than in
    the pure decode kernel (``mixed_factor``; 1.0 without a factor or without both
    phases), at the step's mean chunk, cached prefill, decode count and mean KV."""
    if not layout[HAS_MIXED_FACTOR] or prefill_tokens == 0 or decode_seqs == 0:
        return 1.0
    chunk, cached = prefill_chunk(prefill_seqs, prefill_tokens, kv_read)
    kv = (context - decode_seqs) / decode_seqs
    return clamped_point_4d(tables, layout, grids[2], chunk, cached, float(decode_seqs), kv)


def clamped_point_4d(
    tables: Tables, layout: Layout, grid: Grid4, x0: float, x1: float, x2: float, x3: float
) -> float:
    """The 4-D ``grid`` at one point, each coordinate clamped to its axis's last point
    (a ratio does not grow past the lattice): ``MixedDecodeFactor``'s lookup."""
    last0 = tables[grid[1] + grid[2] - 1]
    last1 = tables[grid[3] + grid[4] - 1]
    last2 = tables[grid[5] + grid[6] - 1]
    last3 = tables[grid[7] + grid[8] - 1]
    return grid_point_4d(
        tables, layout, grid, x0 if x0 < last0 else last0, x1 if x1 < last1 else last1,
        x2 if x2 < last2 else last2, x3 if x3 < last3 else last3,
    )  # fmt: skip


def attention_s(
    tables: Tables, layout: Layout, grids: Grids, prefill_seqs: int, prefill_tokens: int,
    pairs: int, kv_read: int, decode_seqs: int, context: int, max_context: int,
    min_context: int,
) -> float:  # fmt: skip
    """One layer's attention for the step (``decode_seqs`` or ``prefill_tokens`` > 0).

    With a mixed-batch profile, a step with both prefill and decodes is one
    varlen kernel (``mixed_attention_s``); otherwise the pure parts add, the
    decodes of a mixed step on FA2 tables slowed by ``mixed_decode_factor``.
    """
    if layout[HAS_MIXED] and prefill_tokens != 0 and decode_seqs != 0:
        return mixed_attention_s(
            tables, layout, grids, prefill_seqs, prefill_tokens, kv_read, decode_seqs, context,
            max_context, min_context,
        )  # fmt: skip
    decode = decode_attention_s(
        tables, layout, grids, decode_seqs, context, max_context, min_context
    )
    if layout[HAS_MIXED_FACTOR] and prefill_tokens != 0 and decode_seqs != 0:
        decode = decode * mixed_decode_factor(
            tables, layout, grids, prefill_seqs, prefill_tokens, kv_read, decode_seqs, context
        )
    return (
        prefill_attention_s(tables, layout, grids, prefill_seqs, prefill_tokens, pairs, kv_read)
        + decode
    )


def put_grid(
    tables: MutableSequence[float], layout: MutableSequence[int], g: int,
    axes: Sequence[list[float]], flat: list[float], strides: Sequence[int],
) -> None:  # fmt: skip
    """A grid appended to ``tables`` and described at ``layout[g:]``: each axis's
    offset and length, then the values' offset and each axis's stride (0 along an
    axis of one point) in values."""
    for d, axis in enumerate(axes):
        layout[g + 2 * d], layout[g + 2 * d + 1] = len(tables), len(axis)
        tables.extend(axis)
    at = g + 2 * len(axes)
    layout[at] = len(tables)
    tables.extend(flat)
    for d, stride in enumerate(strides):
        layout[at + 1 + d] = stride if len(axes[d]) > 1 else 0
