"""What one engine core leaves after a run: everything the result needs of it.

``Simulation`` builds its result from these, one per replica, in replica
order. A replica simulated in a worker process (``sim.serving.workers``)
sends its outputs back, pickled: they hold arrays only, never the core, its
requests or its KV blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.engine.scheduler import EngineCore
from sim.engine.step_runs import StepRuns


@dataclass(frozen=True)
class CoreOutput:
    """One replica's records, step log, sampled queue state and token gaps.

    ``records``: columns, one row per request that reached the core, in the order
    they left it (``RECORD_COLUMNS``). ``series``: columns, one row per plan
    (``SERIES_COLUMNS``), then ``kv_cache_usage`` (its share of the core's blocks)
    and ``replica``. ``extra_itl_s`` / ``extra_itl_from_s``:
    the gaps before tokens that broke a request's run of steps, and when each
    began (s, engine times).
    """

    replica: int
    records: dict[str, npt.NDArray[Any]]
    rejections: dict[int, str]
    later_runs: dict[int, list[tuple[float, int]]]
    runs: StepRuns
    series: dict[str, npt.NDArray[Any]]
    extra_itl_s: npt.NDArray[np.float64]
    extra_itl_from_s: npt.NDArray[np.float64]

    @classmethod
    def of(cls, core: EngineCore) -> CoreOutput:
        """``core``'s outputs; call once the run is over (after ``flush_unfinished``).

        The records are taken from the core (``EngineCore.take_records``): it is
        left with an empty table, and the result's copy in request order is then
        the only one held.
        """
        series = core.series.views()
        series["kv_cache_usage"] = series["num_kv_blocks_used"] / core.kv.num_blocks
        series["replica"] = np.full(len(series["time_s"]), core.replica, dtype=np.int32)
        return cls(
            replica=core.replica,
            records=core.take_records(),  # the core keeps none: see take_records
            rejections=core.rejections,
            later_runs=core.later_runs,
            runs=core.steps.runs(core.replica),
            series=series,
            extra_itl_s=np.asarray(core.extra_itl_s, dtype=np.float64),
            extra_itl_from_s=np.asarray(core.extra_itl_from_s, dtype=np.float64),
        )
