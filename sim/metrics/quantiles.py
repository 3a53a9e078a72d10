"""Weighted latency statistics, never expanded to one value per token.

A million requests give tens of millions of (gap, weight) pairs; sorting them
with an index permutation took five arrays of their length. ``weighted_quantiles``
finds the few values it needs by a radix select in slices instead, and for
integer weights gives the same values, to the bit, as sorting everything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray
from sim.errors import ConfigError

Summary = dict[str, float | int | None]

_DIRECT = 1 << 19  # at most this many pairs: sorted outright (faster than the passes below ~500k)
_SLICE = 1 << 19  # pairs per slice of a pass (bounds its temporaries to ~15 MB)


def weighted_quantiles(
    values: npt.ArrayLike, weights: npt.ArrayLike, qs: npt.ArrayLike
) -> FloatArray:
    """Quantiles ``qs`` (in [0, 1]) of ``values`` where each value counts ``weight`` times.

    For integer weights, ``np.percentile(np.repeat(values, weights), 100 * qs)``
    (numpy's ``linear`` method: position ``h = q (N - 1)`` of the sorted expanded
    list, ``N`` the total weight, interpolated between ``floor(h)`` and the next);
    real weights use the same formula. NaN for every ``q`` when the total weight is 0.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    w = np.asarray(weights).ravel()
    q = np.asarray(qs, dtype=np.float64)
    if v.shape != w.shape:
        raise ValueError(f"values and weights differ in length: {v.size} vs {w.size}")
    if not np.all(np.isfinite(w) & (w >= 0)):
        raise ValueError("weights must be finite and non-negative")
    if np.any(~(q >= 0) | ~(q <= 1)):
        raise ValueError("quantiles must lie in [0, 1]")
    w = w.astype(np.float64, copy=False)
    keep = w > 0
    if not keep.all():
        v, w = v[keep], w[keep]
    if v.size == 0:
        return np.full(q.shape, np.nan)
    last = max(float(w.sum()) - 1.0, 0.0)  # position of the last expanded element
    h = q * last
    lo = np.floor(h)
    hi = np.minimum(lo + 1.0, last)
    found = _values_at_positions(v, w, np.concatenate([lo.ravel(), hi.ravel()]))
    v_lo, v_hi = found[: lo.size].reshape(q.shape), found[lo.size :].reshape(q.shape)
    result: FloatArray = v_lo + (h - lo) * (v_hi - v_lo)
    return result


def _values_at_positions(v: FloatArray, w: FloatArray, positions: FloatArray) -> FloatArray:
    """The value at each position of the sorted expanded list; NaNs sort last."""
    nan = np.isnan(v)
    if not nan.any():
        return _values_at(v, w, positions)
    v, w = v[~nan], w[~nan]
    out = np.full(positions.shape, np.nan)
    before_nan = positions < float(w.sum())
    if before_nan.any():
        out[before_nan] = _values_at(v, w, positions[before_nan])
    return out


def _values_at(v: FloatArray, w: FloatArray, positions: FloatArray, level: int = 0) -> FloatArray:
    """The value at each position of the sorted expanded list (no NaN in ``v``): the
    smallest value whose pairs with values <= it weigh more than the position. A
    radix select: values are bucketed by the next bits of their order-preserving
    64-bit keys, and only the buckets holding a position are searched further.
    """
    if v.size <= _DIRECT:
        order = np.argsort(v)
        running = np.cumsum(w[order])
        found = np.searchsorted(running, positions, side="right")
        return v[order[np.minimum(found, v.size - 1)]]
    shift, width = _LEVELS[level]
    bucket_weights = np.zeros(1 << width)
    for start in range(0, v.size, _SLICE):
        part = slice(start, start + _SLICE)
        digits = _digits(v[part], shift, width)
        bucket_weights += np.bincount(digits, weights=w[part], minlength=bucket_weights.size)
    running = np.cumsum(bucket_weights)
    where = np.searchsorted(running, positions, side="right")
    # (Only real weights' rounding can put a position past the last bucket with weight.)
    where = np.minimum(where, int(np.flatnonzero(bucket_weights)[-1]))
    buckets = np.unique(where).tolist()
    pieces: dict[int, list[tuple[FloatArray, FloatArray]]] = {bucket: [] for bucket in buckets}
    for start in range(0, v.size, _SLICE):  # one more pass: the pairs in those buckets
        part = slice(start, start + _SLICE)
        digits = _digits(v[part], shift, width)
        for bucket, chunks in pieces.items():
            inside = digits == bucket
            if inside.any():
                chunks.append((v[part][inside], w[part][inside]))
    out = np.empty(positions.shape)
    for bucket in buckets:
        chunks = pieces.pop(bucket)
        mine = where == bucket
        if level + 1 == len(_LEVELS):  # every key bit used: one value in the bucket
            out[mine] = chunks[0][0][0]
            continue
        sub_v = np.concatenate([values for values, _ in chunks])
        sub_w = np.concatenate([weights for _, weights in chunks])
        del chunks
        before = float(running[bucket - 1]) if bucket > 0 else 0.0
        out[mine] = _values_at(sub_v, sub_w, positions[mine] - before, level + 1)
    return out


# (shift, width) of the key bits each level buckets by: 2**20 buckets first
# (~0.3 % of an octave each, so even a tight distribution spreads out).
_LEVELS = ((44, 20), (28, 16), (12, 16), (0, 12))
_SIGN = np.uint64(1 << 63)


def _digits(x: FloatArray, shift: int, width: int) -> npt.NDArray[np.intp]:
    """Bits ``shift .. shift + width`` of each value's key, a uint64 ordered as the floats."""
    bits = x.view(np.uint64)
    negative = bits >= _SIGN
    # Positive floats: set the sign bit; negative ones: flip every bit.
    key = bits ^ np.where(negative, np.uint64(0xFFFF_FFFF_FFFF_FFFF), _SIGN)
    key >>= np.uint64(shift)
    key &= np.uint64((1 << width) - 1)
    return key.astype(np.intp)


def percentile_label(p: float) -> str:
    """vllm's key spelling of a percentile: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def percentile_key(p: float, metric: str) -> str:
    """The summary's key of ``metric``'s ``p``-th percentile, ``p99.9_ttft_ms``: every
    place that names one (the summary, its caveats, vllm's result JSON) spells it here."""
    return f"p{percentile_label(p)}_{metric}_ms"


def check_percentiles(percentiles: Sequence[float]) -> None:
    """Raise ``ConfigError`` for a percentile outside [0, 100]."""
    bad = [p for p in percentiles if not 0 <= p <= 100]
    if bad:
        raise ConfigError(f"percentiles: {bad} outside [0, 100]")


def latency_stats_ms(
    name: str,
    values_s: npt.ArrayLike,
    weights: npt.ArrayLike | None = None,
    percentiles: Sequence[float] = (90, 99),
    overwrite: bool = False,
) -> Summary:
    """``mean_/median_/std_/p<P>_<name>_ms`` of (weighted) latencies given in seconds,
    non-finite values dropped (``None`` when nothing is left); ``std`` as ``np.std``
    (and vllm). ``overwrite``: reuse ``values_s``'s memory (tens of millions of gaps)."""
    check_percentiles(percentiles)
    v = np.asarray(values_s, dtype=np.float64).ravel()
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    keep = np.isfinite(v)
    if not keep.all():
        v, w = v[keep], w[keep]
        overwrite = True  # a copy of our own
    total = float(w.sum())
    keys = [f"{s}_{name}_ms" for s in ("mean", "median", "std")]
    keys += [percentile_key(p, name) for p in percentiles]
    if total <= 0:
        return dict.fromkeys(keys, None)
    mean = float(np.dot(w, v) / total)
    qs = np.array([0.5, *(p / 100 for p in percentiles)])
    quantiles = weighted_quantiles(v, w, qs)
    squares = v if overwrite else v.copy()
    squares -= mean
    squares *= squares
    std = float(np.sqrt(max(float(np.dot(w, squares)) / total, 0.0)))
    del squares
    stats = [mean, float(quantiles[0]), std, *(float(x) for x in quantiles[1:])]
    return {key: 1000.0 * s for key, s in zip(keys, stats, strict=True)}
