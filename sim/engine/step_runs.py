"""The step log: every engine step's times and token counts, stored by runs.

Every token time is derived from it (``sim.engine.tokens``), nothing is stored
per token. Each step's end time is stored per step (8 bytes), the rest once per
*segment*: one ``add_step``, or a skip-ahead run of k decode steps of one shape
(``add_decode_run``), each starting where the one before ended (a million
requests: ~230 MB instead of ~460 MB of rows). It is read as numpy arrays
(``StepRuns``, ``StepTable``); ``frame()`` expands it to one row per step
(``STEP_COLUMNS``) only when asked (44 bytes a step).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sim.config import FloatArray, IntArray
from sim.engine.columns import Columns, frame_of

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd


COUNT_COLUMNS = ("num_prefill_tokens", "num_decode_seqs", "num_itl_tokens", "num_outputs")
STEP_COLUMNS = {"start_s": "f8", "end_s": "f8", **dict.fromkeys(COUNT_COLUMNS, "i4")}
# One row per segment: its first step's start, its number of steps, and its counts.
SEGMENT_COUNTS = ("num_steps", *COUNT_COLUMNS)  # the segments' i4 group, in row order
SEGMENT_COLUMNS = {"start_s": "f8", **dict.fromkeys(SEGMENT_COUNTS, "i4")}
SLICE_STEPS = 1 << 20  # steps per slice when delivery times are worked out (~40 MB)


class StepLog:
    """``start_s``, ``end_s`` and token counts of each step, in order.

    ``num_itl_tokens``: tokens emitted by requests that also emitted in the step
    before, each an inter-token gap of the step's duration. ``num_outputs``:
    requests that got output in the step (the frontend's work).
    """

    def __init__(self) -> None:
        self._ends = array("d")
        self.segments = Columns(SEGMENT_COLUMNS)
        self._start = self.segments.group("f8", ("start_s",)).append
        self._counts = self.segments.group("i4", SEGMENT_COUNTS).extend

    def add_step(
        self,
        start_s: float,
        end_s: float,
        num_prefill_tokens: int,
        num_decode_seqs: int,
        num_itl_tokens: int,
        num_outputs: int,
    ) -> None:
        self._ends.append(end_s)
        self._start(start_s)
        self._counts((1, num_prefill_tokens, num_decode_seqs, num_itl_tokens, num_outputs))

    def add_decode_run(
        self,
        start_s: float,
        ends_s: list[float],
        num_decode_seqs: int,
        num_itl_tokens: int,
    ) -> None:
        """Log k decode-only steps back to back from ``start_s``, as one segment (each
        request's token in each is both an inter-token gap and an output)."""
        if not ends_s:
            return
        self._ends.extend(ends_s)
        self._start(start_s)
        self._counts((len(ends_s), 0, num_decode_seqs, num_itl_tokens, num_itl_tokens))

    @property
    def ends(self) -> array[float]:
        """Each step's end time (s): the log's own array."""
        return self._ends

    def runs(self, replica: int = 0) -> StepRuns:
        """The log as numpy arrays sharing memory with it (no copy), tagged ``replica``."""
        return StepRuns.of(self._ends, self.segments, replica)

    def frame(self) -> pd.DataFrame:
        """One row per step (``STEP_COLUMNS``); ``end_s`` shares memory with the log."""
        return self.runs().frame()


@dataclass(frozen=True)
class Delivered:
    """When each step's outputs reached the client (``sim.serving.frontend``): at its
    end plus ``step_s + per_output_s * num_outputs``, but the steps where the
    frontend lagged, listed with their times (``lagged_steps``, in order)."""

    step_s: float
    per_output_s: float
    lagged_steps: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    lagged_s: FloatArray = field(default_factory=lambda: np.empty(0))

    def times_s(
        self, end_s: FloatArray, num_outputs: npt.NDArray[np.integer], first_step: int = 0
    ) -> FloatArray:
        """Delivery times of consecutive steps from ``first_step`` (NaN: no output)."""
        out = np.full(end_s.shape, np.nan)
        for start in range(0, end_s.size, SLICE_STEPS):  # (temporaries of a slice only)
            part = slice(start, start + SLICE_STEPS)
            outputs = num_outputs[part]
            has = outputs > 0
            # The frontend's own formula, to the bit (sim.serving.frontend).
            done = self.step_s + self.per_output_s * outputs[has].astype(np.int64)
            done += end_s[part][has]
            out[part][has] = done
        lo, hi = np.searchsorted(self.lagged_steps, [first_step, first_step + end_s.size])
        out[self.lagged_steps[lo:hi] - first_step] = self.lagged_s[lo:hi]
        return out


@dataclass(frozen=True)
class StepRuns:
    """One replica's steps: ``end_s`` per step, the rest per segment; ``delivery``,
    when set, gives ``frame()``'s ``delivered_s``."""

    end_s: FloatArray
    segments: dict[str, npt.NDArray[Any]]
    replica: int = 0
    delivery: Delivered | None = None

    @classmethod
    def of(cls, ends_s: array[float], segments: Columns, replica: int = 0) -> StepRuns:
        """Views of a log's buffers (no copy)."""
        return cls(np.frombuffer(ends_s, dtype=np.float64), segments.views(), replica)

    @property
    def num_steps(self) -> int:
        return int(self.end_s.size)

    def with_delivery(self, delivery: Delivered) -> StepRuns:
        return dataclasses.replace(self, delivery=delivery)

    def column(self, name: str) -> npt.NDArray[Any]:
        """One column of ``frame()``, one entry per step (a view for ``end_s``)."""
        if name == "end_s":
            return self.end_s
        if name == "delivered_s" and self.delivery is not None:
            return self.delivery.times_s(self.end_s, self.column("num_outputs"))
        num_steps = self.segments["num_steps"]
        if name == "start_s":
            # Within a segment a step starts where the one before ended.
            starts = np.empty(self.num_steps)
            starts[1:] = self.end_s[:-1]
            starts[self._firsts()] = self.segments["start_s"]
            return starts
        if name not in COUNT_COLUMNS:
            raise KeyError(f"no step column {name!r}")
        return np.repeat(self.segments[name], num_steps)

    def _firsts(self) -> IntArray:
        """The index of each segment's first step."""
        num_steps = self.segments["num_steps"]
        firsts = np.cumsum(num_steps, dtype=np.int64)
        firsts -= num_steps
        return firsts

    def total(self, name: str) -> int:
        """Sum of a count column over all steps (exact, without expanding)."""
        counts = self.segments[name].astype(np.int64)
        return int(np.dot(counts, self.segments["num_steps"].astype(np.int64)))

    def overlapping(self, start_s: float, end_s: float) -> IntArray:
        """Indices, in order, of the steps with ``end > start_s`` and ``start < end_s``,
        expanding no column (only steps whose predecessor ended before ``end_s`` can
        start before it: their starts alone are worked out)."""
        ends = self.end_s
        previous_ends = np.empty_like(ends)
        previous_ends[:1] = -np.inf
        previous_ends[1:] = ends[:-1]
        candidates = np.flatnonzero((ends > start_s) & (previous_ends < end_s))
        return candidates[self.rows(candidates, ("start_s",))["start_s"] < end_s]

    def rows(
        self, index: IntArray, names: Sequence[str] = ("start_s", "end_s", *COUNT_COLUMNS)
    ) -> dict[str, npt.NDArray[Any]]:
        """Columns ``names`` of ``frame()`` at the steps ``index`` only."""
        firsts = self._firsts()
        # A step's segment: the last one starting at or before it (an empty
        # segment shares its first index with the next and is passed over).
        segment = np.searchsorted(firsts, index, side="right") - 1
        out: dict[str, npt.NDArray[Any]] = {}
        for name in names:
            if name == "end_s":
                out[name] = self.end_s[index]
            elif name == "start_s":
                after = self.end_s[np.maximum(index - 1, 0)]  # within a segment
                first = index == firsts[segment]
                out[name] = np.where(first, self.segments["start_s"][segment], after)
            elif name in COUNT_COLUMNS:
                out[name] = self.segments[name][segment]
            else:
                raise KeyError(f"no step column {name!r}")
        return out

    def frame_columns(self, with_replica: bool = False) -> dict[str, npt.NDArray[Any]]:
        """``frame()``'s columns, one entry per step."""
        columns = {name: self.column(name) for name in STEP_COLUMNS}
        if with_replica:
            columns["replica"] = np.full(self.num_steps, self.replica, dtype=np.int32)
        if self.delivery is not None:
            columns["delivered_s"] = self.column("delivered_s")
        return columns

    def frame(self, with_replica: bool = False) -> pd.DataFrame:
        """One row per step: ``STEP_COLUMNS``, ``replica`` if asked, ``delivered_s``."""
        return frame_of(self.frame_columns(with_replica))


@dataclass(frozen=True)
class StepTable:
    """A run's step logs, one ``StepRuns`` per replica, in the order of ``frame()``'s rows."""

    parts: tuple[StepRuns, ...]

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> StepTable:
        """A step log given as one row per step (``STEP_COLUMNS``, and ``replica`` and
        ``delivered_s`` where it has them; a replica's rows together), each row its own
        segment: ``from_frame(table.frame()).frame()`` equals ``table.frame()`` (if
        it has a step; a frame without rows is a table without parts). A saved
        ``steps.parquet`` (``Result.write(write_steps=True)``, that frame) read back with
        pandas comes back here to run ``sim.metrics`` on it again; tests and benchmarks
        use it as the expanded log the compact one must match."""
        missing = [name for name in STEP_COLUMNS if name not in frame.columns]
        if missing and len(frame):
            raise ValueError(f"steps frame lacks columns {missing}")
        if not len(frame):
            return cls(())
        num_rows = len(frame)
        replicas = np.zeros(num_rows, dtype=np.int64)
        if "replica" in frame.columns:
            replicas = frame["replica"].to_numpy(dtype=np.int64)
        bounds = [0, *(np.flatnonzero(np.diff(replicas)) + 1).tolist(), num_rows]
        owners = replicas[bounds[:-1]].tolist()
        if len(set(owners)) < len(owners):
            raise ValueError("steps frame: a replica's rows are not together")
        end_s = frame["end_s"].to_numpy(dtype=np.float64, copy=True)
        start_s = frame["start_s"].to_numpy(dtype=np.float64, copy=True)
        counts = {name: frame[name].to_numpy(dtype=np.int32) for name in COUNT_COLUMNS}
        delivered = None
        if "delivered_s" in frame.columns:
            delivered = frame["delivered_s"].to_numpy(dtype=np.float64, copy=True)
        parts = []
        for replica, lo, hi in zip(owners, bounds[:-1], bounds[1:], strict=True):
            segments = {"start_s": start_s[lo:hi], "num_steps": np.ones(hi - lo, dtype=np.int32)}
            segments |= {name: values[lo:hi] for name, values in counts.items()}
            delivery = None
            if delivered is not None:  # every step's time given: each listed as it is
                every = np.arange(hi - lo, dtype=np.int64)
                delivery = Delivered(0.0, 0.0, every, delivered[lo:hi])
            parts.append(StepRuns(end_s[lo:hi], segments, replica, delivery))
        return cls(tuple(parts))

    @property
    def num_steps(self) -> int:
        return sum(part.num_steps for part in self.parts)

    def part(self, replica: int) -> StepRuns:
        for part in self.parts:
            if part.replica == replica:
                return part
        raise KeyError(f"no steps of replica {replica}")

    def total(self, name: str) -> int:
        """Sum of a count column over every step of every replica."""
        return sum(part.total(name) for part in self.parts)

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        """``frame()``'s columns: one entry per step, replica after replica."""
        parts = [part.frame_columns(with_replica=True) for part in self.parts]
        if not parts:
            empty = {name: np.empty(0, dtype=dtype) for name, dtype in STEP_COLUMNS.items()}
            return {**empty, "replica": np.empty(0, dtype=np.int32)}
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    def frame(self) -> pd.DataFrame:
        """One row per step, replica after replica, with ``replica`` (and ``delivered_s``)."""
        return frame_of(self.columns())
