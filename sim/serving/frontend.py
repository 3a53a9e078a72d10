"""The frontend: the server process that turns engine outputs into streamed chunks.

vLLM v1's API server (``AsyncLLM.output_handler``), modelled as one server with a
queue behind each replica (docs/vllm-fidelity.md, "The way out"): a step with
``n`` outputs costs it ``step_s + per_output_s * n``; it handles the steps
waiting when it looks as one batch, so a lagging frontend merges a request's
tokens from several steps into one chunk. The engine never waits for it:
everything is computed from the step log after the run, per replica.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray
from sim.engine.step_runs import SLICE_STEPS, Delivered, StepTable


def delivery_s(
    ends_s: npt.ArrayLike,
    num_outputs: npt.ArrayLike,
    step_s: float,
    per_output_s: float,
) -> FloatArray:
    """When each of one replica's steps' outputs reach the client (s; NaN: no output)."""
    ends = np.asarray(ends_s, dtype=np.float64)
    outputs = np.asarray(num_outputs, dtype=np.int64)
    if _never_lags(ends, outputs, step_s, per_output_s):
        return Delivered(step_s, per_output_s).times_s(ends, outputs)
    delivered = np.full(ends.shape, np.nan)
    has_output = outputs > 0
    if not has_output.any():
        return delivered
    arrive = ends[has_output]
    cost = step_s + per_output_s * outputs[has_output]
    # Lindley's recursion done_k = max(done_{k-1}, arrive_k) + cost_k, closed
    # form: done_k = C_k + max_{j<=k}(arrive_j - C_{j-1}), C the cost cumsum.
    total = np.cumsum(cost)
    done = total + np.maximum.accumulate(arrive - (total - cost))
    # A step arriving while the frontend is busy with the one before starts a lag.
    lagging = np.flatnonzero(arrive[1:] < done[:-1]) + 1
    out = arrive + cost  # a step the frontend finds idle (exact, no cumsum rounding)
    if lagging.size:
        _batch_lagging(arrive, total, lagging, out)
    delivered[has_output] = out
    return delivered


def _never_lags(
    ends: FloatArray, outputs: npt.NDArray[np.integer], step_s: float, per_output_s: float
) -> bool:
    """Whether every step with output finds the frontend idle (the usual case: then
    each is delivered at its end plus its cost, ``Delivered.times_s``), in slices."""
    previous_done_s = -np.inf
    for start in range(0, len(ends), SLICE_STEPS):
        stop = start + SLICE_STEPS
        counts = outputs[start:stop]
        has = counts > 0
        arrive = ends[start:stop][has]
        if arrive.size == 0:
            continue
        done = step_s + per_output_s * counts[has].astype(np.int64)
        done += arrive  # arrive + cost: IEEE addition commutes, so the same bits
        if arrive[0] < previous_done_s or bool((arrive[1:] < done[:-1]).any()):
            return False
        previous_done_s = float(done[-1])
    return True


def _batch_lagging(
    arrive: FloatArray, total: FloatArray, lagging: npt.NDArray[np.intp], out: FloatArray
) -> None:
    """Rewrite ``out`` inside busy periods: the steps waiting when the frontend looks
    are one batch, delivered together at the Lindley time of its last step."""
    n = len(arrive)
    is_lagging = np.zeros(n, dtype=bool)
    is_lagging[lagging] = True
    k = int(lagging[0]) - 1  # the step that opened the first busy period
    while k < n:
        # [k, stop): one busy period, opened by step k.
        stop = k + 1
        while stop < n and is_lagging[stop]:
            stop += 1
        start_s = float(arrive[k])
        first = k
        while first < stop:
            # Everything that has arrived by start_s, at least step ``first``.
            last = int(np.searchsorted(arrive, start_s, side="right")) - 1
            last = min(max(last, first), stop - 1)
            before = total[first - 1] if first > 0 else 0.0
            end_s = start_s + float(total[last] - before)
            out[first : last + 1] = end_s
            first = last + 1
            start_s = end_s
        nxt = np.searchsorted(lagging, stop)
        if nxt >= len(lagging):
            return
        k = int(lagging[nxt]) - 1


def deliver(steps: StepTable, step_s: float, per_output_s: float) -> StepTable:
    """Every replica's steps with their delivery times, stored as ``Delivered``'s rule
    plus the steps where the frontend lagged (usually none)."""
    parts = []
    for part in steps.parts:
        outputs = part.column("num_outputs")
        rule = Delivered(step_s, per_output_s)
        if not _never_lags(part.end_s, outputs, step_s, per_output_s):
            exact = delivery_s(part.end_s, outputs, step_s, per_output_s)
            by_rule = rule.times_s(part.end_s, outputs)
            lagged = np.flatnonzero((exact != by_rule) & ~np.isnan(by_rule))
            rule = Delivered(step_s, per_output_s, lagged, exact[lagged])
        parts.append(part.with_delivery(rule))
    return StepTable(tuple(parts))


class Delivery:
    """Maps engine times of token-emitting steps to when the client sees them.

    ``parts``: each replica's number, step ends and delivery times, in time order.
    A time is looked up among its replica's step ends, then among every replica's
    (with disaggregation the first token comes from a prefill replica).
    """

    def __init__(self, parts: Iterable[tuple[int, FloatArray, FloatArray]]) -> None:
        # Per replica, only steps with output (views unless some step had none).
        self._by_replica = {r: _with_output(ends, delivered) for r, ends, delivered in parts}
        self._everywhere: tuple[FloatArray, FloatArray] | None = None

    @classmethod
    def of(cls, steps: StepTable) -> Delivery:
        """The client times of ``steps``, with delivery times (``deliver``)."""
        parts = []
        for part in steps.parts:
            if part.delivery is None:
                raise ValueError(f"replica {part.replica}'s steps have no delivery times")
            parts.append((part.replica, part.end_s, part.column("delivered_s")))
        return cls(parts)

    def _all(self) -> tuple[FloatArray, FloatArray]:
        """Every replica's steps in time order (built on first need: it copies the log)."""
        if self._everywhere is None:
            pairs = list(self._by_replica.values())
            ends = np.concatenate([e for e, _ in pairs]) if pairs else np.empty(0)
            delivered = np.concatenate([d for _, d in pairs]) if pairs else np.empty(0)
            order = np.argsort(ends, kind="stable")
            self._everywhere = (ends[order], delivered[order])
        return self._everywhere

    def client_s(self, times_s: npt.ArrayLike, replicas: npt.ArrayLike | None = None) -> FloatArray:
        """Client times of engine ``times_s`` (NaN stays NaN)."""
        times = np.asarray(times_s, dtype=np.float64)
        out = np.full(times.shape, np.nan)
        known = np.isfinite(times)
        owners = np.zeros(times.shape, dtype=np.int64) if replicas is None else np.asarray(replicas)
        # Only the replicas owning some time: every replica for each of a cluster's
        # per-replica calls would be quadratic in replicas (10,000: hours).
        for replica in set(owners[known].tolist()):  # not np.unique: it imports numpy.ma
            steps = self._by_replica.get(replica)
            if steps is not None:
                mine = known & (owners == replica)
                out[mine] = _lookup(*steps, times[mine])
        missing = known & np.isnan(out)
        if missing.any():
            out[missing] = _lookup(*self._all(), times[missing])
        if (known & np.isnan(out)).any():
            first = float(times[known & np.isnan(out)][0])
            raise ValueError(f"no step with output ends at {first!r}: wrong step log?")
        return out


def _with_output(ends: FloatArray, delivered: FloatArray) -> tuple[FloatArray, FloatArray]:
    has = np.isfinite(delivered)
    return (ends, delivered) if has.all() else (ends[has], delivered[has])


def _lookup(ends: FloatArray, delivered: FloatArray, times: FloatArray) -> FloatArray:
    """``delivered`` of the step ending at each time (to float rounding), else NaN."""
    out = np.full(times.shape, np.nan)
    if ends.size == 0 or times.size == 0:
        return out
    i = np.clip(np.searchsorted(ends, times), 1, max(ends.size - 1, 1))
    left = np.clip(i - 1, 0, ends.size - 1)
    right = np.clip(i, 0, ends.size - 1)
    pick = np.where(np.abs(ends[left] - times) <= np.abs(ends[right] - times), left, right)
    close = np.abs(ends[pick] - times) <= 1e-9 * np.maximum(1.0, np.abs(times))
    out[close] = delivered[pick[close]]
    return out
