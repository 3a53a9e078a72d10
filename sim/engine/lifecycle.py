"""An opt-in recorder of what each of the first N requests did in each step.

``servesim run --trace`` attaches one ``ActivityRecorder`` to every engine core
(``EngineCore.recorder``). It logs every prefill chunk and run of decode steps
of the tracked requests, with their preemption and swap counts then (so
``sim.metrics.trace`` tells a preemption gap from a wait), and detaches once
they have all finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.engine.columns import Columns
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, SchedulerOutput

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd

PREFILL, DECODE = 0, 1
ACTIVITY_KINDS = {PREFILL: "prefill", DECODE: "decode"}
ACTIVITY_COLUMNS = {
    "request_id": "i8",
    "replica": "i4",
    "kind": "i4",  # PREFILL or DECODE
    "start_s": "f8",
    "end_s": "f8",
    "num_tokens": "i8",  # prompt tokens computed (prefill) or decode steps (decode)
    "num_preemptions": "i8",
    "num_swaps": "i8",
}


class ActivityRecorder:
    """Per-step activity of the requests with ``request_id < num_requests``."""

    def __init__(self, num_requests: int) -> None:
        if num_requests < 0:
            raise ValueError(f"num_requests must be >= 0, got {num_requests}")
        self.num_requests = num_requests
        self.activity = Columns(ACTIVITY_COLUMNS)
        self._open = set(range(num_requests))  # tracked requests not yet finished
        self._seen_last_commit: list[Request] = []
        self._cores: list[EngineCore] = []

    @property
    def attached(self) -> bool:
        return bool(self._cores)

    def attach(self, cores: Sequence[EngineCore]) -> None:
        """Listen to every commit of ``cores`` (a run's replicas share one recorder)."""
        self._cores = list(cores)
        for core in self._cores:
            core.recorder = self if self.num_requests > 0 else None
        if self.num_requests == 0:
            self._cores = []

    def detach(self) -> None:

        for core in self._cores:
            core.recorder = None
        self._cores = []

    def on_commit(
        self, core: EngineCore, output: SchedulerOutput, start_s: float, ends_s: list[float]
    ) -> None:
        """Log the tracked requests of ``output``, run for ``len(ends_s)`` steps."""
        self._close_finished(core)
        limit = self.num_requests
        append = self.activity.append
        seen = []
        for request, num_new in output.scheduled:
            if request.request_id >= limit:
                continue
            seen.append(request)
            ids = (request.request_id, core.replica)
            counts = (request.num_preemptions, request.num_swaps)
            if request.is_decoding:
                append(*ids, DECODE, start_s, ends_s[-1], len(ends_s), *counts)
                continue
            append(*ids, PREFILL, start_s, ends_s[0], num_new, *counts)
            if len(ends_s) > 1:  # the chunk ended the prefill; decode steps follow
                append(*ids, DECODE, ends_s[0], ends_s[-1], len(ends_s) - 1, *counts)
        self._seen_last_commit = seen

    def _close_finished(self, core: EngineCore) -> None:
        """Drop tracked requests that finished in the last commit; detach when none is left."""
        for request in self._seen_last_commit:
            if request.finish_s is not None:
                self._open.discard(request.request_id)
        self._seen_last_commit = []
        rejections = core.rejections
        if len(self._open) <= len(rejections):  # rejected ones are never scheduled
            self._open = {i for i in self._open if i not in rejections}
        if not self._open:
            self.detach()

    def frame(self) -> pd.DataFrame:
        """The activity log, one row per prefill chunk or decode run, ``kind`` as text."""
        frame = self.activity.frame().copy()
        frame["kind"] = frame["kind"].map(ACTIVITY_KINDS)
        return frame
