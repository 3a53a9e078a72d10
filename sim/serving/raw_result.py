"""A run's raw result: every replica's outputs merged, as the client sees them.

``Simulation`` hands ``raw_result`` one ``CoreOutput`` per replica, in replica
order: what its engine core left after the run. A replica simulated in another
process sends its outputs back, pickled: they hold arrays only, never the
core, its requests or its KV blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sim.engine.columns import frame_of
from sim.engine.records import Records, RequestTable
from sim.engine.scheduler import EngineCore
from sim.engine.step_runs import StepRuns, StepTable
from sim.serving.frontend import Delivery, deliver
from sim.serving.replica_config import FrontendConfig

if TYPE_CHECKING:  # pandas loads where frames are built (docs/dev/speed.md)
    import pandas as pd


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
    records: Records
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


@dataclass
class RawResult:
    """What a run produced, before metrics: see ``sim.results``.

    ``records`` is the per-request table (``requests`` as a frame, built when
    asked for); a disaggregated run's joins each request's prefill and decode
    records (``Disaggregated.requests_table``). Its ``first_token_s``
    and ``finish_s`` are client times (after the frontend);
    ``engine_first_token_s`` and ``engine_finish_s`` the ends of the engine
    steps that produced those tokens. ``step_table`` is the step log with each
    step's ``delivered_s``, compact; ``steps`` expands it to one row per step
    on first use. ``series``: each replica's sampled queue state, as columns
    (``timeseries`` as a frame). ``extra_itl_s`` holds the client-side gaps the
    step log's weights do not cover (tokens after a break in a request's run).
    ``accelerator``: the name of the speed path that simulated the run, where
    one says so (the results are the same either way); None: the reference.
    ``num_sent``: the requests the workload sent (``Simulation.run`` sets it), for
    the check that each is recorded (``sim.metrics.invariants``); None: not known.
    """

    records: RequestTable
    step_table: StepTable
    series: dict[str, npt.NDArray[Any]]
    extra_itl_s: npt.NDArray[np.float64]
    later_runs: dict[int, list[tuple[float, int]]]
    rejections: dict[int, str]
    num_replicas: int = 1
    accelerator: str | None = None
    num_sent: int | None = None

    @functools.cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request (built on first use)."""
        return self.records.frame()

    @functools.cached_property
    def timeseries(self) -> pd.DataFrame:
        """Each replica's queue state at every plan, replicas one after another."""
        return frame_of(self.series)

    @functools.cached_property
    def steps(self) -> pd.DataFrame:
        """The step log, one row per step (``StepTable.frame``: tens of millions of
        rows for a long run, so built only when asked)."""
        return self.step_table.frame()


def raw_result(
    outputs: Sequence[CoreOutput],
    frontend: FrontendConfig,
    disaggregated: Callable[[Records, Mapping[int, str]], RequestTable] | None = None,
) -> RawResult:
    """Every replica's records, step log and series, concatenated (with ``replica``),
    and token times through the frontend: the run as the client sees it.

    ``disaggregated``: a disaggregated layout's ``requests_table``, which joins
    each request's prefill and decode records into one row.
    """
    records = _concat([output.records for output in outputs])
    rejections: dict[int, str] = {}
    later_runs: dict[int, list[tuple[float, int]]] = {}
    for output in outputs:
        rejections.update(output.rejections)
        later_runs.update(output.later_runs)
    if disaggregated is None:
        # In request id order (ids are unique: any sort gives this order).
        order = np.argsort(records["request_id"], kind="stable")
        requests = RequestTable(
            {name: values[order] for name, values in records.items()}, rejections
        )
    else:
        requests = disaggregated(records, rejections)
    steps = StepTable(tuple(output.runs for output in outputs))
    steps = deliver(steps, frontend.output_step_s, frontend.detokenize_s_per_token)
    delivery = Delivery.of(steps)
    first_on = requests["replica"]
    if "prefill_replica" in requests:  # disaggregated: first token from there
        prefill = requests["prefill_replica"]
        first_on = np.where(np.isnan(prefill), first_on, np.nan_to_num(prefill)).astype(int)
    requests["engine_first_token_s"] = requests["first_token_s"]
    requests["engine_finish_s"] = requests["finish_s"]
    requests["first_token_s"] = delivery.client_s(requests["first_token_s"], first_on)
    requests["finish_s"] = delivery.client_s(requests["finish_s"], requests["replica"])
    gaps = []
    for output in outputs:
        gap, start = output.extra_itl_s, output.extra_itl_from_s
        owner = np.full(gap.shape, output.replica)
        client_gap = delivery.client_s(start + gap, owner) - delivery.client_s(start, owner)
        gaps.append(client_gap[client_gap > 0])  # 0: both tokens left in one chunk
    return RawResult(
        records=requests,
        step_table=steps,
        series=_concat([output.series for output in outputs]),
        extra_itl_s=np.concatenate(gaps),
        later_runs=later_runs,
        rejections=rejections,
        num_replicas=len(outputs),
    )


def _concat(tables: list[Records]) -> Records:
    """Tables of the same columns, one after another (one: itself)."""
    if len(tables) == 1:
        return dict(tables[0])
    return {name: np.concatenate([table[name] for table in tables]) for name in tables[0]}
